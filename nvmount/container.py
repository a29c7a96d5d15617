"""The target container, read from procfs and its rootfs (read stage; changes nothing).

`open_container` holds the container's init with a pidfd, opens `/proc/<pid>` and its
`ns/mnt` relative to each other, verifies the pid was not reused, refuses a target whose
mount namespace is our own, and detects the rootfs layout (libnvc-spec §2.2) through
`/proc/<pid>/root/<rootfs>` (the container namespace's view). `ContainerHandle` owns the
fds; `record()` gives the plain `Container` record for the planner.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import TYPE_CHECKING

from nvmount.container_types import CgroupTarget, Container, ContainerLayout

if TYPE_CHECKING:
    from nvmount._libc import Libc
    from nvmount.rootfs import Root

log = logging.getLogger(__name__)

IDENTITY_UID_MAP = ((0, 0, 4294967295),)


class ContainerHandle:
    """An opened target container; a context manager owning pidfd, /proc/<pid> fd and mntns fd."""

    def __init__(
        self,
        *,
        pid: int,
        pidfd: int,
        proc_fd: int,
        mntns_fd: int,
        mntns: tuple[int, int],
        uid: int,
        gid: int,
        in_userns: bool,
        cgroup: CgroupTarget | None,
        rootfs: str,
        layout: ContainerLayout,
        libc: Libc,
    ) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.proc_fd = proc_fd  # O_PATH fd on /proc/<pid>
        self.mntns_fd = mntns_fd  # O_RDONLY fd on /proc/<pid>/ns/mnt (for setns)
        self.mntns = mntns
        self.uid = uid
        self.gid = gid
        self.in_userns = in_userns
        self.cgroup = cgroup
        self.rootfs = rootfs
        self.layout = layout
        self._libc = libc

    def check_alive(self) -> None:
        """ContainerError if the container's init has exited (signal 0 through the pidfd)."""
        raise NotImplementedError

    def record(self) -> Container:
        """The plain record of this container for the planner."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> ContainerHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_container(
    pid: int,
    rootfs: str,
    *,
    proc_root: str = "/proc",
    no_cgroups: bool,
    libc: Libc,
) -> ContainerHandle:
    """Open and verify the container whose init is `pid` and whose rootfs is `rootfs`.

    `proc_root` must be the real procfs of the host pid namespace (not a simulated one).
    Raises ContainerError: invalid/relative/unclean rootfs, no such process, pid reused,
    mount namespace equal to ours, unreadable /proc entries; PathError from the layout.
    """
    raise NotImplementedError


# -- pure decisions -----------------------------------------------------------------------
def parse_id_map(text: str) -> tuple[tuple[int, int, int], ...]:
    """Parse /proc/<pid>/uid_map text into (inside, outside, count) triples."""
    raise NotImplementedError


def choose_layout(
    machine: str,
    *,
    debian: bool,
    has_usr_lib32: bool,
    has_usr_lib: bool,
    usr_lib_is_lib64: bool,
    cuda_compat_libs: tuple[str, ...] = (),
) -> ContainerLayout:
    """libnvc-spec §2.2 target directories from facts about the rootfs (pure)."""
    raise NotImplementedError


def is_compat_lib_name(name: str) -> bool:
    """Whether a directory entry name matches the compat glob `lib*.so.*`."""
    raise NotImplementedError


# -- reads --------------------------------------------------------------------------------
def detect_layout(root: Root, machine: str | None = None) -> ContainerLayout:
    """Read the facts `choose_layout` needs from `root` and the CUDA compat libs list.

    Compat libs: /usr/local/cuda/compat/lib*.so.*, each resolved inside the root; only
    regular files count; the result is their resolved container paths, deduplicated, sorted.
    """
    raise NotImplementedError
