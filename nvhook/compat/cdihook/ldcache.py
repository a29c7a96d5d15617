"""`update-ldcache --folder DIR ...` by nvhook's own ld.so.cache writer (`[nvhook] ldcache =
"write"`, the default): what the sandboxed ldconfig would add for the folders, without
running it. Stage: ldcache (changes the rootfs, never the host).

What the runtime added to a folder for the spec is what is mounted there: the driver's
files, bind-mounted one by one (or the folder itself, or a directory above it, mounted
whole), and the links to them (create-symlinks, or the image's own). For those the cache
entries are ldconfig's (glibc's search_dir): a library with SONAME S (its file name
without one) is keyed S at FOLDER/S, a link named N to it is keyed N when N is S, or ends
in ".so" and starts S; a missing FOLDER/S link is made, as ldconfig (without -N) makes it.
The folders' entries go in front of the image's, first folder first (ldconfig reads the
directories of its command line first); the image's own entries stay as its cache lists
them (the write mode's terms, `nvmount.ldcache.write`). Every file is found through the
rootfs (`Root`), opened only after O_PATH|O_NOFOLLOW and fstat said it is a regular file,
and read a few bounded ranges at a time (its ELF headers).

`Fallback` (the sandboxed ldconfig runs instead) whenever the writer cannot say exactly what
ldconfig would: the image's compat conf (enable-cuda-compat's `00-compat-*.conf`: its
directory goes first), a mount under a subdirectory ldconfig descends into (glibc-hwcaps,
tls, ...), a mounted library that is not a shared object of this machine's ABIs, two
mounted libraries with one SONAME, a FOLDER/S that is not a link to the library, more than
`files.MAX_ENTRIES` entries in a folder, an image cache the writer does not rewrite.
"""

from __future__ import annotations

import os
import stat

from nvmount.api import Fallback

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Container

    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

# ldconfig's subdirectories (nvmount.ldcache.ldconf.HWCAP_DIRS; not imported: it loads fnmatch)
HWCAP_DIRS = frozenset(("glibc-hwcaps", "tls", "haswell", "xeon_phi", "x86_64", "sse2",
                        "avx512_1", "i386", "i486", "i586", "i686", "aarch64", "asimd",
                        "atomics", "sve", "sve2", "power9", "power10"))
# (ELF class, e_machine) -> 32-bit? per machine; anything else is left to ldconfig
ELF_ABIS = {"x86_64": {(2, 62): False, (1, 3): True}, "aarch64": {(2, 183): False},
            "ppc64le": {(2, 21): False}}
ET_DYN = 3
# enable-cuda-compat's files (`hooks`): their directories go first
LDSO_CONF_D = "/etc/ld.so.conf.d"
COMPAT_PREFIX, COMPAT_SUFFIX = "00-compat-", ".conf"
MAX_MOUNTINFO = 16 << 20
MAX_HOPS = 8
HEAD = 16 << 10  # the first read of a library: its headers, usually .dynamic and .dynstr
SONAME_CACHE, SONAME_STAMP = "cdi-sonames", 1  # in nvmount.cachefile.DEFAULT_DIR
MAX_SONAMES = 4096


def is_library_name(name: str) -> bool:
    """ldconfig's test of a directory entry's name."""
    return name.startswith(("lib", "ld-")) and ".so" in name


def mount_points(procfs: ProcFs) -> set[str]:
    """The mount points of this process's mount namespace, as kernel paths."""
    fd = os.open("thread-self/mountinfo", os.O_RDONLY | os.O_CLOEXEC, dir_fd=procfs.fd)
    try:
        chunks, size = [], 0
        while size <= MAX_MOUNTINFO and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_MOUNTINFO:
        raise Fallback("more than 16 MiB of mounts")
    out = set()
    for line in b"".join(chunks).split(b"\n"):
        fields = line.split(b" ", 5)
        if len(fields) > 4:
            out.add(unescape(fields[4].decode("utf-8", "surrogateescape")))
    return out


