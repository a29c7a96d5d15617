"""The creating walk behind `rootfs.Root` (apply stage; touches the rootfs).

`Walker.walk(path)` resolves a container path component by component, each step a
single-name O_NOFOLLOW open relative to the verified parent fd: symlinks are followed by
hand as if chrooted (absolute links restart at the root, `..` never leaves it; at most 40),
a symlink that lives on procfs (a magic link, or /proc/self) is refused, missing
directories are created with mkdirat relative to the parent fd and recorded as `Created`.
Leaves are created with O_CREAT|O_EXCL|O_NOFOLLOW; special entries at a file target
(symlink, FIFO, socket, device) are unlinked by parent fd + name after an inode check and
replaced, never opened for reading. Symlinks go to a random temp name first and are
renamed into place with RENAME_NOREPLACE.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from nvmount.errors import PathError
from nvmount.fs.owner import create_as_owner  # not lazily: it runs after setns
from nvmount.fs.paths import (
    MAX_ROOT_WALK_STEPS,
    MAX_SYMLINKS,
    MAX_WALK_STEPS,
    NAME_MAX,
    PATH_MAX,
    Created,
    EntryKind,
    show,
    split_path,
    type_name,
)
from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from nvmount.fs.root import RootDir

    T = TypeVar("T")

log = get_logger(__name__)

_CLOEXEC = os.O_CLOEXEC
_PATH = os.O_PATH | os.O_CLOEXEC


class Walker:
    """One creating walk: follows symlinks as if chrooted, records what it creates."""

    def __init__(self, root: RootDir, uid: int, gid: int, mode: int) -> None:
        self.root = root
        self.uid = uid
        self.gid = gid
        self.mode = mode
        self.created: list[Created] = []
        self.links = 0

    def walk(self, path: str) -> int:
        """An fd on directory `path` (created as needed); the caller closes it. At most
        `MAX_WALK_STEPS` components are visited (link texts included), and
        `MAX_ROOT_WALK_STEPS` by all walks in this root: PathError beyond."""
        if len(path.encode()) >= PATH_MAX:
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        todo = split_path(path)[::-1]  # a stack: the next component is last
        cur = os.dup(self.root.fd)
        real = "/"
        steps = 0
        try:
            while todo:
                steps += 1
                self.root.walk_steps += 1
                if steps > MAX_WALK_STEPS or self.root.walk_steps > MAX_ROOT_WALK_STEPS:
                    raise self._too_many_steps(path, steps > MAX_WALK_STEPS)
                nxt, real, link = self._step(cur, real, todo.pop())
                os.close(cur)
                cur = nxt
                if link is not None:
                    todo += split_path(link)[::-1]
                    if link.startswith("/"):
                        os.close(cur)
                        cur, real = os.dup(self.root.fd), "/"
        except BaseException:
            os.close(cur)
            raise
        return cur

    def _too_many_steps(self, path: str, this_walk: bool) -> PathError:
        what = (f"more than {MAX_WALK_STEPS} path components to walk" if this_walk else
                f"more than {MAX_ROOT_WALK_STEPS} path components walked in this rootfs in all")
        return PathError(
            f"resolve {show(path)} in rootfs {self.root.host_path}: {what}, symlink texts "
            "included (long '../' chains?) (simplify the image's symlinks)")

    def _step(self, cur: int, real: str, comp: str) -> tuple[int, str, str | None]:
        """Descend from `cur` (at container path `real`) into `comp`.

        Returns (new dir fd, its container path, link text if `comp` was a symlink: then
        the new fd is `cur`'s dup and the caller splices the link text in).
        """
        if comp == "..":
            real = posixpath.dirname(real)
            return self.root.open_raw(real, os.O_PATH | os.O_DIRECTORY, follow=True), real, None
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
                    f"{self.root.host_path}: is a {type_name(st.st_mode)}, not a directory "
                    "(remove it from the image)"
                )
            return fd, self.root.real_path(fd), None
        except BaseException:
            os.close(fd)
            raise

    def _link_text(self, fd: int, real: str, comp: str) -> str:
        from nvmount import _libc

        where = posixpath.join(real, comp)
        if self.root.libc.fstatfs_type(fd) == _libc.PROC_SUPER_MAGIC:
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
            self._create(lambda: os.mkdir(comp, self.mode & 0o777, dir_fd=cur))  # `_own`
            # corrects umask and setgid
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
        """chown/chmod a fresh entry through its fd and record it. Each only when the entry
        does not have it yet (made with `mode`, as root: usually only the umask or a setgid
        parent differs, and a root container's owner is ours): a metadata write per entry
        less on the image's filesystem."""
        st = os.fstat(fd)
        self.created.append(
            Created(posixpath.join(real, name), real, name, kind, st.st_dev, st.st_ino)
        )
        if stat.S_IMODE(st.st_mode) != mode:  # first: once the owner is not us, chmod
            os.fchmod(fd, mode)  # would need CAP_FOWNER
        if (st.st_uid, st.st_gid) != (self.uid, self.gid):
            os.fchown(fd, self.uid, self.gid)

    def leaf_file(self, pfd: int, name: str, mode: int, reuse: int) -> int:
        """An fd on file `name` in dir `pfd`: created, reused, or replacing a special entry.
        Created first (O_EXCL, never following a link): an image rarely has the file."""
        real = self.root.real_path(pfd)
        where = posixpath.join(real, name)
        try:
            return self._create_file(pfd, real, name, mode)
        except FileExistsError:
            pass
        try:
            fd = os.open(name, _PATH | os.O_NOFOLLOW, dir_fd=pfd)
        except FileNotFoundError:  # removed since: create it after all (or fail)
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
        what = type_name(st.st_mode)
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
        fd = self._create(lambda: os.open(name, flags, mode & 0o777, dir_fd=pfd))  # `_own`
        # corrects the umask
        try:
            self._own(fd, mode, real, name, EntryKind.FILE)
            self.root.real_path(fd)
        except BaseException:
            os.close(fd)
            raise
        log.debug("created file %s", posixpath.join(real, name))
        return fd

    def leaf_symlink(self, pfd: int, name: str, link_text: str, *, replace: bool = False
                     ) -> bool:
        """Create symlink `name` in `pfd`; False when it is kept. Made in place (symlinkat
        fails on any existing entry) when it is born with the wanted owner; otherwise at a
        random name, chowned, then renamed into place, so that it never shows with another
        owner. An existing entry is kept, or with `replace` swapped out by that rename
        (never opened or followed; a directory there is an error) unless it is this very
        link already."""
        real = self.root.real_path(pfd)
        where = posixpath.join(real, name)
        try:
            if self._born_owned(pfd):
                self._create(lambda: os.symlink(link_text, name, dir_fd=pfd))
            else:
                self._symlink_renamed(pfd, name, link_text, replace=False)
        except FileExistsError:
            if not replace or self._same_link(pfd, name, link_text):
                log.info("keep existing %s (not replacing it with a symlink)", where)
                return False
            self._symlink_renamed(pfd, name, link_text, replace=True)
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        self.created.append(Created(where, real, name, EntryKind.SYMLINK, st.st_dev, st.st_ino))
        log.debug("created symlink %s -> %s", where, link_text)
        return True

    @staticmethod
    def _same_link(pfd: int, name: str, link_text: str) -> bool:
        try:
            return os.readlink(name, dir_fd=pfd) == link_text
        except OSError:  # not a symlink (EINVAL), or gone
            return False

    def _symlink_renamed(self, pfd: int, name: str, link_text: str, *, replace: bool) -> None:
        """Another owner (a user namespace, a setgid directory), or an entry to replace: the
        link is made at a temporary name, chowned, then renamed in (without `replace`:
        FileExistsError when `name` exists)."""
        if not replace:
            try:
                os.stat(name, dir_fd=pfd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                raise FileExistsError(name)
        tmp = f".nvhook-{os.urandom(8).hex()}"  # secrets.token_hex(8) without its imports
        self._create(lambda: os.symlink(link_text, tmp, dir_fd=pfd))
        try:
            st = os.stat(tmp, dir_fd=pfd, follow_symlinks=False)
            if (st.st_uid, st.st_gid) != (self.uid, self.gid):  # not yet the owner's
                os.chown(tmp, self.uid, self.gid, dir_fd=pfd, follow_symlinks=False)
            if replace:
                self._create(lambda: os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd))
            else:
                from nvmount import _libc

                self._create(lambda: self.root.libc.renameat2(pfd, tmp, pfd, name,
                                                              _libc.RENAME_NOREPLACE))
        except BaseException:
            os.unlink(tmp, dir_fd=pfd)
            raise

    def _create(self, create: Callable[[], T]) -> T:
        """`create()` as host root, or as the owner where the filesystem has no id for host
        root (an id-mapped rootfs: `nvmount.fs.owner`)."""
        return create_as_owner(self.root.libc, (self.uid, self.gid), create)

    def _born_owned(self, pfd: int) -> bool:
        """Whether an entry made in directory `pfd` is born owned by uid:gid: we are that
        user and group (root for a root container) and `pfd` is not setgid."""
        return ((os.geteuid(), os.getegid()) == (self.uid, self.gid)
                and not os.fstat(pfd).st_mode & stat.S_ISGID)
