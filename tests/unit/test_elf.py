"""The minimal ELF reader: SONAME, NEEDED, ABI tag, class; real system files and hostile input."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvmount.discover.elf import ELFCLASS32, ELFCLASS64, ElfFormatError, parse_elf, read_elf
from tests.fixtures.elfgen import EM_386, EM_X86_64, abi_note, make_elf


def _reader(data: bytes):  # type: ignore[no-untyped-def]
    return lambda off, size: data[off:off + size] if off >= 0 else b""


CASES = {
    "tls-64": (make_elf("libnvidia-tls.so.550.54.15", ("libc.so.6",), note=abi_note(2, 3, 99)),
               ELFCLASS64, EM_X86_64, "libnvidia-tls.so.550.54.15", ("libc.so.6",), (0, 2, 3, 99)),
    "glx-compat-32": (make_elf("libGL.so.1", ("libnvidia-glcore.so.550.54.15", "libdl.so.2"),
                               bits=32),
                      ELFCLASS32, EM_386, "libGL.so.1",
                      ("libnvidia-glcore.so.550.54.15", "libdl.so.2"), None),
    "no-soname": (make_elf(None, ("libm.so.6",)), ELFCLASS64, EM_X86_64, "", ("libm.so.6",),
                  None),
    "bare": (make_elf(None), ELFCLASS64, EM_X86_64, "", (), None),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_parse_generated(case: tuple) -> None:  # type: ignore[type-arg]
    data, cls, machine, soname, needed, abi = case
    info = parse_elf(_reader(data), notes=True)
    assert (info.elf_class, info.machine, info.soname, info.needed, info.abi_tag) == (
        cls, machine, soname, needed, abi)


def test_header_only_skips_dynamic() -> None:
    info = parse_elf(_reader(CASES["tls-64"][0]), dynamic=False)
    assert info.soname == "" and info.needed == () and info.abi_tag is None


@pytest.mark.parametrize("path,soname,cls", [
    ("/lib/x86_64-linux-gnu/libc.so.6", "libc.so.6", ELFCLASS64),
    ("/usr/lib32/libc.so.6", "libc.so.6", ELFCLASS32),
], ids=["libc64", "libc32"])
def test_real_system_libraries(path: str, soname: str, cls: int) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} not installed")
    info = read_elf(path, notes=True)
    assert info.soname == soname and info.elf_class == cls
    assert info.abi_tag is not None and info.abi_tag[0] == 0  # GNU/Linux
    assert any(n.startswith("ld-linux") for n in info.needed)


def test_read_elf_from_a_file(tmp_path: Path) -> None:
    p = tmp_path / "libx.so.1"
    p.write_bytes(CASES["tls-64"][0])
    assert read_elf(str(p), notes=True).abi_tag == (0, 2, 3, 99)


def _patch(data: bytes, at: int, fmt: str, *values: int) -> bytes:
    raw = struct.pack(fmt, *values)
    return data[:at] + raw + data[at + len(raw):]


GOOD = CASES["glx-compat-32"][0]
GOOD64 = CASES["tls-64"][0]
DYN64 = struct.unpack_from("<Q", GOOD64, 64 + 56 + 8)[0]  # p_offset of PT_DYNAMIC
HOSTILE = {
    "empty": b"",
    "text": b"#!/bin/sh\necho not a library\n" * 3,
    "magic-only": b"\x7fELF",
    "bad-class": _patch(GOOD64, 4, "<B", 7),
    "bad-encoding": _patch(GOOD64, 5, "<B", 9),
    "truncated-header": GOOD64[:40],
    "too-many-phdrs": _patch(GOOD64, 56, "<H", 60000),
    "wrong-phentsize": _patch(GOOD64, 54, "<H", 12),
    "phoff-past-end": _patch(GOOD64, 32, "<Q", 1 << 40),
    "phoff-negative-64": _patch(GOOD64, 32, "<Q", (1 << 64) - 8),
    "truncated-dynamic": GOOD64[:-8],
    "strtab-unmapped": _patch(GOOD64, DYN64, "<qQ", 5, 1 << 33),
    "32-truncated-phdrs": GOOD[:60],
}


@pytest.mark.parametrize("data", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_input_raises_format_error(data: bytes) -> None:
    with pytest.raises(ElfFormatError):
        parse_elf(_reader(data), notes=True)


def test_hostile_input_through_pread(tmp_path: Path) -> None:
    p = tmp_path / "bad.so"
    p.write_bytes(HOSTILE["phoff-negative-64"])
    with pytest.raises(ElfFormatError):
        read_elf(str(p))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([GOOD, GOOD64]),
       st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6))
def test_random_corruption_never_crashes(data: bytes, flips: list[tuple[int, int]]) -> None:
    buf = bytearray(data)
    for at, byte in flips:
        if at < len(buf):
            buf[at] = byte
    try:
        info = parse_elf(_reader(bytes(buf)), notes=True)
    except ElfFormatError as err:
        assert str(err), "an ELF error without a message"
        return
    assert info.elf_class in (1, 2)  # ELFCLASS32, ELFCLASS64