def unescape(path: str) -> str:
    """A mountinfo path: the kernel writes space, tab, newline and backslash as \\ooo."""
    if "\\" not in path:
        return path
    parts = path.split("\\")
    return parts[0] + "".join(chr(int(p[:3], 8)) + p[3:] if len(p) >= 3 and
                              p[:3].isdigit() else "\\" + p for p in parts[1:])


def new_files(kdir: str, prefix: str, mounts: set[str]) -> set[str] | None:
    """Names in the folder at kernel path `kdir` that are mount points; None when all of
    it is (the folder or a directory above it inside the rootfs `prefix` is a mount)."""
    inner = prefix.rstrip("/") + "/"
    if any(m == kdir or (m.startswith(inner) and kdir.startswith(m + "/")) for m in mounts):
        return None
    names = set()
    base = kdir.rstrip("/") + "/"
    for m in mounts:
        if m.startswith(base):
            name, slash, _ = m[len(base):].partition("/")
            if slash and name in HWCAP_DIRS:
                raise Fallback(f"a mount under {kdir}/{name}, which ldconfig reads too")
            if not slash:
                names.add(name)
    return names


class Sonames:
    """What the libraries' ELF headers said, by file identity (dev, inode, size, mtime,
    ctime): kept in root's cache directory (`nvmount.cachefile`), so that the driver's
    libraries, mounted into every container, are read once. Only a hook that sees the
    host's /run (before pivot_root) uses it."""

    __slots__ = ("known", "learned", "use")

    def __init__(self, use: bool) -> None:
        self.use = use
        self.known: dict[tuple[int, ...], tuple[str, int, int, int]] = {}
        self.learned = False
        if use:
            from nvmount.cachefile import DEFAULT_DIR, load

            value = load(DEFAULT_DIR, SONAME_CACHE, SONAME_STAMP)
            if isinstance(value, dict):
                self.known = value

    def facts(self, st: os.stat_result, lib_fd: int, name: str, procfs: ProcFs
              ) -> tuple[str, int, int, int]:
        """(SONAME, ELF class, machine, type) of the regular file `st` (O_PATH fd
        `lib_fd`); Fallback when it is not an ELF object."""
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        found = self.known.get(key)
        if found is None:
            found = _read_elf(lib_fd, name, procfs)
            self.known[key] = found
            self.learned = True
        return found

    def save(self) -> None:
        if self.use and self.learned:
            from nvmount.cachefile import DEFAULT_DIR, store

            kept = dict(list(self.known.items())[-MAX_SONAMES:])
            store(DEFAULT_DIR, SONAME_CACHE, SONAME_STAMP, kept)


