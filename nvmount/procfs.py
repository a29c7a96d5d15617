"""A trusted procfs handle (apply stage helper; reads procfs only).

Everything the engine asks procfs about its own fds (readlink of `thread-self/fd/N`,
`fdinfo`, umount through a magic link) goes through a private, verified handle: a
non-recursive clone of the host's `/proc` (so nothing over-mounted on a /proc subpath is
visible), checked with fstatfs == PROC_SUPER_MAGIC and root inode 1. The handle is an
fd, so it keeps working after `setns` into the container's mount namespace.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvmount._libc import Libc

log = logging.getLogger(__name__)


class ProcFs:
    """An owned O_PATH fd on a verified procfs root; a context manager."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, libc: Libc, path: str = "/proc") -> ProcFs:
        """Clone `path` (the host procfs) privately and verify it; ContainerError if not procfs."""
        raise NotImplementedError

    def fd_path(self, fd: int) -> str:
        """The kernel's path for our `fd` (readlink of thread-self/fd/N)."""
        raise NotImplementedError

    def mount_id(self, fd: int) -> int:
        """The mount id of the mount `fd` lives on (`mnt_id:` of thread-self/fdinfo/N)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> ProcFs:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
