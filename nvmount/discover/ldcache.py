"""Parse glibc's ld.so.cache (libnvc-spec Appendix A). Pure: bytes in, records out.

Both on-disk formats are read:

- the new format, ``glibc-ld.so.cache1.1`` (48-byte header, 24-byte entries, string offsets
  relative to the start of the new header), alone or after an old-format block (the "compat"
  layout glibc wrote until 2.32);
- the old format alone, ``ld.so-1.7.0`` (16-byte header, 12-byte entries, string offsets
  relative to the string table that follows the entries).

Every offset is bounds-checked against the buffer: a truncated or hostile cache raises
`DriverError`, it never reads out of bounds or loops. The only I/O is `read_ldcache`.
"""

from __future__ import annotations

import os
import struct
import sys

from nvmount.errors import DriverError
from nvmount.records import record

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache"
NEW_VERSION = b"1.1"

FLAG_ELF = 0x0001  # any ELF library (libc5 = 0x2 and libc6 = 0x3 include the bit)
FLAG_TYPE_MASK = 0x00FF
FLAG_ARCH_MASK = 0xFF00

# (flags & FLAG_ARCH_MASK) per ABI, as ldconfig writes them.
ARCH_I386 = 0x0000
ARCH_X86_64 = 0x0300
ARCH_PPC64 = 0x0500
ARCH_ARMHF = 0x0900
ARCH_AARCH64 = 0x0A00

# machine -> (64-bit arch flags, 32-bit arch flags or None when there is no 32-bit ABI)
MACHINE_ARCHES: dict[str, tuple[int, int | None]] = {
    "x86_64": (ARCH_X86_64, ARCH_I386),
    "aarch64": (ARCH_AARCH64, ARCH_ARMHF),
    "ppc64le": (ARCH_PPC64, None),
}

MAX_CACHE_SIZE = 256 << 20  # ldconfig's own caches are a few hundred KiB

_OLD_HEADER = struct.Struct("=11sxI")  # magic, pad, nlibs
_OLD_ENTRY = struct.Struct("=iII")  # flags, key, value
_NEW_HEADER = struct.Struct("=17s3sIIB3xI12x")  # magic, version, nlibs, strtab, flags, ext
_NEW_ENTRY = struct.Struct("=iIIIQ")  # flags, key, value, osversion, hwcap
_ENDIAN_LITTLE, _ENDIAN_BIG = 2, 3


@record
class LdcacheEntry:
    """One ld.so.cache entry: a name, its path and its type and ABI flags."""

    key: str  # the soname (or file name) ldconfig recorded, e.g. "libcuda.so.1"
    value: str  # absolute path of that name, e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    flags: int  # type | arch bits
    hwcap: int = 0

    @property
    def arch(self) -> int:
        return self.flags & FLAG_ARCH_MASK

    def is_elf_for(self, arch: int) -> bool:
        """libnvc's test: an ELF entry (`flags & 1`) of exactly this ABI."""
        return bool(self.flags & FLAG_ELF) and self.arch == arch


def _unsupported(path: str, why: str) -> DriverError:
    return DriverError(
        f"parse ld.so.cache {path}: unsupported file format: {why} "
        f"(regenerate it with 'ldconfig', or point ldcache at the driver root's cache)"
    )


def _cstring(data: bytes, start: int, path: str) -> bytes:
    """The NUL-terminated string at `start`; raises when it is outside the buffer."""
    if start >= len(data):
        raise _unsupported(path, f"string offset {start} is past the end of the file")
    end = data.find(b"\0", start)
    if end < 0:
        raise _unsupported(path, f"string at offset {start} is not terminated")
    return data[start:end]


def parse_ldcache(data: bytes, path: str, *, prefixes: tuple[str, ...] = ()) -> tuple[
        LdcacheEntry, ...]:
    """All entries of a cache image, in file order.

    `prefixes` keeps only entries whose key starts with one of them (checked on the raw bytes
    before anything is decoded, so filtering a large host cache stays cheap). `path` is only
    used in error messages.
    """
    want = tuple(os.fsencode(p) for p in prefixes)
    if data.startswith(OLD_MAGIC):
        if len(data) < _OLD_HEADER.size:
            raise _unsupported(path, "truncated old-format header")
        (_, nold) = _OLD_HEADER.unpack_from(data, 0)
        old_end = _OLD_HEADER.size + nold * _OLD_ENTRY.size
        if old_end > len(data):
            raise _unsupported(path, f"{nold} old-format entries do not fit in the file")
        new_at = (old_end + 7) & ~7
        if data.startswith(NEW_MAGIC, new_at):
            return _parse_new(data, new_at, path, want)
        return _parse_old(data, nold, old_end, path, want)
    if data.startswith(NEW_MAGIC):
        return _parse_new(data, 0, path, want)
    raise _unsupported(path, "no ld.so-1.7.0 or glibc-ld.so.cache1.1 magic")


def _parse_new(data: bytes, base: int, path: str, want: tuple[bytes, ...]) -> tuple[
        LdcacheEntry, ...]:
    if len(data) - base < _NEW_HEADER.size:
        raise _unsupported(path, "truncated glibc-ld.so.cache header")
    _, version, nlibs, _, flags, _ = _NEW_HEADER.unpack_from(data, base)
    if version != NEW_VERSION:
        raise _unsupported(path, f"version {version!r}, expected 1.1")
    endian = flags & 3
    native = _ENDIAN_LITTLE if sys.byteorder == "little" else _ENDIAN_BIG
    if endian not in (0, native):
        raise _unsupported(path, "written for the other byte order")
    first = base + _NEW_HEADER.size
    if first + nlibs * _NEW_ENTRY.size > len(data):
        raise _unsupported(path, f"{nlibs} entries do not fit in the file")
    entries = []
    for i in range(nlibs):
        eflags, key, value, _, hwcap = _NEW_ENTRY.unpack_from(data, first + i * _NEW_ENTRY.size)
        if want and not data.startswith(want, base + key):
            continue
        entries.append(LdcacheEntry(
            os.fsdecode(_cstring(data, base + key, path)),
            os.fsdecode(_cstring(data, base + value, path)),
            eflags, hwcap))
    return tuple(entries)


def _parse_old(data: bytes, nlibs: int, strtab: int, path: str, want: tuple[bytes, ...]) -> tuple[
        LdcacheEntry, ...]:
    entries = []
    for i in range(nlibs):
        eflags, key, value = _OLD_ENTRY.unpack_from(data, _OLD_HEADER.size + i * _OLD_ENTRY.size)
        if want and not data.startswith(want, strtab + key):
            continue
        entries.append(LdcacheEntry(
            os.fsdecode(_cstring(data, strtab + key, path)),
            os.fsdecode(_cstring(data, strtab + value, path)),
            eflags))
    return tuple(entries)


def read_ldcache(path: str, *, prefixes: tuple[str, ...] = ()) -> tuple[LdcacheEntry, ...]:
    """Read and parse the cache file at `path` (a host path). OSError is left to the caller."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_CACHE_SIZE:
            raise _unsupported(path, f"{size} bytes is larger than any ld.so.cache")
        chunks = []
        left = size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    return parse_ldcache(data, path, prefixes=prefixes)
