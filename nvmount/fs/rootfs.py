"""In-root path operations on an untrusted container rootfs (apply stage; touches the rootfs).

`Root` is an opened container root. Lookups are relative to its fd with
openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS). Creating walks component by component
(`rootfs_walk.Walker`): each step is a single-name O_NOFOLLOW open relative to the verified
parent fd; symlinks are followed by hand as if chrooted (absolute links restart at the root, `..`
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

import errno
import os
import posixpath
import stat

from nvmount.errors import PathError, strerror
from nvmount.fs.owner import create_as_owner  # not lazily: it runs after setns
from nvmount.fs.paths import (
    Created,
    EntryKind,
    cause,
    show,
    split_leaf,
    split_path,
)
from nvmount.fs.root import RootDir
from nvmount.fs.walk import Walker
from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.fs.paths import SourceKind

log = get_logger(__name__)

__all__ = ["Created", "EntryKind", "Root", "show", "split_path"]

_CLOEXEC = os.O_CLOEXEC
_PATH = os.O_PATH | os.O_CLOEXEC


class Root(RootDir):
    """An opened container root with creation (mount points, symlinks, files) and rollback
    of exactly what was created. A context manager (see `RootDir`)."""

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
        walker = Walker(self, uid, gid, mode)
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
        from nvmount.fs.paths import SourceKind

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
        parent, name = split_leaf(path)
        walker = Walker(self, uid, gid, 0o755)
        try:
            pfd, owned = self._parent(walker, parent)
            try:
                fd = walker.leaf_file(pfd, name, mode, reuse)
            finally:
                if owned:
                    os.close(pfd)
        except OSError as err:
            raise self._error("create mount point", path, err, walker.created) from err
        except PathError:
            self._undo(walker.created)
            raise
        return fd, tuple(walker.created)

    def _parent(self, walker: Walker, parent: str) -> tuple[int, bool]:
        """(a directory fd for `parent`, whether the caller owns it): walked once, then lent
        from the cache while `remember_dirs` is on (many driver files share a directory;
        the cache keeps and closes it). A reused fd is re-verified inside the rootfs by the
        leaf step (`real_path`) before anything is created in it."""
        cache = self._dir_cache
        if cache is None:
            return walker.walk(parent), True
        fd = cache.get(parent)
        if fd is None:
            fd = cache[parent] = walker.walk(parent)
        return fd, False

    def remember_dirs(self, on: bool) -> None:
        """Reuse walked parent directories for file mount points (`_parent`); switch off (or
        call again) whenever a mount may have covered a directory already walked."""
        for fd in (self._dir_cache or {}).values():
            os.close(fd)
        self._dir_cache = {} if on else None

    def mkdir_all(self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> int:
        """An fd on directory `path`: one openat2 where it exists, else `ensure_dir` (the
        missing parts created with `mode`, owned by uid:gid). What it creates is not handed
        back: for callers that keep what they make (NVIDIA's hooks); else use `ensure_dir`."""
        try:
            return self.open_path(path, os.O_PATH | os.O_DIRECTORY)
        except PathError:
            return self.ensure_dir(path, mode, uid, gid)[0]

    def symlink(self, path: str, link_text: str, uid: int = 0, gid: int = 0, *,
                replace: bool = False) -> tuple[Created, ...]:
        """Create symlink `path` -> `link_text`, owned by uid:gid (`Walker.leaf_symlink`: in
        place when born with that owner, else at a temporary name renamed in).

        Missing parents are created (an existing parent costs one openat2). An existing
        entry at `path` is kept (no SYMLINK entry in the result then, only created parents),
        or with `replace` swapped out by a rename, never followed (a directory there is an
        error; the same link already there is kept). A replaced entry is gone: undoing
        removes the link, it does not bring the old entry back.
        """
        parent, name = split_leaf(path)
        walker = Walker(self, uid, gid, 0o755)
        try:
            try:
                pfd = self.open_raw(parent, os.O_PATH | os.O_DIRECTORY, follow=True)
            except (OSError, PathError):
                pfd = walker.walk(parent)
            try:
                walker.leaf_symlink(pfd, name, link_text, replace=replace)
            finally:
                os.close(pfd)
        except OSError as err:
            raise self._error("create symlink", path, err, walker.created) from err
        except PathError:
            self._undo(walker.created)
            raise
        return tuple(walker.created)

    def write_file(self, path: str, data: bytes, mode: int = 0o444, uid: int = 0, gid: int = 0,
                   *, replace: bool = False, parents: int | None = None) -> Created:
        """Write regular file `path` with `data`, owned by uid:gid with `mode`.

        Written to a new inode (O_CREAT|O_EXCL|O_NOFOLLOW, 0600 until complete): at `path`
        itself (an existing entry is an error), or with `replace` at a temporary name renamed
        over whatever is at `path` (never opened or followed; a directory there is an error),
        so readers see the old or the new file. The parent must exist, or with `parents` (a
        mode) missing ones are created as in `mkdir_all`. Returns the file's `Created`.
        """
        parent, name = split_leaf(path)
        try:
            if parents is None:
                pfd = self.open_path(parent, os.O_PATH | os.O_DIRECTORY)
            else:
                pfd = self.mkdir_all(parent, parents, uid, gid)
            try:
                real_parent = self.real_path(pfd)
                st = _write_as(self, pfd, f".nvhook-{os.urandom(8).hex()}" if replace else name,
                               name, data, mode, uid, gid)
            finally:
                os.close(pfd)
        except OSError as err:
            raise self._error("write", path, err) from err
        return Created(posixpath.join(real_parent, name), real_parent, name, EntryKind.FILE,
                       st.st_dev, st.st_ino)

    def exchange_file(self, path: str, data: bytes, mode: int = 0o644, uid: int = 0,
                      gid: int = 0) -> Exchanged:
        """Put a new file with `data` at `path` (its parent must exist), undoably: written
        at a temporary name beside it (as `write_file`), then swapped with the entry there by
        renameat2(RENAME_EXCHANGE), or renamed in with RENAME_NOREPLACE where there is none.
        The old entry (never opened or followed) waits under the temporary name: see
        `Exchanged`. The ld.so.cache writer's install step (`nvmount.ldcache.write`)."""
        from nvmount import _libc

        parent, name = split_leaf(path)
        pfd = self.open_path(parent, os.O_PATH | os.O_DIRECTORY)
        tmp = f".{name}~nvhook-{os.urandom(6).hex()}"
        try:
            try:
                ours = _write_as(self, pfd, tmp, tmp, data, mode, uid, gid).st_ino
            except OSError as err:
                raise self._error("write", posixpath.join(parent, tmp), err) from err
            try:
                create_as_owner(self.libc, (uid, gid), lambda: self.libc.renameat2(
                    pfd, tmp, pfd, name, _libc.RENAME_EXCHANGE))
                swapped = True
            except FileNotFoundError:
                swapped = False
            if not swapped:
                try:
                    create_as_owner(self.libc, (uid, gid), lambda: self.libc.renameat2(
                        pfd, tmp, pfd, name, _libc.RENAME_NOREPLACE))
                except OSError as err:
                    os.unlink(tmp, dir_fd=pfd)
                    raise self._error("create", path, err) from err
        except OSError as err:  # the exchange failed: ours is still at tmp
            os.unlink(tmp, dir_fd=pfd)
            os.close(pfd)
            raise self._error("replace", path, err) from err
        except BaseException:
            os.close(pfd)
            raise
        return Exchanged(self, pfd, path, tmp, ours, swapped)

    # -- rollback ---------------------------------------------------------------------------
    def remove_created(self, entry: Created) -> bool:
        """Remove `entry` by parent fd + name if (st_dev, st_ino) still match; True if removed.

        A non-empty directory, a vanished entry or a mismatch is logged and kept. Detach any
        mount on the entry first (a mounted entry does not match).
        """
        try:
            pfd = self.open_raw(entry.parent, os.O_PATH | os.O_DIRECTORY, follow=True)
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
                log.warning("keep %s: %s", entry.path, strerror(err))
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
        return PathError(f"{op} {show(path)} in rootfs {self.host_path}: {cause(err)}")


def _write_as(root: Root, pfd: int, tmp: str, name: str, data: bytes, mode: int, uid: int,
              gid: int) -> os.stat_result:
    """`_write_at` as uid:gid when not root (`nvmount.fs.owner`): the file is born theirs,
    so no chown or chmod of another's file is needed (the ld.so.cache stage has neither
    CAP_CHOWN nor CAP_FOWNER), and it can be made where host root has no id."""
    return create_as_owner(root.libc, (uid, gid), lambda: _write_at(
        pfd, tmp, name, data, mode, uid, gid), owner_first=True)


def _write_at(pfd: int, tmp: str, name: str, data: bytes, mode: int, uid: int, gid: int
              ) -> os.stat_result:
    """`data` into new file `tmp` in `pfd`, given its mode and owner (each only where the new
    file lacks it), then renamed to `name` when the two differ; the file's stat."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=pfd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)  # first: once the owner is not us, chmod needs CAP_FOWNER
            st = os.fstat(fd)
            if (st.st_uid, st.st_gid) != (uid, gid):
                os.fchown(fd, uid, gid)
        finally:
            os.close(fd)
        if tmp != name:
            os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
    except BaseException:
        os.unlink(tmp, dir_fd=pfd)
        raise
    return st


class Exchanged:
    """A file `Root.exchange_file` put in place. `undo()` puts the old entry back (or removes
    ours where there was none), only while `path` is still the file written; `close()` removes
    what the temporary name holds then (the old entry after a commit, ours after an undo) and
    closes the directory fd. The two are a journal's undo and close steps."""

    __slots__ = ("_pfd", "_root", "_swapped", "_tmp", "ours", "path")

    def __init__(self, root: Root, pfd: int, path: str, tmp: str, ours: int,
                 swapped: bool) -> None:
        self._root, self._pfd, self.path, self._tmp = root, pfd, path, tmp
        self.ours, self._swapped = ours, swapped

    def undo(self) -> None:
        from nvmount import _libc

        name = posixpath.basename(self.path)
        if os.stat(name, dir_fd=self._pfd, follow_symlinks=False).st_ino != self.ours:
            raise PathError(f"undo {show(self.path)} in rootfs {self._root.host_path}: it is "
                            "not the file we wrote (left)")
        if self._swapped:
            self._root.libc.renameat2(self._pfd, self._tmp, self._pfd, name,
                                      _libc.RENAME_EXCHANGE)
        else:
            os.rename(name, self._tmp, src_dir_fd=self._pfd, dst_dir_fd=self._pfd)

    def close(self) -> None:
        try:
            os.unlink(self._tmp, dir_fd=self._pfd)
        except FileNotFoundError:
            pass
        finally:
            os.close(self._pfd)