def _read_elf(path_fd: int, name: str, procfs: ProcFs) -> tuple[str, int, int, int]:
    from nvmount.api import ElfFormatError, parse_elf

    lib = os.open(f"thread-self/fd/{path_fd}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=procfs.fd)
    try:
        head = os.pread(lib, HEAD, 0)

        def read(offset: int, size: int) -> bytes:
            if offset + size <= len(head) or len(head) < HEAD:
                return head[offset:offset + size]
            return os.pread(lib, size, offset) if 0 <= offset < 1 << 62 else b""

        try:
            info = parse_elf(read)
        except ElfFormatError as err:
            raise Fallback(f"{name}: {err}") from err
    finally:
        os.close(lib)
    e_type = head[16] | head[17] << 8 if head[5] == 1 else head[17] | head[16] << 8
    return info.soname, info.elf_class, info.machine, e_type


def read_library(path_fd: int, name: str, procfs: ProcFs, abis: dict[tuple[int, int], bool],
                 sonames: Sonames) -> tuple[str, bool, tuple[int, int]] | None:
    """(SONAME or `name`, 32-bit?, (dev, inode)) of the file of O_PATH fd `path_fd`; None
    when it is not a regular file (ldconfig passes it over). Fallback when it is not a
    shared object of this machine's ABIs."""
    st = os.fstat(path_fd)
    if not stat.S_ISREG(st.st_mode):
        return None
    soname, elf_class, machine, e_type = sonames.facts(st, path_fd, name, procfs)
    is32 = abis.get((elf_class, machine))
    if is32 is None or e_type != ET_DYN:
        raise Fallback(f"{name}: not a shared library of this machine's ABIs")
    return soname or name, is32, (st.st_dev, st.st_ino)


def _library(dir_fd: int, name: str, procfs: ProcFs, abis: dict[tuple[int, int], bool],
             sonames: Sonames) -> tuple[str, bool, tuple[int, int]] | None:
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return read_library(fd, name, procfs, abis, sonames)
    finally:
        os.close(fd)


def _entries(fd: int) -> dict[str, bool]:
    """{name: is a symlink} of the folder's entries (at most `files.MAX_ENTRIES`)."""
    from nvhook.compat.cdihook.files import MAX_ENTRIES

    out: dict[str, bool] = {}
    with os.scandir(fd) as entries:
        for entry in entries:
            if len(out) == MAX_ENTRIES:
                raise Fallback(f"more than {MAX_ENTRIES} entries in a folder")
            out[entry.name] = entry.is_symlink()
    return out


def _chain(name: str, libs: Container[str], texts: dict[str, str]) -> str | None:
    """The new library of the folder a link reaches by plain names ("" when a hop has a
    slash: resolved through the rootfs instead), None when it reaches none."""
    for _ in range(MAX_HOPS):
        if name in libs:
            return name
        text = texts.get(name)
        if text is None:
            return None
        if "/" in text:
            return ""
        name = text
    return None


def _elsewhere(root: Root, procfs: ProcFs, path: str, mounts: set[str],
               abis: dict[tuple[int, int], bool], sonames: Sonames) -> tuple[str, bool] | None:
    """(SONAME, 32-bit?) of the mounted library link `path` reaches through the rootfs,
    None when what it reaches is not mounted (the image's own) or not a library."""
    from nvmount.errors import PathError

    try:
        fd = root.open_path(path, os.O_PATH)
    except PathError:
        return None
    try:
        parts, inner = procfs.fd_path(fd).split("/"), root.prefix.rstrip("/") + "/"
        if not any(p in mounts and p.startswith(inner) for p in
                   ("/".join(parts[:i]) for i in range(2, len(parts) + 1))):
            return None  # the image's own file: its cache lists it
        found = read_library(fd, path, procfs, abis, sonames)
    finally:
        os.close(fd)
    return None if found is None else found[:2]


def folder_entries(root: Root, procfs: ProcFs, folder: str, mounts: set[str],
                   abis: dict[tuple[int, int], bool], sonames: Sonames
                   ) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str]]]:
    """(cache entries (key, container path, 32-bit?), SONAME links to make (path, text)) of
    what is mounted in `folder` (see the module docstring); nothing for a missing folder."""
    from nvmount.errors import PathError

    try:
        fd = root.open_path(folder, os.O_RDONLY | os.O_DIRECTORY)
    except PathError:
        return [], []  # ldconfig passes a missing folder over
    try:
        real = root.real_path(fd)
        kdir = real if root.prefix == "/" else root.prefix + ("" if real == "/" else real)
        fresh = new_files(kdir, root.prefix, mounts)
        names = _entries(fd)
        libs = {n: found for n, link in names.items() if not link and is_library_name(n)
                and (fresh is None or n in fresh)
                and (found := _library(fd, n, procfs, abis, sonames)) is not None}
        texts = {n: os.readlink(n, dir_fd=fd) for n, link in names.items()
                 if link and is_library_name(n)}
        links: dict[str, tuple[str, bool, str]] = {}  # name -> SONAME, 32-bit?, library
        for name in texts:
            lib = _chain(name, libs, texts)
            if lib:
                links[name] = (libs[lib][0], libs[lib][1], lib)
            elif lib == "" and (far := _elsewhere(root, procfs, f"{real}/{name}", mounts,
                                                  abis, sonames)) is not None:
                links[name] = (far[0], far[1], "")
    finally:
        os.close(fd)
    return ldconfig_view(real, names, libs, links, texts)


