"""The image's ld.so.conf, read for ldconfig by us: bounded, fd-safe, regular files only.

Stage: ldcache. `parse_conf` is pure; `read_conf` and `scan_lib_dirs` run in the ldconfig
sandbox's worker, as the container owner, inside its nodev view (`nvmount.ldcache.view`).

ldconfig is never given the image's configuration: it gets `-f <scratch>/ld.so.conf`, which
we write with the directories the image's /etc/ld.so.conf names, its includes expanded here
with glibc's rules (a relative pattern is relative to /etc, matches in sorted order, `#`
comments, `hwcap` lines ignored) and budgets:

- every file is opened O_NONBLOCK without magic links and used only when it is a regular file
  (a FIFO, socket or device is skipped with a warning: on the nodev view a device cannot even
  be opened), at most `MAX_CONF_BYTES` of it;
- at most `MAX_CONF_FILES` files, `MAX_INCLUDE_DEPTH` levels, each file once (glibc loops on
  an include cycle until it is killed), `MAX_DIRS` directories, `MAX_GLOB_ENTRIES` directory
  entries looked at by the include patterns.

Everything here runs after the sandbox's pivot_root into the container's rootfs: a module
imported then would be loaded from the image. So this module (and every module the sandbox
uses) imports what it needs at import time, in the hook, before the fork.

`scan_lib_dirs` then looks at what ldconfig will read: every entry of the library
directories (and their hwcap subdirectories), at most `MAX_SCAN_ENTRIES`. A symlink there
that resolves to a FIFO would block ldconfig's open for good: ldconfig is not run then.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from fnmatch import fnmatchcase  # at import, in the hook: the sandbox imports nothing later

from nvmount import _libc as L
from nvmount.bounds import shorten

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc

CONF = "/etc/ld.so.conf"
MAX_CONF_FILES = 64
MAX_CONF_BYTES = 64 * 1024
MAX_INCLUDE_DEPTH = 8
MAX_DIRS = 256
MAX_GLOB_ENTRIES = 4096
MAX_SCAN_ENTRIES = 32768
# ldconfig's own directories (glibc: SLIBDIR, LIBDIR, and their multiarch forms), scanned too
SYSTEM_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib32", "/usr/lib32",
               "/libx32", "/usr/libx32", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
               "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
# subdirectories ldconfig descends into (glibc-hwcaps, tls, legacy hwcap/platform names)
HWCAP_DIRS = frozenset(("glibc-hwcaps", "tls", "haswell", "xeon_phi", "x86_64", "sse2",
                        "avx512_1", "i386", "i486", "i586", "i686", "aarch64", "asimd",
                        "atomics", "sve", "sve2", "power9", "power10"))
_SPACE = " \t\n\v\f\r"  # C isspace()
_MAGIC = frozenset("*?[")
_KINDS = {stat.S_IFIFO: "a fifo", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symlink"}


class Budget(Exception):
    """A budget was exceeded: ldconfig is not run (the text says which and where)."""


def parse_conf(text: str) -> list[tuple[str, str]]:
    """glibc's parse_conf on one file: ("dir", line) and ("include", pattern) in file order.

    A line ends at NUL, loses its `#` comment and leading blanks; `include P1 P2` gives its
    patterns, `hwcap ...` is ignored; any other line is one directory, trailing blanks and
    slashes removed (ldconfig parses the optional `=TYPE` suffix itself)."""
    items: list[tuple[str, str]] = []
    for raw in text.split("\n"):
        line = raw.split("\0", 1)[0].split("#", 1)[0].lstrip(_SPACE)
        if not line:
            continue
        if line.startswith("include") and line[7:8] in (" ", "\t"):
            items += [("include", p) for p in _split_blanks(line[8:]) if p]
        elif line[:5].lower() == "hwcap" and line[5:6] in (" ", "\t"):
            continue
        else:
            path = line.rstrip(_SPACE)
            while len(path) > 1 and path.endswith("/"):
                path = path[:-1]
            if path:
                items.append(("dir", path))
    return items


def _split_blanks(text: str) -> list[str]:
    return text.replace("\t", " ").split(" ")


def dir_path(line: str) -> str:
    """The directory of a conf line as ldconfig canonicalises it (`=TYPE` and blanks cut)."""
    path = line.split("=", 1)[0].rstrip(_SPACE)
    while len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return path


class ConfReader:
    """Reads /etc/ld.so.conf and its includes in the view (see the module docstring)."""

    def __init__(self, libc: Libc) -> None:
        self.libc = libc
        self.dirs: list[str] = []
        self.warnings: list[str] = []
        self.files = 0
        self.glob_entries = 0
        self._seen: set[tuple[int, int]] = set()

    def read(self, path: str = CONF) -> tuple[list[str], list[str]]:
        """(directory lines, warnings) of the image's configuration. Raises Budget."""
        self._file(path, 0)
        return self.dirs, self.warnings

    def _file(self, path: str, depth: int) -> None:
        text = self._load(path)
        if text is None:
            return
        for kind, value in parse_conf(text):
            if kind == "dir":
                if len(self.dirs) >= MAX_DIRS:
                    raise Budget(f"{CONF} and its includes name more than {MAX_DIRS} "
                                 "directories")
                self.dirs.append(value)
                continue
            if depth + 1 > MAX_INCLUDE_DEPTH:
                raise Budget(f"includes nested deeper than {MAX_INCLUDE_DEPTH} levels "
                             f"({shorten(path)})")
            pattern = value if value.startswith("/") else posixpath.join("/etc", value)
            for match in self._glob(pattern):
                self._file(match, depth + 1)

    def _load(self, path: str) -> str | None:
        """The text of `path` when it is a regular file not read before; else None (and a
        warning for anything but a missing file)."""
        try:
            fd = self.libc.openat2(L.AT_FDCWD, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY,
                                   resolve=L.RESOLVE_NO_MAGICLINKS)
        except OSError as err:
            if err.errno != errno.ENOENT or path != CONF:
                self.warnings.append(f"skip {shorten(path)}: {os.strerror(err.errno or 0)}")
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
                self.warnings.append(f"skip {shorten(path)}: {kind} (never read)")
                return None
            if (st.st_dev, st.st_ino) in self._seen:
                return None  # an include cycle, or the same file twice: once is enough
            self._seen.add((st.st_dev, st.st_ino))
            self.files += 1
            if self.files > MAX_CONF_FILES:
                raise Budget(f"{CONF} and its includes are more than {MAX_CONF_FILES} files")
            data = os.read(fd, MAX_CONF_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_CONF_BYTES:
            raise Budget(f"{shorten(path)} is larger than {MAX_CONF_BYTES // 1024} KiB")
        return data.decode("utf-8", "surrogateescape")

    def _glob(self, pattern: str) -> list[str]:
        """glob(3) without flags, bounded: matches in sorted order; a leading dot only
        matches a pattern that starts with one."""
        paths = ["/"]
        parts = [p for p in pattern.split("/") if p]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if not _MAGIC & set(part):
                paths = [posixpath.join(p, part) for p in paths]
                continue
            paths = [m for p in paths for m in self._match(p, part, dirs_only=not last)]
        return sorted(p for p in paths if os.path.lexists(p))

    def _match(self, directory: str, part: str, *, dirs_only: bool) -> list[str]:
        try:
            fd = self.libc.openat2(L.AT_FDCWD, directory, os.O_RDONLY | os.O_DIRECTORY,
                                   resolve=L.RESOLVE_NO_MAGICLINKS)
        except OSError:
            return []
        out = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    self.glob_entries += 1
                    if self.glob_entries > MAX_GLOB_ENTRIES:
                        raise Budget(f"include patterns of {CONF} look at more than "
                                     f"{MAX_GLOB_ENTRIES} directory entries")
                    name = entry.name
                    if name.startswith(".") and not part.startswith("."):
                        continue
                    if fnmatchcase(name, part) and (not dirs_only or _is_dir(entry)):
                        out.append(posixpath.join(directory, name))
        finally:
            os.close(fd)
        return out


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def write_conf(path: str, dirs: list[str]) -> None:
    """Our configuration for ldconfig: one directory per line, nothing else (a new file on
    the scratch tmpfs)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        data = "".join(d + "\n" for d in dirs).encode("utf-8", "surrogateescape")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def first_names(dirs: tuple[str, ...], order: list[str]) -> list[str]:
    """Each of `dirs` under the first name `order` (the configuration's directories, then
    ldconfig's own) gives the same directory: ldconfig lists a directory met twice under the
    name it met first, so the driver's libraries get the path an ldconfig run in the
    container gives them (/lib/<triplet> on a merged-/usr image), wherever the plan put them."""
    ids: dict[str, tuple[int, int] | None] = {}

    def ident(path: str) -> tuple[int, int] | None:
        if path not in ids:
            try:
                st = os.stat(path)
            except OSError:
                ids[path] = None
            else:
                ids[path] = (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None
        return ids[path]

    out = []
    for directory in dirs:
        want = ident(directory)
        out.append(next((c for c in order[:MAX_DIRS] if want is not None and ident(c) == want),
                        directory))
    return out


def scan_lib_dirs(dirs: list[str], libc: Libc) -> str | None:
    """Why ldconfig must not run on these directories (None: it may): a symlink that resolves
    to a FIFO (ldconfig's open would block). Raises Budget past `MAX_SCAN_ENTRIES` entries."""
    seen: set[tuple[int, int]] = set()
    count = [0]
    todo = [(d, 0) for d in dict.fromkeys(dir_path(d) for d in dirs) if d.startswith("/")]
    while todo:
        directory, depth = todo.pop()
        found = _scan_one(directory, depth, libc, seen, count, todo)
        if found:
            return found
    return None


def _scan_one(directory: str, depth: int, libc: Libc, seen: set[tuple[int, int]],
              count: list[int], todo: list[tuple[str, int]]) -> str | None:
    try:
        fd = libc.openat2(L.AT_FDCWD, directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK,
                          resolve=L.RESOLVE_NO_MAGICLINKS)
    except OSError:
        return None  # missing or unreadable: ldconfig skips it as well
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in seen:
            return None
        seen.add((st.st_dev, st.st_ino))
        with os.scandir(fd) as entries:
            for entry in entries:
                count[0] += 1
                if count[0] > MAX_SCAN_ENTRIES:
                    raise Budget(f"the library directories have more than {MAX_SCAN_ENTRIES} "
                                 f"entries (at {shorten(directory)})")
                path = posixpath.join(directory, entry.name)
                if entry.is_symlink() and _resolves_to_fifo(entry.name, fd):
                    return f"{shorten(path)} is a symlink to a fifo (ldconfig would block " \
                           "opening it)"
                hwcaps_child = depth == 1 and directory.endswith("/glibc-hwcaps")
                if (depth == 0 and entry.name in HWCAP_DIRS) or hwcaps_child:
                    todo.append((path, depth + 1))
    finally:
        os.close(fd)
    return None


def _resolves_to_fifo(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False
