"""In-root path operations on an untrusted container rootfs (apply stage; touches the rootfs).

`Root` is an opened container root. Lookups are relative to its fd with
openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS). Creating walks component by component
(`_Walker`): each step is a single-name O_NOFOLLOW open relative to the verified parent fd;
symlinks are followed by hand as if chrooted (absolute links restart at the root, `..`
never leaves it), any symlink that lives on procfs (a magic link) is refused, missing
directories are created with mkdirat relative to the parent fd, leaves with
O_CREAT|O_EXCL|O_NOFOLLOW. Every fd handed out is re-checked via
readlink(/proc/thread-self/fd/N) (through a verified procfs handle) to be inside the rootfs
and not the rootfs itself.

What we create is returned as `Created` records so rollback (`remove_created`) removes
exactly that, by parent fd + name, and only if (st_dev, st_ino) still match.

Open `Root` in (or through `/proc/<pid>/root` into) the mount namespace whose mounts you will
change: move_mount needs the target fd on a mount of the caller's namespace.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import posixpath
import secrets
import stat
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from nvmount.errors import PathError

if TYPE_CHECKING:
    from nvmount._libc import Libc
    from nvmount.plan_types import SourceKind
    from nvmount.procfs import ProcFs

log = logging.getLogger(__name__)

MAX_SYMLINKS = 40  # the kernel's limit, also for our hand-made walk
PATH_MAX = 4096
NAME_MAX = 255
_CLOEXEC = os.O_CLOEXEC
_PATH = os.O_PATH | os.O_CLOEXEC
_CAUSES = {
    errno.ELOOP: "symlink loop or more than 40 symlinks (or a magic link under /proc)",
    errno.ENAMETOOLONG: "name too long",
    errno.EXDEV: "path escapes through a magic link (/proc/...) or leaves the rootfs",
    errno.ENOTDIR: "a path component is not a directory",
    errno.ENOENT: "no such file or directory",
    errno.EROFS: "read-only filesystem (the rootfs is mounted read-only)",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOSPC: "no space left on device",
}


class EntryKind(enum.Enum):
    DIRECTORY = "directory"
    FILE = "file"
    SYMLINK = "symlink"


@dataclass(frozen=True, slots=True)
class Created:
    """One filesystem entry we created inside the rootfs (for rollback)."""

    path: str  # container path of the entry (physical: parent resolved, no symlinks)
    parent: str  # container path of its parent directory
    name: str  # its name in the parent
    kind: EntryKind
    dev: int  # (st_dev, st_ino) right after creation; removal requires a match
    ino: int


def show(path: str, limit: int = 160) -> str:
    """A container path for messages, shortened when absurdly long (F15)."""
    return path if len(path) <= limit else f"{path[:limit]}...({len(path)} chars)"


def split_path(path: str) -> list[str]:
    """Components of a container path; "" and "." dropped (pure)."""
    return [c for c in path.split("/") if c not in ("", ".")]


class Root:
    """An opened container root: an O_PATH|O_DIRECTORY fd plus its kernel path prefix.

    A context manager; closes its fd (and the procfs handle, if it opened one).
    """

    def __init__(self, fd: int, host_path: str, prefix: str, libc: Libc, procfs: ProcFs,
                 owns_procfs: bool) -> None:
        self.fd = fd
        self.host_path = host_path
        self.prefix = prefix  # readlink of our fd: what kernel paths inside the root start with
        self._libc = libc
        self._procfs = procfs
        self._owns_procfs = owns_procfs

    @classmethod
    def open(
        cls,
        host_path: str,
        libc: Libc,
        *,
        dir_fd: int | None = None,
        procfs: ProcFs | None = None,
        require_proc_dir: bool = False,
    ) -> Root:
        """Open the rootfs at `host_path` (relative to `dir_fd`) O_PATH|O_DIRECTORY|O_NOFOLLOW.

        Refuses a rootfs that is itself a symlink. With `require_proc_dir`, refuses a rootfs
        whose `/proc` is not an ordinary directory (CVE-2023-27561 class). Without `procfs`,
        opens (and owns) a verified procfs handle. Raises PathError.
        """
        from nvmount.procfs import ProcFs

        flags = _PATH | os.O_DIRECTORY | os.O_NOFOLLOW
        try:
            fd = os.open(host_path, flags, dir_fd=dir_fd)
        except OSError as err:
            cause = _cause(err)
            if err.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(host_path, dir_fd):
                cause = "the rootfs is a symlink"
            raise PathError(f"open rootfs {host_path}: {cause} (give the real directory)") from err
        owns = procfs is None
        try:
            if procfs is None:
                procfs = ProcFs.open(libc)
            prefix = procfs.fd_path(fd)
            if not prefix.startswith("/") or prefix.endswith(" (deleted)") or prefix == "/":
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
                f"(found {_type_name(st.st_mode)})"
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
            return self._open(path, flags, follow=follow)
        except OSError as err:
            raise self._error("open", path, err) from err

    def exists(self, path: str) -> bool:
        """Whether `path` resolves inside the root (following symlinks in-root)."""
        try:
            os.close(self._open(path, 0, follow=True))
        except (OSError, PathError):
            return False
        return True

    def real_path(self, fd: int) -> str:
        """The container path of an fd opened inside this root ("/" for the root itself)."""
        path = self._procfs.fd_path(fd)
        if path == self.prefix:
            return "/"
        if path.startswith(self.prefix + "/") and not path.endswith(" (deleted)"):
            return path[len(self.prefix):]
        raise PathError(
            f"verify {show(path)}: not inside rootfs {self.host_path} (renamed or raced away; "
            "retry, and check for a process sharing the rootfs)"
        )

    def _open(self, path: str, flags: int, *, follow: bool) -> int:
        from nvmount import _libc

        if not flags:
            flags = os.O_PATH
        if not follow:
            flags |= os.O_NOFOLLOW
        resolve = _libc.RESOLVE_IN_ROOT | _libc.RESOLVE_NO_MAGICLINKS
        fd = self._libc.openat2(self.fd, path, flags | _CLOEXEC, 0, resolve)
        try:
            self.real_path(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    # -- creation ---------------------------------------------------------------------------
    def ensure_dir(
        self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0
    ) -> tuple[int, tuple[Created, ...]]:
        """Resolve `path` as a directory inside the root, creating what is missing.

        Symlinks (also the leaf) are followed as if chrooted; magic links are refused.
        Returns an fd on the directory (O_PATH, or O_RDONLY if we created it; inside the root,
        the root itself only for "/") and the entries created (ancestors first), owned by
        uid:gid with `mode`.
        """
        walker = _Walker(self, uid, gid, mode)
        try:
            fd = walker.walk(path)
        except OSError as err:
            raise self._error("create directory", path, err, walker.created) from err
        except PathError:
            self._undo(walker.created)
            raise
        return fd, tuple(walker.created)

    def ensure_file(
        self, path: str, mode: int = 0o644, uid: int = 0, gid: int = 0
    ) -> tuple[int, tuple[Created, ...]]:
        """Resolve or create regular file `path` (a mount point for a file source).

        Ancestors as in `ensure_dir`. The leaf is never followed: a symlink, FIFO, socket or
        device there is replaced (unlinked by parent fd + name, then created) and logged; an
        existing regular file is reused; a directory is an error.
        """
        return self._ensure_leaf(path, mode, uid, gid, reuse=stat.S_IFREG)

    def ensure_mountpoint(
        self, path: str, kind: SourceKind, uid: int = 0, gid: int = 0, mode: int | None = None
    ) -> tuple[int, tuple[Created, ...]]:
        """A mount target for a source of `kind`: a directory for DIRECTORY, else a file.

        For DEVICE an existing char device and for SOCKET an existing socket at the target
        are reused too (mounted over). The target is never the rootfs itself. Returns
        (fd, created entries); the fd is O_PATH (or O_RDONLY on what we created).
        """
        from nvmount.plan_types import SourceKind

        if kind is SourceKind.DIRECTORY:
            fd, created = self.ensure_dir(path, 0o755 if mode is None else mode, uid, gid)
            if self.real_path(fd) == "/":
                os.close(fd)
                raise PathError(
                    f"create mount point {show(path)} in rootfs {self.host_path}: resolves to "
                    "the rootfs itself (a symlink to / in the image?)"
                )
            return fd, created
        reuse = {SourceKind.DEVICE: stat.S_IFCHR, SourceKind.SOCKET: stat.S_IFSOCK}
        return self._ensure_leaf(
            path, 0o644 if mode is None else mode, uid, gid, reuse=reuse.get(kind, stat.S_IFREG)
        )

    def _ensure_leaf(
        self, path: str, mode: int, uid: int, gid: int, *, reuse: int
    ) -> tuple[int, tuple[Created, ...]]:
        parent, name = _split_leaf(path)
        walker = _Walker(self, uid, gid, 0o755)
        try:
            pfd = walker.walk(parent)
            try:
                fd = walker.leaf_file(pfd, name, mode, reuse)
            finally:
                os.close(pfd)
        except OSError as err:
            raise self._error("create mount point", path, err, walker.created) from err
        except PathError:
            self._undo(walker.created)
            raise
        return fd, tuple(walker.created)

    def symlink(self, path: str, link_text: str, uid: int = 0, gid: int = 0) -> tuple[Created, ...]:
        """Create symlink `path` -> `link_text` (symlinkat to a temp name, renameat2 NOREPLACE).

        Missing parents are created. An existing entry of any type at `path` is kept: the
        result has no SYMLINK entry then (only created parents, if any).
        """
        parent, name = _split_leaf(path)
        walker = _Walker(self, uid, gid, 0o755)
        try:
            pfd = walker.walk(parent)
            try:
                walker.leaf_symlink(pfd, name, link_text)
            finally:
                os.close(pfd)
        except OSError as err:
            raise self._error("create symlink", path, err, walker.created) from err
        except PathError:
            self._undo(walker.created)
            raise
        return tuple(walker.created)

    def write_file(self, path: str, data: bytes, mode: int = 0o444) -> Created:
        """Create regular file `path` with `data` (O_CREAT|O_EXCL|O_NOFOLLOW; parent must exist).

        Only for files inside a tmpfs this engine mounted; owned by root.
        """
        parent, name = _split_leaf(path)
        pfd = self.open_path(parent, os.O_PATH | os.O_DIRECTORY)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
            fd = os.open(name, flags, 0o600, dir_fd=pfd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, mode)
                st = os.fstat(fd)
                real_parent = self.real_path(pfd)
            finally:
                os.close(fd)
        except OSError as err:
            raise self._error("write", path, err) from err
        finally:
            os.close(pfd)
        return Created(posixpath.join(real_parent, name), real_parent, name, EntryKind.FILE,
                       st.st_dev, st.st_ino)

    # -- rollback ---------------------------------------------------------------------------
    def remove_created(self, entry: Created) -> bool:
        """Remove `entry` by parent fd + name if (st_dev, st_ino) still match; True if removed.

        A non-empty directory, a vanished entry or a mismatch is logged and kept. Detach any
        mount on the entry first (a mounted entry does not match).
        """
        try:
            pfd = self._open(entry.parent, os.O_PATH | os.O_DIRECTORY, follow=True)
        except (OSError, PathError) as err:
            log.warning("keep %s: parent not found inside the rootfs (%s)", entry.path, err)
            return False
        try:
            st = os.stat(entry.name, dir_fd=pfd, follow_symlinks=False)
            if (st.st_dev, st.st_ino) != (entry.dev, entry.ino):
                log.warning("keep %s: it is no longer the entry we created", entry.path)
                return False
            if entry.kind is EntryKind.DIRECTORY:
                os.rmdir(entry.name, dir_fd=pfd)
            else:
                os.unlink(entry.name, dir_fd=pfd)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTEMPTY, errno.EBUSY):
                log.warning("keep %s: %s", entry.path, os.strerror(err.errno or 0).lower())
                return False
            raise self._error("remove", entry.path, err) from err
        finally:
            os.close(pfd)
        log.debug("removed %s %s", entry.kind.value, entry.path)
        return True

    def _undo(self, created: list[Created]) -> None:
        for entry in reversed(created):
            try:
                self.remove_created(entry)
            except PathError as err:
                log.warning("rollback: %s", err)

    def _error(
        self, op: str, path: str, err: OSError, created: list[Created] | None = None
    ) -> PathError:
        if created:
            self._undo(created)
        return PathError(f"{op} {show(path)} in rootfs {self.host_path}: {_cause(err)}")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._owns_procfs:
            self._procfs.close()

    def __enter__(self) -> Root:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Walker:
    """One creating walk: follows symlinks as if chrooted, records what it creates."""

    def __init__(self, root: Root, uid: int, gid: int, mode: int) -> None:
        self.root = root
        self.uid = uid
        self.gid = gid
        self.mode = mode
        self.created: list[Created] = []
        self.links = 0

    def walk(self, path: str) -> int:
        """An fd on directory `path` (created as needed); the caller closes it."""
        if len(path.encode()) >= PATH_MAX:
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        todo = split_path(path)
        cur = os.dup(self.root.fd)
        real = "/"
        try:
            while todo:
                comp = todo.pop(0)
                nxt, real, link = self._step(cur, real, comp)
                os.close(cur)
                cur = nxt
                if link is not None:
                    todo[:0] = split_path(link)
                    if link.startswith("/"):
                        os.close(cur)
                        cur, real = os.dup(self.root.fd), "/"
        except BaseException:
            os.close(cur)
            raise
        return cur

    def _step(self, cur: int, real: str, comp: str) -> tuple[int, str, str | None]:
        """Descend from `cur` (at container path `real`) into `comp`.

        Returns (new dir fd, its container path, link text if `comp` was a symlink: then
        the new fd is `cur`'s dup and the caller splices the link text in).
        """
        if comp == "..":
            real = posixpath.dirname(real)
            return self.root._open(real, os.O_PATH | os.O_DIRECTORY, follow=True), real, None
        if len(comp.encode()) > NAME_MAX:
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        try:
            fd = os.open(comp, _PATH | os.O_NOFOLLOW, dir_fd=cur)
        except FileNotFoundError:
            fd = self._mkdir(cur, real, comp)
        try:
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                text = self._link_text(fd, real, comp)
                os.close(fd)
                return os.dup(cur), real, text
            if not stat.S_ISDIR(st.st_mode):
                raise PathError(
                    f"resolve {show(posixpath.join(real, comp))} in rootfs "
                    f"{self.root.host_path}: is a {_type_name(st.st_mode)}, not a directory "
                    "(remove it from the image)"
                )
            return fd, self.root.real_path(fd), None
        except BaseException:
            os.close(fd)
            raise

    def _link_text(self, fd: int, real: str, comp: str) -> str:
        from nvmount import _libc

        where = posixpath.join(real, comp)
        if self.root._libc.fstatfs_type(fd) == _libc.PROC_SUPER_MAGIC:
            raise PathError(
                f"resolve {where} in rootfs {self.root.host_path}: path escapes through a magic "
                "link (/proc/...) (refusing to follow procfs symlinks)"
            )
        self.links += 1
        if self.links > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        text = os.readlink("", dir_fd=fd)
        log.debug("following symlink %s -> %s inside the rootfs", where, text)
        return text

    def _mkdir(self, cur: int, real: str, comp: str) -> int:
        try:
            os.mkdir(comp, 0o700, dir_fd=cur)
        except FileExistsError:  # raced with a creator: look again, never follow blindly
            return os.open(comp, _PATH | os.O_NOFOLLOW, dir_fd=cur)
        fd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC, dir_fd=cur)
        try:
            self._own(fd, self.mode, real, comp, EntryKind.DIRECTORY)
        except BaseException:
            os.close(fd)
            raise
        log.debug("created directory %s", posixpath.join(real, comp))
        return fd

    def _own(self, fd: int, mode: int, real: str, name: str, kind: EntryKind) -> None:
        """chown/chmod a fresh entry through its fd and record it."""
        st = os.fstat(fd)
        self.created.append(
            Created(posixpath.join(real, name), real, name, kind, st.st_dev, st.st_ino)
        )
        os.fchown(fd, self.uid, self.gid)
        os.fchmod(fd, mode)

    def leaf_file(self, pfd: int, name: str, mode: int, reuse: int) -> int:
        """An fd on file `name` in dir `pfd`: reused, created, or replacing a special entry."""
        real = self.root.real_path(pfd)
        where = posixpath.join(real, name)
        try:
            fd = os.open(name, _PATH | os.O_NOFOLLOW, dir_fd=pfd)
        except FileNotFoundError:
            return self._create_file(pfd, real, name, mode)
        try:
            keep = self._judge_leaf(pfd, name, where, fd, reuse)
        except BaseException:
            os.close(fd)
            raise
        if keep:
            return fd
        os.close(fd)
        return self._create_file(pfd, real, name, mode)

    def _judge_leaf(self, pfd: int, name: str, where: str, fd: int, reuse: int) -> bool:
        """True to mount over the existing entry; False after replacing it; error for a dir."""
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise PathError(
                f"create mount point {show(where)} in rootfs {self.root.host_path}: is a "
                "directory where a file is expected (remove it from the image)"
            )
        if stat.S_IFMT(st.st_mode) in (stat.S_IFREG, reuse):
            self.root.real_path(fd)
            log.info("image already has %s; mounting over it", show(where))
            return True
        self._replace(pfd, name, where, fd, st)
        return False

    def _replace(self, pfd: int, name: str, where: str, fd: int, st: os.stat_result) -> None:
        """Unlink the special entry `name` (a symlink, FIFO, ...) that `fd` refers to."""
        what = _type_name(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            what += f" -> {os.readlink('', dir_fd=fd)}"
        now = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise PathError(
                f"replace {where} in rootfs {self.root.host_path}: changed while we looked "
                "(a process is racing us; retry)"
            )
        os.unlink(name, dir_fd=pfd)
        log.warning("replaced %s at %s with an empty file (never followed)", what, where)

    def _create_file(self, pfd: int, real: str, name: str, mode: int) -> int:
        flags = os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=pfd)
        try:
            self._own(fd, mode, real, name, EntryKind.FILE)
            self.root.real_path(fd)
        except BaseException:
            os.close(fd)
            raise
        log.debug("created file %s", posixpath.join(real, name))
        return fd

    def leaf_symlink(self, pfd: int, name: str, link_text: str) -> None:
        real = self.root.real_path(pfd)
        where = posixpath.join(real, name)
        try:
            os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            log.info("keep existing %s (not replacing it with a symlink)", where)
            return
        tmp = f".nvhook-{secrets.token_hex(8)}"
        os.symlink(link_text, tmp, dir_fd=pfd)
        try:
            os.chown(tmp, self.uid, self.gid, dir_fd=pfd, follow_symlinks=False)
            st = os.stat(tmp, dir_fd=pfd, follow_symlinks=False)
            from nvmount import _libc

            self.root._libc.renameat2(pfd, tmp, pfd, name, _libc.RENAME_NOREPLACE)
        except FileExistsError:
            os.unlink(tmp, dir_fd=pfd)
            log.info("keep existing %s (not replacing it with a symlink)", where)
            return
        except BaseException:
            os.unlink(tmp, dir_fd=pfd)
            raise
        self.created.append(Created(where, real, name, EntryKind.SYMLINK, st.st_dev, st.st_ino))
        log.debug("created symlink %s -> %s", where, link_text)


def _split_leaf(path: str) -> tuple[str, str]:
    parts = split_path(path)
    if not parts or parts[-1] == "..":
        raise PathError(f"resolve {show(path)}: not a file path (needs a last component)")
    return "/" + "/".join(parts[:-1]), parts[-1]


def _is_symlink(path: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _type_name(mode: int) -> str:
    names = {
        stat.S_IFREG: "regular file", stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink",
        stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device",
        stat.S_IFBLK: "block device",
    }
    return names.get(stat.S_IFMT(mode), f"file of mode {mode:o}")


def _cause(err: OSError) -> str:
    if err.errno in _CAUSES:
        return _CAUSES[err.errno]
    return os.strerror(err.errno).lower() if err.errno else str(err)
