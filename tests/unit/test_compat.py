"""nvmount._compat: what Python 3.9/3.10 lack, the same on every supported version."""

from __future__ import annotations

import subprocess
import sys

from nvmount._compat import add_note, orig_argv
from nvmount.errors import MountError


def test_add_note_keeps_the_note_on_the_error() -> None:
    err = MountError("attach mount at", "/dev/nvidia0", "injected fault")
    add_note(err, "rollback incomplete: unmount /dev/nvidia0: busy")
    add_note(err, "second")
    assert err.__notes__ == ["rollback incomplete: unmount /dev/nvidia0: busy", "second"]


def test_orig_argv_rebuilds_a_script_run() -> None:
    """The re-exec without loader variables needs the exact command line (sys.orig_argv on
    3.10+, rebuilt from flags, script and arguments on 3.9)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from nvmount._compat import orig_argv;"
            " print(orig_argv()[1:])")
    out = subprocess.run([sys.executable, "-I", "-c", code, sys.path[0], "x", "--y"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("'x', '--y']")
    assert orig_argv()[-len(sys.argv) + 1:] == sys.argv[1:] or len(sys.argv) == 1
