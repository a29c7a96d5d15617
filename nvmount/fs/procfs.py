"""A trusted procfs handle (apply stage helper; reads procfs only).

Everything the engine asks procfs about its own fds (readlink of `thread-self/fd/N`,
`fdinfo`, `mountinfo`, umount through a magic link) goes through a private, verified
handle: a non-recursive clone of the host's `/proc` (so nothing over-mounted on a /proc
subpath is visible), checked with fstatfs == PROC_SUPER_MAGIC and root inode 1. The handle
is an fd, so it keeps working after `setns` into the container's mount namespace.
"""

from __future__ import annotations

import os

from nvmount.errors import ContainerError, strerror
from nvmount.fds import FdOwner
from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc

log = get_logger(__name__)

_PROC_ROOT_INO = 1


class ProcFs(FdOwner):
    """An owned O_PATH fd on a verified procfs root; a context manager."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, libc: Libc, path: str = "/proc", *, private: bool = True) -> ProcFs:
        """A verified handle on the procfs at `path`; ContainerError if it is not one.

        `private` (needs CAP_SYS_ADMIN): a non-recursive open_tree clone, immune to anything
        mounted over /proc subpaths. Without it (read-only stages that lack SYS_ADMIN): a
        plain O_PATH open of `path`, still checked to be a procfs root.
        """
        from nvmount import _libc

        try:
            if private:
                fd = libc.open_tree(
                    _libc.AT_FDCWD, path, _libc.OPEN_TREE_CLONE | _libc.OPEN_TREE_CLOEXEC
                )
            else:
                fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise ContainerError(
                f"open procfs {path}: {strerror(err)} (the engine "
                "needs root and the new mount API)"
            ) from err
        try:
            magic = libc.fstatfs_type(fd)
            ino = os.fstat(fd).st_ino
        except OSError as err:
            os.close(fd)
            raise ContainerError(f"check procfs {path}: {strerror(err)}") from err
        if magic != _libc.PROC_SUPER_MAGIC or ino != _PROC_ROOT_INO:
            os.close(fd)
            raise ContainerError(
                f"check procfs {path}: not the root of a procfs (magic {magic:#x}, inode {ino}) "
                "(mount proc there)"
            )
        return cls(fd)

    def fd_path(self, fd: int) -> str:
        """The kernel's path for our `fd` (readlink of thread-self/fd/N)."""
        return os.readlink(f"thread-self/fd/{fd}", dir_fd=self.fd)

    def read(self, name: str) -> str:
        """Read a small procfs file relative to the handle (e.g. "thread-self/mountinfo")."""
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=self.fd)
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "surrogateescape")
        finally:
            os.close(fd)

    def mount_id(self, fd: int) -> int:
        """The mount id of the mount `fd` lives on (`mnt_id:` of thread-self/fdinfo/N)."""
        for line in self.read(f"thread-self/fdinfo/{fd}").splitlines():
            key, _, value = line.partition(":")
            if key == "mnt_id":
                return int(value)
        raise ContainerError(f"read fdinfo of fd {fd}: no mnt_id (kernel too old)")

