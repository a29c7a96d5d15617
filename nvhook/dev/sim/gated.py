"""The simulated driver's feature-gated device families (`nvhook sim create --gated`): GDS
(/dev/nvidia-fs0..1, /etc/cufile.json, /run/udev), MOFED (/dev/infiniband/uverbs0..1 and
rdma_cm), NVSwitch (/dev/nvidia-nvswitchctl, nvidia-nvswitch0..1) and GDRCopy (/dev/gdrdrv),
with the majors their kernel modules get on a DGX (nvidia-fs 246, infiniband_verbs 231,
misc 10 for rdma_cm, nvidia-nvswitch 509, gdrdrv 238)."""

from __future__ import annotations

import json
from pathlib import Path

from nvhook.dev.sim.devices import make_node

NODES = (("/dev/nvidia-fs0", 246, 0), ("/dev/nvidia-fs1", 246, 1),
         ("/dev/infiniband/uverbs0", 231, 192), ("/dev/infiniband/uverbs1", 231, 193),
         ("/dev/infiniband/rdma_cm", 10, 58),
         ("/dev/nvidia-nvswitchctl", 509, 255), ("/dev/nvidia-nvswitch0", 509, 0),
         ("/dev/nvidia-nvswitch1", 509, 1), ("/dev/gdrdrv", 238, 0))
CUFILE = {"logging": {"level": "ERROR"}, "properties": {"use_poll_mode": False}}


def make_gated(root: Path, real_nodes: bool) -> list[str]:
    """Create the nodes and files of the module docstring; their driver-root paths."""
    made = []
    for rel, major, minor in NODES:
        make_node(root / rel.lstrip("/"), major, minor, real_nodes)
        made.append(rel)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/cufile.json").write_text(json.dumps(CUFILE, indent=2) + "\n")
    (root / "run/udev/data").mkdir(parents=True, exist_ok=True)
    return [*made, "/etc/cufile.json", "/run/udev"]
