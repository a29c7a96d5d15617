"""Trusted host paths: how root opens, reads and writes a host path that config or a user can
name (caches, debug and timing logs, CDI spec dirs and outputs, config outputs, install
prefixes, the code a launcher imports, daemon configs). Stage: the fd-safe layer, host side.

A path is walked from "/" one component at a time, each opened O_PATH|O_NOFOLLOW relative to
its parent's fd, and every directory on the way must be *trusted*: owned by root (or by the
process's own user; in a user namespace also the overflow uid, as host root's files show
there) and writable by neither group nor others - or sticky, like /tmp, where nobody can
move what others own (the next component must then be trusted itself). A symlink is followed
only when it is trusted (owned as above: in a trusted directory only its owner could have
made it), so /var/run -> /run works and a link a user planted does not; at most 40. What is
not trusted is a `TrustError`: one line naming the component, who owns it, its mode and what
to do. Leaves:

- `read_file`: a regular, trusted file opened O_NOFOLLOW|O_NONBLOCK (a FIFO cannot stall
  root), bounded; a trusted leaf symlink is followed as above;
- `open_log`: the file's own directory may also be group-writable, as distributions ship
  log directories (Ubuntu's /var/log is root:syslog 0775): the file is created O_EXCL, or
  opened O_APPEND|O_NOFOLLOW|O_NONBLOCK, and kept only when fstat shows a regular file of a
  trusted owner with a single link (a hard link to /etc/shadow is root's regular file too);
- `write_atomic`: a new file (O_CREAT|O_EXCL|O_NOFOLLOW) in the trusted directory, its
  mode set with fchmod on the fd (a kept mode loses setuid/setgid/sticky), fsync, renamed
  over the old entry (a symlink there is replaced, never followed);
- `check_path` / `check_tree`: code root will run (install): the chain, and every entry
  below a package directory, trusted; no symlink inside a tree.

Cost: one openat and one fstat per component (/run/nvhook: three of each, ~10 us).
"""

from __future__ import annotations

import os

from nvmount.errors import TrustError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterator

MAX_LINKS = 40
_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = _PATH | os.O_DIRECTORY
_S_IFMT, _S_IFDIR, _S_IFREG, _S_IFLNK = 0o170000, 0o040000, 0o100000, 0o120000
_STICKY = 0o1000
_KINDS = {0o010000: "a FIFO", 0o020000: "a character device", 0o060000: "a block device",
          0o140000: "a socket", _S_IFLNK: "a symlink", _S_IFDIR: "a directory"}
_HINT = "root uses only paths whose every component is root's and writable by no one else"


def _owners(uid: int) -> bool:
    """Whether `uid` may own what root trusts (see the module docstring)."""
    if uid == 0 or uid == os.geteuid():
        return True
    try:
        with open("/proc/self/uid_map", "rb") as f:
            if f.read(256).split() == [b"0", b"0", b"4294967295"]:
                return False
        with open("/proc/sys/kernel/overflowuid", "rb") as f:
            return uid == int(f.read(16).strip() or b"65534")
    except (OSError, ValueError):
        return False


def _kind(mode: int) -> str:
    return _KINDS.get(mode & _S_IFMT, "not a regular file")


