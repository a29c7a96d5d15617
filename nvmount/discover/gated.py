"""Feature-gated device families (NVIDIA's gated modifiers, v1.17, `internal/discover/{gds,
mofed,nvswitch,gdrcopy}.go`): what each family exposes when an image sets NVIDIA_<NAME>=enabled.

    gds       /dev/nvidia-fs*  + /etc/cufile.json (file) and /run/udev (directory), read-only
    mofed     /dev/infiniband/uverbs*, /dev/infiniband/rdma_cm
    nvswitch  /dev/nvidia-nvswitchctl, /dev/nvidia-nvswitch*
    gdrcopy   /dev/gdrdrv

Nodes are the character devices of those names in the driver root's /dev (as NVIDIA, which
looks in the driver root too); MOFED gets every uverbs node, as NVIDIA does (no NUMA
filtering: NVIDIA documents none, and an RDMA application picks its NIC itself). Discovered
with the rest of the inventory (cached); the plan picks the families a request names.
"""

from __future__ import annotations

import fnmatch
import os
import stat

from nvmount.capabilities import UNGATED
from nvmount.discover.inventory import DeviceNode, DriverFile, FileKind

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover.driver_root import DriverRoot

FAMILIES = ("gds", "mofed", "nvswitch", "gdrcopy")
NODES: tuple[tuple[str, str, str], ...] = (
    ("gds", "/dev", "nvidia-fs*"),
    ("mofed", "/dev/infiniband", "uverbs*"),
    ("mofed", "/dev/infiniband", "rdma_cm"),
    ("nvswitch", "/dev", "nvidia-nvswitchctl"),
    ("nvswitch", "/dev", "nvidia-nvswitch[0-9]*"),
    ("gdrcopy", "/dev", "gdrdrv"),
)
FILES: tuple[tuple[str, str, bool], ...] = (("gds", "/etc/cufile.json", False),
                                            ("gds", "/run/udev", True))
WATCHED = ("/dev", "/dev/infiniband")  # a new node there changes the discovery
MAX_ENTRIES = 8192


def find_gated(root: DriverRoot) -> tuple[tuple[tuple[str, DeviceNode], ...],
                                          tuple[tuple[str, DriverFile], ...]]:
    """((family, node), ...), ((family, file or directory), ...) present in the driver root."""
    listings: dict[str, list[str]] = {}
    nodes: list[tuple[str, DeviceNode]] = []
    for family, directory, pattern in NODES:
        if directory not in listings:
            listings[directory] = _names(root, directory)
        for name in listings[directory]:
            if fnmatch.fnmatchcase(name, pattern):
                node = _node(root, f"{directory}/{name}")
                if node is not None:
                    nodes.append((family, node))
    files = []
    for family, path, is_dir in FILES:
        hit = root.resolve(path)
        host = root.host(hit.path)
        if hit.exists and (os.path.isdir(host) if is_dir else os.path.isfile(host)):
            files.append((family, DriverFile(FileKind.CONFIG, host, path, UNGATED)))
    return tuple(nodes), tuple(files)


def _names(root: DriverRoot, directory: str) -> list[str]:
    hit = root.resolve(directory)
    if not hit.exists:
        return []
    try:
        with os.scandir(root.host(hit.path)) as entries:
            return sorted(e.name for _, e in zip(range(MAX_ENTRIES), entries))
    except OSError:
        return []


def _node(root: DriverRoot, path: str) -> DeviceNode | None:
    hit = root.resolve(path)
    host = root.host(hit.path)
    try:
        st = os.stat(host, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return DeviceNode(host, path, os.major(st.st_rdev), os.minor(st.st_rdev))
