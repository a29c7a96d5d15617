#!/usr/bin/python3 -I
"""An attacker's prestart step (test tool): plant entries in a starting container.

    plant.py SCRIPT        (OCI prestart hook: the state on stdin)

Runs `sh -c SCRIPT` inside the container's mount namespace (before pivot_root, like every
prestart hook), with $ROOTFS set to the container's rootfs host path. It stands for a sibling
container or a shared volume that controls parts of the container's /dev, /run or lib dirs
when nvhook's hook runs (runc mounts its /dev tmpfs over the image's /dev, so an image
alone cannot put entries there).
"""

import json
import os
import subprocess
import sys

state = json.load(sys.stdin)
bundle = state["bundle"]
with open(os.path.join(bundle, "config.json")) as f:
    root = json.load(f)["root"]["path"]
root = root if os.path.isabs(root) else os.path.join(bundle, root)
subprocess.run(
    ["nsenter", "-t", str(state["pid"]), "-m", "--", "/bin/sh", "-ec", sys.argv[1]],
    env={"ROOTFS": root, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    check=True,
)
