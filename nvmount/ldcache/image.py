"""The container's ld.so.cache as data: read an image's cache whole, add the driver's
libraries, write a new cache glibc's loader and `ldconfig -p` read. Pure: bytes in, bytes out.

What `ldconfig` would add for the driver's library directories is known from the plan
(`MountPlan.ldcache_entries`: each library's name as ldconfig keys it, and its path), so the
hook can update the cache itself instead of running ldconfig (`nvmount.ldcache.write`):

- `parse_image` reads every entry of a new-format cache (alone, or after an old-format block)
  with its flags, osversion and hwcap, and the extension section (the generator string and
  the glibc-hwcaps subdirectory names); anything it cannot represent faithfully raises
  `UnsupportedCache` and the caller falls back to ldconfig;
- `merge` puts the new entries in front of the image's (ldconfig processes the directories
  given on its command line first) and drops image entries they replace (same name and
  path), then sorts as ldconfig does: by name with digit runs compared as numbers
  (`_dl_cache_libcmp`), descending, then flags, hwcap-extension entries first, hwcap and
  osversion descending; the sort is stable, so for equal keys the first added stays first
  (the one the loader finds);
- `serialize` writes the 1.1 format ldconfig writes since glibc 2.32 (header, entries, string
  table, the extension section 8-byte aligned).
"""

from __future__ import annotations

import struct
import sys

from nvmount.discover.ldcache import NEW_MAGIC, NEW_VERSION, OLD_MAGIC
from nvmount.records import record

_HEADER = struct.Struct("=17s3sIIB3xI12x")  # magic, version, nlibs, strings len, flags, ext
_ENTRY = struct.Struct("=iIIIQ")  # flags, key, value, osversion, hwcap
_OLD_HEADER = struct.Struct("=11sxI")
_OLD_ENTRY_SIZE = 12
_EXT = struct.Struct("=II")  # magic, count
_SECTION = struct.Struct("=IIII")  # tag, flags, offset, size
EXT_MAGIC = 0xEAA42174
TAG_GENERATOR, TAG_HWCAPS = 0, 1
HWCAP_EXTENSION = 1 << 62  # DL_CACHE_HWCAP_EXTENSION: hwcap holds a glibc-hwcaps index
FLAG_ELF_LIBC6 = 0x0003
# Budgets on the image's cache (hostile input: parse, merge and sort are Python loops): a
# distribution's cache has a few thousand entries of short names; beyond these the caller
# falls back to ldconfig, which rebuilds the cache from the directories instead (bounded by
# nvmount.ldcache.ldconf). 2^20 entries of 64 MiB took 31 s of hook time; within these the
# worst measured is ~0.6 s (256 KiB of names that alternate digits and letters).
MAX_ENTRIES = 1 << 14
MAX_KEY_BYTES = 255  # a file name (NAME_MAX)
MAX_VALUE_BYTES = 4096  # a path (PATH_MAX)
MAX_ALL_KEY_BYTES = 256 << 10  # the names together (the sort's work): real caches ~100 KiB


class UnsupportedCache(ValueError):
    """A cache this module does not rewrite (the caller runs ldconfig instead)."""


@record
class CacheEntry:
    key: bytes
    value: bytes
    flags: int
    osversion: int = 0
    hwcap: int = 0  # with HWCAP_EXTENSION: index into CacheImage.hwcaps


@record
class CacheImage:
    entries: tuple[CacheEntry, ...] = ()
    generator: bytes = b""
    hwcaps: tuple[bytes, ...] = ()  # glibc-hwcaps subdirectory names, by index


def _cstring(data: bytes, at: int, limit: int = MAX_VALUE_BYTES) -> bytes:
    end = data.find(b"\0", at, at + limit + 1)
    if at >= len(data) or end < 0:
        raise UnsupportedCache(f"string at offset {at} is outside the file or longer than "
                               f"{limit} bytes")
    return data[at:end]


