"""An opened container root and the lookups inside it (the fd-safe layer, `nvmount.fs`).

`RootDir` holds an O_PATH|O_DIRECTORY fd on the rootfs. Lookups are relative to it with
openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS); every fd handed out is re-checked via
readlink(/proc/thread-self/fd/N) (through a verified procfs handle) to be inside the rootfs
and not the rootfs itself. Creation and rollback are in `nvmount.fs.rootfs.Root`.
"""

from __future__ import annotations

import errno
import os
import stat

from nvmount.errors import PathError
from nvmount.fds import FdOwner
from nvmount.fs.paths import cause, is_symlink, show, type_name

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is 3.11+ (TYPE_CHECKING only)

    from nvmount._libc import Libc
    from nvmount.fs.procfs import ProcFs

_CLOEXEC = os.O_CLOEXEC
_PATH = os.O_PATH | os.O_CLOEXEC


class RootDir(FdOwner):
    """An opened container root: an O_PATH|O_DIRECTORY fd plus its kernel path prefix, and
    the lookups inside it. A context manager; closes its fd (and the procfs handle, if it
    opened one). `nvmount.fs.rootfs.Root` adds creation and rollback."""

    def __init__(self, fd: int, host_path: str, prefix: str, libc: Libc, procfs: ProcFs,
                 owns_procfs: bool) -> None:
        self.fd = fd
        self._dir_cache: dict[str, int] | None = None  # see rootfs.Root.remember_dirs
        self.host_path = host_path
        self.prefix = prefix  # readlink of our fd: what kernel paths inside the root start with
        self.libc = libc
        self._procfs = procfs
        self._owns_procfs = owns_procfs
        self.walk_steps = 0  # components walked by hand in this root (`MAX_ROOT_WALK_STEPS`)

    @classmethod
    def open(
        cls,
        host_path: str,
        libc: Libc,
        *,
        dir_fd: int | None = None,
        procfs: ProcFs | None = None,
        require_proc_dir: bool = False,
        ns_root: bool = False,
    ) -> Self:
        """Open the rootfs at `host_path` (relative to `dir_fd`) O_PATH|O_DIRECTORY|O_NOFOLLOW.

        Refuses a rootfs that is itself a symlink. With `require_proc_dir`, refuses a rootfs
        whose `/proc` is not an ordinary directory (CVE-2023-27561 class). Without `procfs`,
        opens (and owns) a verified procfs handle. A rootfs whose kernel path is "/" is
        refused unless `ns_root` says it is the root of the container's own mount namespace
        (a container after runc's pivot_root: created or paused). Raises PathError.
        """
        from nvmount.fs.procfs import ProcFs

        flags = _PATH | os.O_DIRECTORY | os.O_NOFOLLOW
        try:
            fd = os.open(host_path, flags, dir_fd=dir_fd)
        except OSError as err:
            why = cause(err)
            if err.errno in (errno.ELOOP, errno.ENOTDIR) and is_symlink(host_path, dir_fd):
                why = "the rootfs is a symlink"
            raise PathError(f"open rootfs {host_path}: {why} (give the real directory)") from err
        owns = procfs is None
        try:
            if procfs is None:
                procfs = ProcFs.open(libc)
            prefix = procfs.fd_path(fd)
            if (not prefix.startswith("/") or prefix.endswith(" (deleted)")
                    or (prefix == "/" and not ns_root)):
                raise PathError(f"open rootfs {host_path}: resolves to {prefix!r} (not usable)")
            root = cls(fd, host_path, prefix, libc, procfs, owns)
        except BaseException:
            os.close(fd)
            if owns and procfs is not None:
                procfs.close()
            raise
        if require_proc_dir:
            try:
                root.check_proc_dir()
            except BaseException:
                root.close()
                raise
        return root

    def check_proc_dir(self) -> None:
        """PathError unless the rootfs's /proc is an ordinary directory (not a symlink)."""
        try:
            st = os.stat("proc", dir_fd=self.fd, follow_symlinks=False)
        except OSError as err:
            raise self._error("check", "/proc", err) from err
        if not stat.S_ISDIR(st.st_mode):
            raise PathError(
                f"check /proc in rootfs {self.host_path}: must be mounted on ordinary directory "
                f"(found {type_name(st.st_mode)})"
            )

    def check_proc_mounted(self) -> None:
        """PathError unless the rootfs's /proc is a procfs mount. Runtimes mount it before any
        prestart hook runs, so a plain directory means `root.path` is not the container's
        rootfs (e.g. a host directory that has a proc/ subdirectory) and nothing may be
        created there (F16); a tmpfs or other mount over it means /proc was replaced."""
        from nvmount._libc import PROC_SUPER_MAGIC

        try:
            fd = os.open("proc", _PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError as err:
            raise self._error("check", "/proc", err) from err
        try:
            magic = self.libc.fstatfs_type(fd)
        finally:
            os.close(fd)
        if magic != PROC_SUPER_MAGIC:
            raise PathError(
                f"check /proc in rootfs {self.host_path}: not a procfs mount (runtimes mount "
                "/proc before prestart hooks: is root.path the container's rootfs?)"
            )

    # -- lookups ----------------------------------------------------------------------------
    def open_path(self, path: str, flags: int = 0, *, follow: bool = True) -> int:
        """Open container `path` inside the root; returns an fd the caller closes.

        `flags` are added to O_CLOEXEC; without an O_RDONLY-style intent pass os.O_PATH
        (the default 0 means O_PATH). O_RDONLY on a FIFO or device would be unsafe: open such
        paths O_PATH and fstat first. With `follow=False` a leaf symlink is not followed.
        The fd is verified to be inside the rootfs (or the root itself for "/"). Raises
        PathError naming `path` and the rootfs.
        """
        try:
            return self.open_raw(path, flags, follow=follow)
        except OSError as err:
            raise self._error("open", path, err) from err

    def exists(self, path: str) -> bool:
        """Whether `path` resolves inside the root (following symlinks in-root)."""
        try:
            os.close(self.open_raw(path, 0, follow=True))
        except (OSError, PathError):
            return False
        return True

    def real_path(self, fd: int) -> str:
        """The container path of an fd opened inside this root ("/" for the root itself)."""
        path = self._procfs.fd_path(fd)
        if path == self.prefix:
            return "/"
        if self.prefix == "/" and path.startswith("/") and not path.endswith(" (deleted)"):
            return path  # the namespace's root is the rootfs: everything reachable is inside
        if path.startswith(self.prefix + "/") and not path.endswith(" (deleted)"):
            return path[len(self.prefix):]
        raise PathError(
            f"verify {show(path)}: not inside rootfs {self.host_path} (renamed or raced away; "
            "retry, and check for a process sharing the rootfs)"
        )

    def open_raw(self, path: str, flags: int, *, follow: bool) -> int:
        from nvmount import _libc

        if not flags:
            flags = os.O_PATH
        if not follow:
            flags |= os.O_NOFOLLOW
        resolve = _libc.RESOLVE_IN_ROOT | _libc.RESOLVE_NO_MAGICLINKS
        fd = self.libc.openat2(self.fd, path, flags | _CLOEXEC, 0, resolve)
        try:
            self.real_path(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _error(self, op: str, path: str, err: OSError) -> PathError:
        return PathError(f"{op} {show(path)} in rootfs {self.host_path}: {cause(err)}")

    def close(self) -> None:
        for fd in (self._dir_cache or {}).values():
            os.close(fd)
        self._dir_cache = None
        super().close()

    def owned(self) -> tuple[FdOwner, ...]:
        return (self._procfs,) if self._owns_procfs else ()