class _Walk:
    """One walk of a path for `what` (the error's subject); collects the fds it opens."""

    __slots__ = ("group_ok", "links", "path", "what")

    def __init__(self, path: str, what: str, group_ok: bool = False) -> None:
        self.path, self.what, self.group_ok, self.links = path, what, group_ok, 0

    def error(self, real: str, reason: str, hint: str = _HINT) -> TrustError:
        shown = "" if real == self.path else f"{real}: "
        return TrustError(f"{self.what} {self.path}", f"{shown}{reason} ({hint})")

    def check(self, st: os.stat_result, real: str, *, last_dir: bool = False) -> None:
        """A directory (or leaf) on the way must be trusted."""
        if not _owners(st.st_uid):
            raise self.error(real, f"owned by uid {st.st_uid} (mode {st.st_mode & 0o7777:04o}),"
                                   " not root", f"{_HINT}: chown root, or choose another path")
        writable = 0o002 if last_dir and self.group_ok else 0o022
        if st.st_mode & writable and not (st.st_mode & _S_IFMT == _S_IFDIR
                                          and st.st_mode & _STICKY):
            raise self.error(real, f"writable by group or others (mode "
                                   f"{st.st_mode & 0o7777:04o})",
                             f"{_HINT}: chmod go-w, or choose another path")

    def parts(self, path: str) -> list[str]:
        if not path.startswith("/") or "\0" in path or len(path) > 4096:
            raise TrustError(f"{self.what} {self.path!r}", "not an absolute path")
        return [p for p in path.split("/") if p and p != "."]

    def follow(self, dfd: int, name: str, st: os.stat_result, real: str) -> list[str]:
        """The components of a trusted symlink's text (absolute: from "/")."""
        self.links += 1
        if self.links > MAX_LINKS:
            raise self.error(real, f"more than {MAX_LINKS} symlinks", "fix the symlink loop")
        if not _owners(st.st_uid):
            raise self.error(real, f"a symlink owned by uid {st.st_uid}")
        text = os.readlink(name, dir_fd=dfd)
        return (["/"] if text.startswith("/") else []) + self.parts("/" + text)

    def directory(self, path: str, *, create: int = 0, parents: bool = False) -> tuple[int, str]:
        """(O_PATH fd, real path) of the trusted directory `path`; missing components are made
        with mode `create` (the last one only, unless `parents`)."""
        todo = self.parts(path)
        stack = [(os.open("/", _DIR), "/")]
        try:
            self.check(os.fstat(stack[0][0]), "/", last_dir=not todo)
            while todo:
                name = todo.pop(0)
                if name in ("/", ".."):
                    while len(stack) > 1:
                        os.close(stack.pop()[0])
                        if name == "..":
                            break
                else:
                    self._step(stack, todo, name, create if (parents or not todo) else 0)
            return stack.pop()
        finally:
            for fd, _ in stack:
                os.close(fd)

    def _step(self, stack: list[tuple[int, str]], todo: list[str], name: str,
              create: int) -> None:
        fd, real = stack[-1]
        here = os.path.join(real, name)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            if not create:
                raise
            try:  # noqa: SIM105 (no contextlib import on the hook path)
                os.mkdir(name, create, dir_fd=fd)
            except FileExistsError:
                pass
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if st.st_mode & _S_IFMT == _S_IFLNK:
            todo[:0] = self.follow(fd, name, st, here)
            return
        if st.st_mode & _S_IFMT != _S_IFDIR:
            raise self.error(here, f"{_kind(st.st_mode)}, not a directory", "choose another path")
        nfd = os.open(name, _DIR, dir_fd=fd)
        stack.append((nfd, here))
        self.check(os.fstat(nfd), here, last_dir=not any(p != "." for p in todo))

    def leaf(self, path: str, *, create: int = 0, parents: bool = False,
             follow: bool = True) -> tuple[int, str, str]:
        """(trusted parent directory fd, leaf name, the leaf's real path) of `path`; a trusted
        symlink at the leaf is followed when `follow`."""
        while True:
            head, _, name = path.rstrip("/").rpartition("/")
            if not name or name in (".", ".."):
                raise self.error(path, "not a file path", "name a file")
            dfd, real = self.directory(head or "/", create=create, parents=parents)
            here = os.path.join(real, name)
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                return dfd, name, here
            except OSError:
                os.close(dfd)
                raise
            if not follow or st.st_mode & _S_IFMT != _S_IFLNK:
                return dfd, name, here
            try:
                rest = self.follow(dfd, name, st, here)
            finally:
                os.close(dfd)
            path = "/" + "/".join(rest[1:]) if rest[:1] == ["/"] else os.path.join(real, *rest)


def open_dir(path: str, what: str, *, create: int = 0, parents: bool = False) -> int:
    """An O_PATH fd of the trusted directory `path` (created with mode `create` if missing:
    the last component, or every missing one with `parents`). TrustError, OSError."""
    return _Walk(path, what).directory(path, create=create, parents=parents)[0]