def ldconfig_view(real: str, names: dict[str, bool],
                  libs: dict[str, tuple[str, bool, tuple[int, int]]],
                  links: dict[str, tuple[str, bool, str]], texts: dict[str, str]
                  ) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str]]]:
    """ldconfig's entries for the new libraries and links of folder `real` (pure)."""
    base = real.rstrip("/")
    keyed: dict[str, bool] = {}
    make: list[tuple[str, str]] = []
    sonames = [soname for soname, _, _ in libs.values()]
    for name, (soname, is32, _) in sorted(libs.items()):
        if sonames.count(soname) > 1:
            raise Fallback(f"two mounted libraries in {base} have the SONAME {soname}")
        keyed[soname] = is32
        if soname == name:
            continue
        if soname not in names:
            make.append((f"{base}/{soname}", name))
        elif soname not in texts or _chain(soname, libs, texts) != name:
            raise Fallback(f"{base}/{soname} is not a link to the mounted {name}")
    for name, (soname, is32, lib) in sorted(links.items()):
        own = name == soname or (name.endswith(".so") and soname.startswith(name))
        if not own and not lib:
            raise Fallback(f"{base}/{name} links to a library elsewhere named otherwise")
        keyed.setdefault(name if own else soname, is32)
    return [(key, f"{base}/{key}", is32) for key, is32 in keyed.items()], make


def compat_dirs(root: Root, procfs: ProcFs) -> list[str]:
    """The directories of the image's /etc/ld.so.conf.d/00-compat-*.conf files (written by
    enable-cuda-compat): ldconfig must see them first, as NVIDIA's file order makes it."""
    from nvhook.compat.cdihook import files

    listed = files.list_dir(root, LDSO_CONF_D)
    if listed is None:
        return []
    fd, names = listed
    dirs: list[str] = []
    try:
        for name in sorted(n for n in names if n.startswith(COMPAT_PREFIX)
                           and n.endswith(COMPAT_SUFFIX)):
            data = files.read_small(fd, name, procfs) or b""
            dirs += [line.strip() for line in data.decode("utf-8", "replace").splitlines()
                     if line.strip().startswith("/")]
    finally:
        os.close(fd)
    return dirs[:64]


def write_cache(root: Root, procfs: ProcFs, folders: list[str], owner: tuple[int, int],
                *, host_run: bool = False) -> str:
    """ldconfig's entries for what is mounted in `folders` written into the image's
    ld.so.cache (and the missing SONAME links made); what was done. `host_run`: the hook
    sees the host's /run (before pivot_root), where `Sonames` keeps what it read. Raises
    Fallback (run the sandboxed ldconfig instead) or LdcacheError."""
    from nvmount.api import MACHINE_ARCHES, Journal, entries_for, write_entries

    machine = os.uname().machine
    abis, arches = ELF_ABIS.get(machine), MACHINE_ARCHES.get(machine)
    if abis is None or arches is None:
        raise Fallback(f"no cache writer for {machine}")
    if compat_dirs(root, procfs):
        raise Fallback("the CUDA compat directory goes first")
    mounts = mount_points(procfs)
    sonames = Sonames(host_run)
    triples: list[tuple[str, str, bool]] = []
    for folder in folders:
        found, make = folder_entries(root, procfs, folder, mounts, abis, sonames)
        for path, text in make:
            root.symlink(path, text, *owner, replace=True)
        triples += found
    sonames.save()
    journal = Journal("update-ldcache")
    try:
        done = write_entries(root, procfs, entries_for(tuple(triples), arches), owner,
                             journal)
    except BaseException:
        journal.rollback()
        raise
    journal.commit()
    return done
