"""A minimal ELF reader for the library selector (libnvc-spec §1.3 step 6). Pure parsing.

Reads only what the selector needs, through the program headers (what the dynamic loader
uses): the ELF class and machine, DT_SONAME and DT_NEEDED from PT_DYNAMIC, and the GNU
ABI tag from the PT_NOTE segments (`.note.ABI-tag`). It reads a few small ranges with
`pread`, never the whole file, and every offset and count is bounded: a truncated or hostile
file gives `ElfFormatError`, never an out-of-range read or a huge allocation.
"""

from __future__ import annotations

import os
import struct

from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable

    Reader = Callable[[int, int], bytes]  # (offset, size) -> at most size bytes

ELF_MAGIC = b"\x7fELF"
ELFCLASS32, ELFCLASS64 = 1, 2
PT_LOAD, PT_DYNAMIC, PT_NOTE = 1, 2, 4
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14
NT_GNU_ABI_TAG = 1
ELF_NOTE_OS_LINUX = 0

MAX_PHDRS = 256
MAX_DYNAMIC = 64 << 10  # bytes of PT_DYNAMIC we are willing to read
MAX_NOTES = 64 << 10
MAX_NAME = 4096
_MAX_OFFSET = 1 << 62
_HEAD = 16 << 10  # first read: ELF and program headers, usually .dynamic and .dynstr


class ElfFormatError(ValueError):
    """The file is not an ELF object we can read (message names the reason)."""


@record
class ElfInfo:
    """What discovery needs from an ELF file's headers."""

    elf_class: int  # ELFCLASS32 or ELFCLASS64
    machine: int  # e_machine (62 x86-64, 3 i386, 183 aarch64, 40 arm, 21 ppc64)
    soname: str = ""
    needed: tuple[str, ...] = ()
    abi_tag: tuple[int, int, int, int] | None = None  # (os, major, minor, patch)


@record
class _Layout:
    """Byte order, class and header structs of one ELF file."""

    fmt: str  # "<" or ">"
    elf_class: int
    phdr: struct.Struct
    dyn: struct.Struct

    def phdr_fields(self, raw: bytes) -> tuple[int, int, int, int]:
        """(p_type, p_offset, p_vaddr, p_filesz) of one program header."""
        v = self.phdr.unpack(raw)
        if self.elf_class == ELFCLASS64:  # type flags offset vaddr paddr filesz memsz align
            return v[0], v[2], v[3], v[5]
        return v[0], v[1], v[2], v[4]  # type offset vaddr paddr filesz memsz flags align


def _layout(ident: bytes) -> _Layout:
    if ident[:4] != ELF_MAGIC:
        raise ElfFormatError("not an ELF file")
    elf_class, data = ident[4], ident[5]
    if data not in (1, 2):
        raise ElfFormatError(f"unknown ELF data encoding {data}")
    fmt = "<" if data == 1 else ">"
    if elf_class == ELFCLASS64:
        return _Layout(fmt, elf_class, struct.Struct(fmt + "IIQQQQQQ"), struct.Struct(fmt + "qQ"))
    if elf_class == ELFCLASS32:
        return _Layout(fmt, elf_class, struct.Struct(fmt + "IIIIIIII"), struct.Struct(fmt + "iI"))
    raise ElfFormatError(f"unknown ELF class {elf_class}")


def _read_exact(read: Reader, offset: int, size: int, what: str) -> bytes:
    data = read(offset, size)
    if len(data) != size:
        raise ElfFormatError(f"truncated {what} at offset {offset}")
    return data


def parse_elf(read: Reader, *, dynamic: bool = True, notes: bool = False) -> ElfInfo:
    """Parse through `read(offset, size)`; `dynamic`/`notes` choose what to decode."""
    ident = read(0, 64)
    if len(ident) < 16:
        raise ElfFormatError("not an ELF file" if ident[:4] != ELF_MAGIC else "truncated header")
    lay = _layout(ident)
    if len(ident) < (64 if lay.elf_class == ELFCLASS64 else 52):
        raise ElfFormatError("truncated header")
    if lay.elf_class == ELFCLASS64:
        machine, phoff, phentsize, phnum = _unpack(lay.fmt + "18xH12xQ14xHH", ident)
    else:
        machine, phoff, phentsize, phnum = _unpack(lay.fmt + "18xH8xI10xHH", ident)
    if phnum > MAX_PHDRS or (phnum and phentsize != lay.phdr.size):
        raise ElfFormatError(f"implausible program headers ({phnum} x {phentsize} bytes)")
    table = _read_exact(read, phoff, phnum * phentsize, "program headers")
    phdrs = [lay.phdr_fields(table[i * phentsize:(i + 1) * phentsize]) for i in range(phnum)]
    soname: str = ""
    needed: tuple[str, ...] = ()
    if dynamic:
        soname, needed = _dynamic(read, lay, phdrs)
    abi = _abi_tag(read, lay, phdrs) if notes else None
    return ElfInfo(lay.elf_class, machine, soname, needed, abi)


