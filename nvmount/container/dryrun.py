"""The rootfs of a dry run: opened read-only on its host path, without privileges.

Stage: container (reads only). A dry run has no container process to enter, so the rootfs is
opened O_PATH on its host path and verified with a plain procfs fd (the private procfs clone
needs privileges a dry run does not have).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc
    from nvmount.fs.rootfs import Root


@contextmanager
def open_rootfs_readonly(rootfs: str, libc: Libc) -> Iterator[Root]:
    """The rootfs opened O_PATH on its host path, verified with a plain procfs fd (the
    private procfs clone needs privileges a dry run does not have)."""
    from nvmount import _libc
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

    fd = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    with ProcFs(fd) as procfs:
        if libc.fstatfs_type(procfs.fd) != _libc.PROC_SUPER_MAGIC:
            from nvmount.errors import ContainerError

            raise ContainerError("open /proc: not a procfs (mount proc there)")
        with Root.open(rootfs, libc, procfs=procfs) as root:
            yield root
