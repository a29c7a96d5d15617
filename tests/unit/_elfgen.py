"""A tiny writer of minimal ELF shared objects for tests (no compiler needed).

The output is what the dynamic loader and `ldconfig` look at: an ELF header, program headers
(one PT_LOAD mapping the whole file at vaddr 0, PT_DYNAMIC, optionally PT_NOTE), a dynamic
section with DT_STRTAB/DT_STRSZ/DT_SONAME/DT_NEEDED and a string table. 32- and 64-bit.
"""

from __future__ import annotations

import struct

EM_386, EM_X86_64 = 3, 62
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14


def abi_note(major: int, minor: int, patch: int, os_id: int = 0) -> bytes:
    """A GNU ABI-tag note (.note.ABI-tag), as glibc's crt files carry it."""
    return struct.pack("<III4sIIII", 4, 16, 1, b"GNU\0", os_id, major, minor, patch)


def make_elf(
    soname: str | None = "libtest.so.1",
    needed: tuple[str, ...] = (),
    *,
    bits: int = 64,
    machine: int | None = None,
    note: bytes = b"",
) -> bytes:
    """Bytes of a minimal ET_DYN object (little endian)."""
    is64 = bits == 64
    machine = machine if machine is not None else (EM_X86_64 if is64 else EM_386)
    ehsize, phentsize = (64, 56) if is64 else (52, 32)
    nph = 3 if note else 2
    strtab = bytearray(b"\0")
    offsets = {}
    for name in ([soname] if soname else []) + list(needed):
        offsets[name] = len(strtab)
        strtab += name.encode() + b"\0"
    strtab_at = ehsize + nph * phentsize
    note_at = strtab_at + len(strtab)
    note_at += -note_at % 8
    dyn_at = note_at + len(note)
    dyn_at += -dyn_at % 8
    entries = [(DT_STRTAB, strtab_at), (DT_STRSZ, len(strtab))]
    if soname:
        entries.append((DT_SONAME, offsets[soname]))
    entries += [(DT_NEEDED, offsets[n]) for n in needed]
    entries.append((DT_NULL, 0))
    dynfmt = "<qQ" if is64 else "<iI"
    dynamic = b"".join(struct.pack(dynfmt, t, v) for t, v in entries)
    total = dyn_at + len(dynamic)

    def phdr(ptype: int, off: int, size: int, flags: int = 4, align: int = 8) -> bytes:
        if is64:
            return struct.pack("<IIQQQQQQ", ptype, flags, off, off, off, size, size, align)
        return struct.pack("<IIIIIIII", ptype, off, off, off, size, size, flags, align)

    phdrs = phdr(1, 0, total, 5, 0x1000) + phdr(2, dyn_at, len(dynamic), 6)
    if note:
        phdrs += phdr(4, note_at, len(note), 4, 4)
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1, 1, 0]) + bytes(8)
    if is64:
        ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, ehsize, 0, 0, ehsize,
                                   phentsize, nph, 64, 0, 0)
    else:
        ehdr = ident + struct.pack("<HHIIIIIHHHHHH", 3, machine, 1, 0, ehsize, 0, 0, ehsize,
                                   phentsize, nph, 40, 0, 0)
    out = bytearray(total)
    out[0:ehsize] = ehdr
    out[ehsize:ehsize + len(phdrs)] = phdrs
    out[strtab_at:strtab_at + len(strtab)] = strtab
    out[note_at:note_at + len(note)] = note
    out[dyn_at:dyn_at + len(dynamic)] = dynamic
    return bytes(out)
