"""The rootfs of a dry run: opened read-only on its host path, without privileges.

Stage: container (reads only). A dry run has no container process to enter, so the rootfs is
opened O_PATH on its host path and verified with a plain procfs fd (the private procfs clone
needs privileges a dry run does not have). A small class, not `contextlib`: the runtime
wrapper's spec delivery plans every GPU container through here.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from types import TracebackType

    from nvmount._libc import Libc
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root


class open_rootfs_readonly:  # a function's name: `with open_rootfs_readonly(...) as root`
    """`with open_rootfs_readonly(rootfs, libc) as root:` the rootfs opened O_PATH on its host
    path, verified with a plain procfs fd; both closed at the end of the block."""

    __slots__ = ("_libc", "_procfs", "_root", "_rootfs")

    def __init__(self, rootfs: str, libc: Libc) -> None:
        self._rootfs, self._libc = rootfs, libc
        self._procfs: ProcFs | None = None
        self._root: Root | None = None

    def __enter__(self) -> Root:
        from nvmount import _libc
        from nvmount.fs.procfs import ProcFs
        from nvmount.fs.rootfs import Root

        fd = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._procfs = ProcFs(fd)
        try:
            if self._libc.fstatfs_type(fd) != _libc.PROC_SUPER_MAGIC:
                from nvmount.errors import ContainerError

                raise ContainerError("open /proc: not a procfs (mount proc there)")
            self._root = Root.open(self._rootfs, self._libc, procfs=self._procfs)
        except BaseException:
            self._procfs.close()
            raise
        return self._root

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._root is not None:
            self._root.close()
        if self._procfs is not None:
            self._procfs.close()