def list_dir(path: str, what: str) -> list[str]:
    """The names in the trusted directory `path`, sorted."""
    dfd = open_dir(path, what)
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
    finally:
        os.close(dfd)
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def read_file(path: str, what: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes of the trusted regular file `path` (the caller refuses more)."""
    walk = _Walk(path, what)
    dfd, name, real = walk.leaf(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC, dir_fd=dfd)
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if st.st_mode & _S_IFMT != _S_IFREG:
            raise walk.error(real, f"{_kind(st.st_mode)}, not a regular file", "name a file")
        walk.check(st, real)
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_log(path: str, what: str, mode: int = 0o644, *, parents: bool = False) -> int:
    """A write-only O_APPEND fd of the log file `path` (see the module docstring); missing
    directories are made 0755 with `parents`."""
    walk = _Walk(path, what, group_ok=True)
    dfd, name, real = walk.leaf(path, create=0o755 if parents else 0, parents=parents,
                                follow=False)
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY \
        | os.O_CLOEXEC
    try:
        try:
            fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, mode, dir_fd=dfd)
        except FileExistsError:
            fd = _open_existing(walk, dfd, name, real, flags)
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if st.st_mode & _S_IFMT != _S_IFREG:
            raise walk.error(real, f"{_kind(st.st_mode)}, not a regular file", "name a file")
        if not _owners(st.st_uid) or st.st_nlink != 1:
            raise walk.error(real, f"owned by uid {st.st_uid} with {st.st_nlink} links",
                             "a log file must be root's own regular file with a single link")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_existing(walk: _Walk, dfd: int, name: str, real: str, flags: int) -> int:
    try:
        return os.open(name, flags, dir_fd=dfd)
    except OSError:  # ELOOP (a symlink), ENXIO (a FIFO without a reader), ...
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if st.st_mode & _S_IFMT != _S_IFREG:
            raise walk.error(real, f"{_kind(st.st_mode)}, not a regular file",
                             "name a file") from None
        raise


def write_atomic(path: str, data: bytes, what: str, *, mode: int = 0o644,
                 keep_mode: bool = False, parents: bool = False) -> None:
    """Replace `path` with `data` (see the module docstring); `keep_mode`: the mode of the
    regular file there now (permission bits only), else `mode`. Missing directories are made
    0755 with `parents`. TrustError, OSError (the temporary file removed)."""
    walk = _Walk(path, what)
    dfd, name, _ = walk.leaf(path, create=0o755 if parents else 0, parents=parents,
                             follow=False)
    try:
        if keep_mode:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if st.st_mode & _S_IFMT == _S_IFREG:
                    mode = st.st_mode
            except FileNotFoundError:
                pass
        tmp = f".{name}.nvhook-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        try:
            _write_all(fd, data, mode & 0o777)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def _write_all(fd: int, data: bytes, mode: int) -> None:
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def check_path(path: str, what: str) -> str:
    """`path` (a directory or a file) and every directory above it are trusted; its real
    path (symlinks resolved as the walk follows them)."""
    walk = _Walk(path, what)
    dfd, name, real = walk.leaf(path)
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(dfd)
    walk.check(st, real)
    return real


def check_tree(path: str, what: str) -> int:
    """`path` as `check_path`, and every entry below it: trusted, no symlink; the number of
    entries checked."""
    real = check_path(path, what)
    walk = _Walk(path, what)
    count = 0
    if os.lstat(real).st_mode & _S_IFMT != _S_IFDIR:
        return count
    for entry, st in _entries(real):
        count += 1
        if st.st_mode & _S_IFMT == _S_IFLNK:
            raise walk.error(entry, "a symlink inside code root runs",
                             "install with copies, not links")
        walk.check(st, entry)
    return count


def _entries(top: str) -> Iterator[tuple[str, os.stat_result]]:
    todo = [top]
    while todo:
        with os.scandir(todo.pop()) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                yield entry.path, st
                if st.st_mode & _S_IFMT == _S_IFDIR:
                    todo.append(entry.path)