def parse_image(data: bytes) -> CacheImage:
    """The whole cache (see the module docstring); UnsupportedCache when it is not one."""
    base = 0
    if data.startswith(OLD_MAGIC):
        if len(data) < _OLD_HEADER.size:
            raise UnsupportedCache("truncated old-format header")
        base = (_OLD_HEADER.size + _OLD_HEADER.unpack_from(data)[1] * _OLD_ENTRY_SIZE + 7) & ~7
    if not data.startswith(NEW_MAGIC, base) or len(data) < base + _HEADER.size:
        raise UnsupportedCache("not a glibc-ld.so.cache1.1 file")
    _, version, nlibs, _, flags, ext = _HEADER.unpack_from(data, base)
    native = 2 if sys.byteorder == "little" else 3
    if version != NEW_VERSION or flags & 3 not in (0, native) or nlibs > MAX_ENTRIES:
        raise UnsupportedCache("unknown version, byte order or size")
    first = base + _HEADER.size
    if first + nlibs * _ENTRY.size > len(data):
        raise UnsupportedCache(f"{nlibs} entries do not fit in the file")
    entries = []
    for i in range(nlibs):
        eflags, key, value, osv, hwcap = _ENTRY.unpack_from(data, first + i * _ENTRY.size)
        entries.append(CacheEntry(_cstring(data, base + key, MAX_KEY_BYTES),
                                  _cstring(data, base + value, MAX_VALUE_BYTES),
                                  eflags, osv, hwcap))
    if sum(len(e.key) for e in entries) > MAX_ALL_KEY_BYTES:
        raise UnsupportedCache(f"names of more than {MAX_ALL_KEY_BYTES} bytes in all")
    generator, hwcaps = _parse_extension(data, ext, base) if ext else (b"", ())
    for e in entries:
        if e.hwcap & HWCAP_EXTENSION and (e.hwcap & 0xFFFFFFFF) >= len(hwcaps):
            raise UnsupportedCache("an entry names a glibc-hwcaps subdirectory that is missing")
    return CacheImage(tuple(entries), generator, hwcaps)


def _parse_extension(data: bytes, ext: int, base: int) -> tuple[bytes, tuple[bytes, ...]]:
    if ext % 4 or ext + _EXT.size > len(data):
        raise UnsupportedCache("extension section outside the file")
    magic, count = _EXT.unpack_from(data, ext)
    if magic != EXT_MAGIC or count > 64:
        raise UnsupportedCache("unknown extension section")
    generator: bytes = b""
    hwcaps: tuple[bytes, ...] = ()
    for i in range(count):
        tag, _, offset, size = _SECTION.unpack_from(data, ext + _EXT.size + i * _SECTION.size)
        if offset + size > len(data):
            raise UnsupportedCache("extension data outside the file")
        if tag == TAG_GENERATOR:
            generator = data[offset:offset + size]
        elif tag == TAG_HWCAPS and size % 4 == 0:
            offsets = struct.unpack_from(f"={size // 4}I", data, offset)
            hwcaps = tuple(_cstring(data, base + o) for o in offsets)
        else:
            raise UnsupportedCache(f"unknown extension tag {tag}")
    return generator, hwcaps


# -- merging ----------------------------------------------------------------------------------
def _order_table() -> tuple[bytes, bytes, bytes]:
    """Translation tables for `libcmp_key`: each non-digit byte to a code in glibc's order
    (`char` is signed: bytes >= 0x80 below the end of a name, below ASCII), digits to a
    space (so `bytes.split` finds the runs); the codes skip ASCII whitespace."""
    avail = [v for v in range(256) if v not in b" \t\n\v\f\r"]
    order = [*range(0x80, 0x100), _END_MARK, *range(1, 0x30), *range(0x3A, 0x80), _DIGIT_MARK]
    code = {b: avail[i] for i, b in enumerate(order)}
    runs = bytes(32 if 48 <= b <= 57 else code.get(b, 0) for b in range(256))
    digits = bytes(b if 48 <= b <= 57 else 32 for b in range(256))
    return runs, digits, bytes((code[_END_MARK], code[_DIGIT_MARK]))


_END_MARK, _DIGIT_MARK = -1, -2  # stand-ins in `order`: the end of a name, a digit run next
_RUNS, _DIGITS, _MARKS = _order_table()
_END, _DIG = _MARKS[:1], _MARKS[1:]


def libcmp_key(name: bytes) -> tuple[object, ...]:
    """A sort key ordering names as glibc's `_dl_cache_libcmp` does: digit runs compared as
    numbers, a digit above any other byte, bytes compared as signed `char`, and the end of a
    name (its NUL) compared as a byte. The key alternates translated non-digit runs (each
    ending in a code for what follows: a digit run or the end) and numbers, after a flag
    saying which comes first, so keys of two names compare element by element like glibc
    compares the names; the work is per run, not per byte (the image's cache is sorted whole
    at every start)."""
    runs = name.translate(_RUNS).split()
    numbers = [int(d) if len(d) < 19 else 1 << 63 for d in name.translate(_DIGITS).split()]
    starts_digit = bool(name) and 48 <= name[0] <= 57
    out: list[object] = [starts_digit]
    ends_digit = bool(name) and 48 <= name[-1] <= 57
    for i in range(max(len(runs), len(numbers))):
        if starts_digit and i < len(numbers):
            out.append(numbers[i])
        if i < len(runs):
            last = i == len(runs) - 1 and not ends_digit
            out.append(runs[i] + (_END if last else _DIG))
        if not starts_digit and i < len(numbers):
            out.append(numbers[i])
    if ends_digit or not name:
        out.append(_END)
    return tuple(out)


