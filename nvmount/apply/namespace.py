"""Entering the container's mount namespace and always coming back (apply stage).

setns(CLONE_NEWNS) refuses (EINVAL) a process whose filesystem info is shared with other
threads, so `entered` checks first that the process has exactly one thread. setns also
resets root and cwd to the namespace's root: the cwd is restored on the way back.
"""

from __future__ import annotations

import os

from nvmount.errors import ContainerError, strerror
from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc

log = get_logger(__name__)


def thread_count(task_dir: str = "/proc/self/task") -> int:
    """Number of threads of this process."""
    return len(os.listdir(task_dir))


def same_namespace(a_fd: int, b_fd: int) -> bool:
    """Whether two namespace fds (e.g. /proc/X/ns/mnt) are the same namespace."""
    a, b = os.fstat(a_fd), os.fstat(b_fd)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class entered:
    """Run the body inside mount namespace `ns_fd`; always setns back (also on exceptions).

    Raises ContainerError if the process has more than one thread or setns fails. The cwd
    is restored afterwards. A failure to return is raised as ContainerError (fatal: the
    process must exit, it is stuck in the container's namespace).
    """

    __slots__ = ("cwd", "libc", "ns_fd", "own")

    def __init__(self, ns_fd: int, libc: Libc) -> None:
        self.ns_fd, self.libc, self.own, self.cwd = ns_fd, libc, -1, -1

    def __enter__(self) -> None:
        from nvmount import _libc

        threads = thread_count()
        if threads != 1:
            raise ContainerError(
                f"enter mount namespace: the process has {threads} threads (setns needs a "
                "single-threaded process; start no threads before the mount stage)"
            )
        self.own = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self.cwd = -1
        try:
            self.libc.setns(self.ns_fd, _libc.CLONE_NEWNS)
        except OSError as err:
            self._close()
            raise ContainerError(
                f"enter mount namespace: setns failed: {strerror(err)} "
                "(is the container still running?)"
            ) from err
        log.debug("entered mount namespace (fd %d)", self.ns_fd)

    def __exit__(self, *exc: object) -> None:
        try:
            _leave(self.own, self.cwd, self.libc)
        finally:
            self._close()

    def _close(self) -> None:
        os.close(self.own)
        if self.cwd >= 0:
            os.close(self.cwd)
        self.own = self.cwd = -1


def _leave(own: int, cwd: int, libc: Libc) -> None:
    from nvmount import _libc

    try:
        libc.setns(own, _libc.CLONE_NEWNS)
    except OSError as err:
        raise ContainerError(
            f"return to the hook's mount namespace: {strerror(err)} "
            "(the process is stuck in the container's namespace; it must exit)"
        ) from err
    if cwd >= 0:
        os.fchdir(cwd)
    log.debug("back in the hook's mount namespace")
