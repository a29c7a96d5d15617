"""Device nodes and IPC endpoints of the simulated driver. Effects: files under the root.

Nodes are real character devices (mknod) with the driver's numbers, so the engine's stat,
bind-mount and device-cgroup code paths are the real ones; no kernel driver answers them
(open gives ENXIO). Without CAP_MKNOD they become empty regular files instead and
`SimRoot.real_device_nodes` says so.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat

from nvhook.dev.sim import catalog
from nvhook.dev.sim.records import (
    CAPS_MAJOR,
    IMEX_MAJOR,
    NVIDIA_MAJOR,
    UVM_MAJOR,
    SimDeviceNode,
    SimFile,
    SimGpu,
    SimSpec,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger(__name__)

MODE_DEVICE = 0o666
MODE_CAP_CONFIG = 0o400
MODE_CAP_ACCESS = 0o444


def planned_nodes(spec: SimSpec, gpus: tuple[SimGpu, ...]) -> list[tuple[str, int, int, int]]:
    """(path under the root, major, minor, mode) of every node, in creation order."""
    nodes = [
        ("/dev/nvidiactl", NVIDIA_MAJOR, 255, MODE_DEVICE),
        ("/dev/nvidia-modeset", NVIDIA_MAJOR, 254, MODE_DEVICE),
        ("/dev/nvidia-uvm", UVM_MAJOR, 0, MODE_DEVICE),
        ("/dev/nvidia-uvm-tools", UVM_MAJOR, 1, MODE_DEVICE),
    ]
    nodes += [(f"/dev/nvidia{g.minor}", NVIDIA_MAJOR, g.minor, MODE_DEVICE) for g in gpus]
    caps = "/dev/nvidia-caps/nvidia-cap"
    nodes.append((f"{caps}{catalog.CAPS_CONFIG_MINOR}", CAPS_MAJOR, catalog.CAPS_CONFIG_MINOR,
                  MODE_CAP_CONFIG))
    nodes.append((f"{caps}{catalog.CAPS_MONITOR_MINOR}", CAPS_MAJOR,
                  catalog.CAPS_MONITOR_MINOR, MODE_CAP_ACCESS))
    for gpu in gpus:
        for mig in gpu.mig_devices:
            nodes.append((f"{caps}{mig.gi_minor}", CAPS_MAJOR, mig.gi_minor, MODE_CAP_ACCESS))
            nodes.append((f"{caps}{mig.ci_minor}", CAPS_MAJOR, mig.ci_minor, MODE_CAP_ACCESS))
    nodes += [(f"/dev/nvidia-caps-imex-channels/channel{c}", IMEX_MAJOR, c, MODE_DEVICE)
              for c in range(spec.imex_channels)]
    return nodes


def make_nodes(root: Path, spec: SimSpec,
               gpus: tuple[SimGpu, ...]) -> tuple[tuple[SimDeviceNode, ...], bool]:
    """mknod every planned node (plus /dev/char links); returns (nodes, real nodes?)."""
    real = True
    made = []
    for rel, major, minor, mode in planned_nodes(spec, gpus):
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if real:
            real = _mknod(path, major, minor, mode)
        if not real:
            path.touch(mode=mode)
        path.chmod(mode)
        _char_link(root, rel, major, minor)
        made.append(SimDeviceNode(path=str(path), path_rel=rel, major=major, minor=minor))
    return tuple(made), real


def make_node(path: Path, major: int, minor: int, real: bool) -> None:
    """A 0666 character device (a regular file when mknod is not allowed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if real:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    else:
        path.touch(mode=0o666)
    path.chmod(0o666)


def _mknod(path: Path, major: int, minor: int, mode: int) -> bool:
    try:
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    except PermissionError as err:
        log.warning("cannot mknod %s (%s): device nodes become regular files", path,
                    err.strerror)
        return False
    return True


def _char_link(root: Path, rel: str, major: int, minor: int) -> None:
    """/dev/char/<major>:<minor> -> ../<node>, as nvidia-modprobe makes them."""
    link = root / "dev" / "char" / f"{major}:{minor}"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(rel, "/dev/char"))


def make_ipc(root: Path) -> tuple[SimFile, ...]:
    """The persistenced and fabricmanager sockets (bound, then closed: the file stays) and
    the MPS pipe directory."""
    files = []
    for rel in (catalog.PERSISTENCED_SOCKET, catalog.FABRICMANAGER_SOCKET):
        _bind_socket(root / rel.lstrip("/"))
        files.append(SimFile(path=str(root) + rel, path_rel=rel, group="ipc",
                             name=rel.rsplit("/", 1)[1]))
    mps = root / catalog.MPS_PIPE_DIR.lstrip("/")
    mps.mkdir(parents=True, exist_ok=True)
    mps.chmod(0o755)
    files.append(SimFile(path=str(mps), path_rel=catalog.MPS_PIPE_DIR, group="ipc",
                         name="nvidia-mps"))
    return tuple(files)


def _bind_socket(path: Path) -> None:
    """Bind through /proc/self/fd/<dir fd>, so paths longer than sun_path (108) work."""
    path.parent.mkdir(parents=True, exist_ok=True)
    dirfd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(f"/proc/self/fd/{dirfd}/{path.name}")
            except OSError as err:
                if err.errno != errno.EADDRINUSE:
                    raise
    finally:
        os.close(dirfd)
    os.chmod(path, 0o777)
