"""ld.so.cache parsing: synthetic caches of every layout, caches written by the system's
ldconfig, and truncated or hostile input (which must raise DriverError, never crash)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvmount.discover.ldcache import (
    ARCH_I386,
    ARCH_X86_64,
    LdcacheEntry,
    parse_ldcache,
    read_ldcache,
)
from nvmount.errors import DriverError
from tests.fixtures.elfgen import make_elf
from tests.fixtures.ldcachegen import write_compat, write_new, write_old

X64 = 0x0303  # libc6 | x86-64
I386 = 0x0003

ENTRIES = (
    LdcacheEntry("libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", X64),
    LdcacheEntry("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", X64, 0x10),
    LdcacheEntry("libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", I386),
    LdcacheEntry("libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so", X64),
)


@pytest.mark.parametrize("writer", [write_new, write_old, write_compat],
                         ids=["new", "old", "compat"])
def test_synthetic_layouts_round_trip(writer: object) -> None:
    data = writer(ENTRIES)  # type: ignore[operator]
    parsed = parse_ldcache(data, "cache")
    if writer is write_old:  # the old format has no hwcap field
        assert parsed == tuple(LdcacheEntry(e.key, e.value, e.flags) for e in ENTRIES)
    else:
        assert parsed == ENTRIES


def test_compat_with_odd_entry_count_aligns_new_header() -> None:
    entries = ENTRIES[:3]  # 16 + 3*12 = 52 -> new header at 56
    assert parse_ldcache(write_compat(entries), "c") == entries


@pytest.mark.parametrize("prefixes,keys", [
    (("libcuda.so",), ["libcuda.so.1", "libcuda.so.1", "libcuda.so"]),
    (("libnvidia-ml.so", "libcuda.so.1"), ["libnvidia-ml.so.1", "libcuda.so.1", "libcuda.so.1"]),
    (("libGL",), []),
], ids=["one-prefix", "two-prefixes", "no-match"])
def test_prefix_filter(prefixes: tuple[str, ...], keys: list[str]) -> None:
    for data in (write_new(ENTRIES), write_old(ENTRIES)):
        assert [e.key for e in parse_ldcache(data, "c", prefixes=prefixes)] == keys


def test_arch_helpers() -> None:
    e64, e32 = ENTRIES[1], ENTRIES[2]
    assert e64.is_elf_for(ARCH_X86_64) and not e64.is_elf_for(ARCH_I386)
    assert e32.is_elf_for(ARCH_I386) and not e32.is_elf_for(ARCH_X86_64)
    assert not LdcacheEntry("a", "b", 0x0300).is_elf_for(ARCH_X86_64)  # libc4: not ELF


# -- hostile and broken input ------------------------------------------------------------------
def _with_header(data: bytes, **fields: int) -> bytes:
    magic, version, nlibs, strsz, flags, ext = struct.unpack_from("=17s3sIIB3xI12x", data)
    vals = {"nlibs": nlibs, "strsz": strsz, "flags": flags}
    vals.update(fields)
    head = struct.pack("=17s3sIIB3xI12x", magic, version, vals["nlibs"], vals["strsz"],
                       vals["flags"], ext)
    return head + data[48:]


def _entry_at(data: bytes, index: int, key: int, value: int) -> bytes:
    at = 48 + 24 * index
    flags, _, _, osv, hw = struct.unpack_from("=iIIIQ", data, at)
    return data[:at] + struct.pack("=iIIIQ", flags, key, value, osv, hw) + data[at + 24:]


HOSTILE = {
    "empty": b"",
    "not-a-cache": b"\x7fELF" + bytes(100),
    "magic-only": b"glibc-ld.so.cache",
    "old-magic-only": b"ld.so-1.7.0",
    "wrong-version": write_new(ENTRIES, version=b"1.0"),
    "other-endian": write_new(ENTRIES, endian=3),
    "invalid-endian": write_new(ENTRIES, endian=1),
    "huge-nlibs": _with_header(write_new(ENTRIES), nlibs=0xFFFFFFFF),
    "nlibs-one-too-many": _with_header(write_new(ENTRIES), nlibs=len(ENTRIES) + 40),
    "key-past-end": _entry_at(write_new(ENTRIES), 0, 0xFFFFFFF0, 48),
    "value-past-end": _entry_at(write_new(ENTRIES), 1, 200, 0x7FFFFFFF),
    "unterminated": write_new(ENTRIES)[:-1],
    "old-huge-nlibs": struct.pack("=11sxI", b"ld.so-1.7.0", 0x40000000) + bytes(64),
    "old-key-past-end": struct.pack("=11sxIiII", b"ld.so-1.7.0", 1, X64, 1000, 0) + b"a\0",
}


@pytest.mark.parametrize("data", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_cache_is_unsupported(data: bytes) -> None:
    with pytest.raises(DriverError, match=r"parse ld.so.cache /x/cache: unsupported file format"):
        parse_ldcache(data, "/x/cache")


@pytest.mark.parametrize("writer", [write_new, write_old, write_compat],
                         ids=["new", "old", "compat"])
def test_every_truncation_is_an_error_or_a_prefix(writer: object) -> None:
    data = writer(ENTRIES)  # type: ignore[operator]
    full = parse_ldcache(data, "c")
    outcomes = {"error": 0, "prefix": 0}
    for cut in range(len(data)):
        try:
            got = parse_ldcache(data[:cut], "c")
        except DriverError as err:
            assert str(err).startswith("parse ld.so.cache c: "), err
            outcomes["error"] += 1
            continue
        assert got == full[: len(got)], (cut, got)  # never an invented or altered entry
        outcomes["prefix"] += 1
    assert outcomes["error"] > 0


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([write_new(ENTRIES), write_old(ENTRIES), write_compat(ENTRIES)]),
       st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=8))
def test_random_corruption_never_crashes(data: bytes, flips: list[tuple[int, int]]) -> None:
    buf = bytearray(data)
    for at, byte in flips:
        if at < len(buf):
            buf[at] = byte
    try:
        entries = parse_ldcache(bytes(buf), "c")
    except DriverError:
        return
    assert all(isinstance(e.key, str) and isinstance(e.value, str) for e in entries)


def test_read_ldcache_refuses_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(write_new(ENTRIES))
    (tmp_path / "link").symlink_to("real")
    assert read_ldcache(str(tmp_path / "real")) == ENTRIES
    with pytest.raises(OSError):
        read_ldcache(str(tmp_path / "link"))


# -- caches written by the system's ldconfig --------------------------------------------------
LDCONFIG = shutil.which("ldconfig") or "/sbin/ldconfig"
_LINE = re.compile(r"^\t(\S+) \(([^)]*)\) => (.+)$")


def _ldconfig_p(cache: Path) -> list[tuple[str, str, bool]]:
    out = subprocess.run([LDCONFIG, "-p", "-C", str(cache)], check=True, capture_output=True,
                         text=True).stdout
    rows = []
    for line in out.splitlines():
        m = _LINE.match(line)
        if m:
            rows.append((m.group(1), m.group(3), "x86-64" in m.group(2)))
    return rows


@pytest.fixture
def lib_tree(tmp_path: Path) -> Path:
    for sub, bits in (("lib64", 64), ("lib32", 32)):
        d = tmp_path / sub
        d.mkdir()
        for name in ("libnvidia-ml", "libcuda", "libnvidia-tls"):
            real = d / f"{name}.so.550.54.15"
            real.write_bytes(make_elf(f"{name}.so.1", ("libc.so.6",), bits=bits))
            (d / f"{name}.so.1").symlink_to(real.name)
    (tmp_path / "ld.so.conf").write_text(f"{tmp_path / 'lib64'}\n{tmp_path / 'lib32'}\n")
    return tmp_path


@pytest.mark.skipif(not os.path.exists(LDCONFIG), reason="no ldconfig")
@pytest.mark.parametrize("fmt", ["new", "old", "compat"])
def test_system_ldconfig_cache_matches_ldconfig_p(lib_tree: Path, fmt: str) -> None:
    cache = lib_tree / f"ld.so.cache.{fmt}"
    subprocess.run([LDCONFIG, "-X", "-c", fmt, "-C", str(cache), "-f",
                    str(lib_tree / "ld.so.conf")], check=True, capture_output=True)
    entries = read_ldcache(str(cache))
    got = [(e.key, e.value, e.arch == ARCH_X86_64) for e in entries]
    assert got == _ldconfig_p(cache)  # every entry (system libs too), in file order
    ours = [(e.key, e.value, e.arch) for e in entries if e.value.startswith(str(lib_tree))]
    assert sorted(ours) == sorted(
        (f"{n}.so.1", str(lib_tree / d / f"{n}.so.1"), arch)
        for n in ("libnvidia-ml", "libcuda", "libnvidia-tls")
        for d, arch in (("lib64", ARCH_X86_64), ("lib32", ARCH_I386)))
    assert all(e.flags & 1 for e in entries)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="ldconfig -r chroots")
def test_system_ldconfig_in_a_root(tmp_path: Path) -> None:
    libdir = tmp_path / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    (libdir / "libcuda.so.550.54.15").write_bytes(make_elf("libcuda.so.1"))
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.conf").write_text("/usr/lib/x86_64-linux-gnu\n")
    subprocess.run([LDCONFIG, "-r", str(tmp_path)], check=True, capture_output=True)
    entries = read_ldcache(str(tmp_path / "etc/ld.so.cache"), prefixes=("libcuda",))
    assert entries == (LdcacheEntry("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                    X64),)
    assert (libdir / "libcuda.so.1").is_symlink()
