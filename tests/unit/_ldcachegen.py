"""A writer of ld.so.cache images for tests: the new format, the old one, and both (compat)."""

from __future__ import annotations

import struct

from nvmount.discover.ldcache import LdcacheEntry


def _strtab(entries: tuple[LdcacheEntry, ...], base: int) -> tuple[bytes, list[tuple[int, int]]]:
    table = bytearray()
    offs = []
    for e in entries:
        k = base + len(table)
        table += e.key.encode() + b"\0"
        v = base + len(table)
        table += e.value.encode() + b"\0"
        offs.append((k, v))
    return bytes(table), offs


def write_new(entries: tuple[LdcacheEntry, ...], *, version: bytes = b"1.1",
              endian: int = 2) -> bytes:
    head = 48 + 24 * len(entries)
    table, offs = _strtab(entries, head)
    out = struct.pack("=17s3sIIB3xI12x", b"glibc-ld.so.cache", version, len(entries),
                      len(table), endian, 0)
    for e, (k, v) in zip(entries, offs, strict=True):
        out += struct.pack("=iIIIQ", e.flags, k, v, 0, e.hwcap)
    return out + table


def write_old(entries: tuple[LdcacheEntry, ...]) -> bytes:
    table, offs = _strtab(entries, 0)
    out = struct.pack("=11sxI", b"ld.so-1.7.0", len(entries))
    for e, (k, v) in zip(entries, offs, strict=True):
        out += struct.pack("=iII", e.flags, k, v)
    return out + table


def write_compat(entries: tuple[LdcacheEntry, ...]) -> bytes:
    old = struct.pack("=11sxI", b"ld.so-1.7.0", len(entries))
    old += b"".join(struct.pack("=iII", e.flags, 0, 0) for e in entries)
    old += b"\0" * (-len(old) % 8)
    return old + write_new(entries)