def _unpack(fmt: str, data: bytes) -> tuple[int, ...]:
    return struct.unpack_from(fmt, data, 0)


def _dynamic(read: Reader, lay: _Layout, phdrs: list[tuple[int, int, int, int]]) -> tuple[
        str, tuple[str, ...]]:
    dyn = next((p for p in phdrs if p[0] == PT_DYNAMIC), None)
    if dyn is None:
        return "", ()
    size = min(dyn[3], MAX_DYNAMIC)
    raw = _read_exact(read, dyn[1], size - size % lay.dyn.size, "dynamic section")
    strtab = soname_off = -1
    needed_offs: list[int] = []
    for tag, val in lay.dyn.iter_unpack(raw):
        if tag == DT_NULL:
            break
        if tag == DT_STRTAB:
            strtab = val
        elif tag == DT_SONAME:
            soname_off = val
        elif tag == DT_NEEDED:
            needed_offs.append(val)
    if strtab < 0:
        return "", ()
    base = _vaddr_to_offset(strtab, phdrs)
    soname = _string(read, base + soname_off) if soname_off >= 0 else ""
    return soname, tuple(_string(read, base + off) for off in needed_offs)


def _vaddr_to_offset(vaddr: int, phdrs: list[tuple[int, int, int, int]]) -> int:
    for ptype, offset, start, filesz in phdrs:
        if ptype == PT_LOAD and start <= vaddr < start + filesz:
            return offset + (vaddr - start)
    raise ElfFormatError(f"dynamic string table address {vaddr:#x} is not in a loaded segment")


def _string(read: Reader, offset: int) -> str:
    raw = read(offset, MAX_NAME)
    end = raw.find(b"\0")
    if end < 0:
        raise ElfFormatError(f"unterminated dynamic string at offset {offset}")
    return os.fsdecode(raw[:end])


def _abi_tag(read: Reader, lay: _Layout, phdrs: list[tuple[int, int, int, int]]) -> tuple[
        int, int, int, int] | None:
    budget = MAX_NOTES
    for ptype, offset, _, filesz in phdrs:
        if ptype != PT_NOTE or filesz <= 0:
            continue
        size = min(filesz, budget)
        budget -= size
        tag = _find_abi_note(_read_exact(read, offset, size, "note segment"), lay.fmt)
        if tag is not None:
            return tag
        if budget <= 0:
            break
    return None


def _find_abi_note(raw: bytes, fmt: str) -> tuple[int, int, int, int] | None:
    pos = 0
    while pos + 12 <= len(raw):
        namesz, descsz, ntype = struct.unpack_from(fmt + "III", raw, pos)
        name_at = pos + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        nxt = desc_at + ((descsz + 3) & ~3)
        if nxt > len(raw):
            return None
        if ntype == NT_GNU_ABI_TAG and raw[name_at:name_at + namesz] == b"GNU\0" and descsz >= 16:
            values = struct.unpack_from(fmt + "IIII", raw, desc_at)
            return values[0], values[1], values[2], values[3]
        pos = nxt
    return None


def read_elf(path: str, *, dynamic: bool = True, notes: bool = False) -> ElfInfo:
    """Parse the ELF file at `path` (a host path). OSError is left to the caller."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        head = os.pread(fd, _HEAD, 0)  # headers, and often .dynamic and .dynstr too
        whole = len(head) < _HEAD  # a short read: that is the whole file

        def read(off: int, size: int) -> bytes:
            if not 0 <= off < _MAX_OFFSET:
                return b""
            if whole or off + size <= len(head):
                return head[off:off + size]
            return os.pread(fd, size, off)

        return parse_elf(read, dynamic=dynamic, notes=notes)
    finally:
        os.close(fd)