def _order(entry: CacheEntry, ranks: dict[int, int]) -> tuple[object, ...]:
    # sorted descending by this key == ldconfig's order: name, flags, glibc-hwcaps entries
    # first (their subdirectory names ascending), then hwcap bit count, hwcap, osversion
    if entry.hwcap & HWCAP_EXTENSION:
        return (libcmp_key(entry.key), entry.flags, 1, -ranks[entry.hwcap & 0xFFFFFFFF], 0, 0,
                entry.osversion)
    return (libcmp_key(entry.key), entry.flags, 0, 0, bin(entry.hwcap).count("1"),
            entry.hwcap, entry.osversion)


def merge(image: CacheImage, new: tuple[CacheEntry, ...]) -> tuple[CacheEntry, ...]:
    """`new` in front of the image's entries (minus those they replace), in ldconfig order."""
    seen = {(e.key, e.value, e.flags) for e in new}
    kept = [e for e in image.entries if (e.key, e.value, e.flags) not in seen]
    combined = [*new, *kept]
    order = sorted(range(len(image.hwcaps)), key=image.hwcaps.__getitem__)
    ranks = {index: rank for rank, index in enumerate(order)}
    combined.sort(key=lambda e: _order(e, ranks), reverse=True)  # stable: first added first
    return tuple(combined)


# -- writing ----------------------------------------------------------------------------------
def serialize(entries: tuple[CacheEntry, ...], generator: bytes = b"",
              hwcaps: tuple[bytes, ...] = ()) -> bytes:
    """A glibc-ld.so.cache1.1 file for `entries` (already in order)."""
    strings = bytearray()
    offsets: dict[bytes, int] = {}
    first = _HEADER.size + len(entries) * _ENTRY.size

    def place(text: bytes) -> int:
        if text not in offsets:
            offsets[text] = first + len(strings)
            strings.extend(text + b"\0")
        return offsets[text]

    body = b"".join(_ENTRY.pack(e.flags, place(e.key), place(e.value), e.osversion, e.hwcap)
                    for e in entries)
    hwcap_offsets = [place(h) for h in hwcaps]
    ext_at = (first + len(strings) + 7) & ~7
    sections = []
    data_at = ext_at + _EXT.size + _SECTION.size * (bool(generator) + bool(hwcaps))
    payload = bytearray()
    if generator:
        sections.append(_SECTION.pack(TAG_GENERATOR, 0, data_at, len(generator)))
        payload += generator
    if hwcaps:
        payload += b"\0" * (-(data_at + len(payload)) % 4)
        sections.append(_SECTION.pack(TAG_HWCAPS, 0, data_at + len(payload), 4 * len(hwcaps)))
        payload += struct.pack(f"={len(hwcaps)}I", *hwcap_offsets)
    native = 2 if sys.byteorder == "little" else 3
    header = _HEADER.pack(NEW_MAGIC, NEW_VERSION, len(entries), len(strings), native,
                          ext_at if sections else 0)
    out = header + body + bytes(strings)
    if sections:
        out += b"\0" * (ext_at - len(out)) + _EXT.pack(EXT_MAGIC, len(sections))
        out += b"".join(sections) + bytes(payload)
    return out


def entries_for(ldcache_entries: tuple[tuple[str, str, bool], ...],
                arches: tuple[int, int | None]) -> tuple[CacheEntry, ...]:
    """Cache entries of the plan's (key, container path, 32-bit) triples for this machine's
    64-bit and 32-bit ABI flags (`nvmount.discover.ldcache.MACHINE_ARCHES`)."""
    out = []
    for key, path, is32 in ldcache_entries:
        arch = arches[1] if is32 else arches[0]
        if arch is not None:
            out.append(CacheEntry(key.encode(), path.encode(), FLAG_ELF_LIBC6 | arch))
    return tuple(out)
