"""`python3 -m nvhook` runs the command line."""

import sys

from nvhook.cli import main

sys.exit(main())
