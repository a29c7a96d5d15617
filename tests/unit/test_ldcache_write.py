"""The ld.so.cache written by the hook (nvmount.ldcache.image and .write), against glibc's own
ldconfig: its order, `ldconfig -p` output, and the undo; hostile entries at /etc/ld.so.cache."""

from __future__ import annotations

import os
import random
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvmount._libc import Libc
from nvmount.apply.journal import Journal
from nvmount.capabilities import DriverCapability as C
from nvmount.fs.procfs import ProcFs
from nvmount.fs.rootfs import Root
from nvmount.ldcache import image
from nvmount.ldcache.write import Fallback, update_ldcache
from nvmount.plan.types import MountPlan

LIB = "/usr/lib/x86_64-linux-gnu"
LIB32 = "/usr/lib/i386-linux-gnu"
LDCONFIG = "/sbin/ldconfig"
DRIVER = (("libcuda.so.1", f"{LIB}/libcuda.so.1", False),
          ("libcuda.so", f"{LIB}/libcuda.so", False),
          ("libnvidia-ml.so.1", f"{LIB}/libnvidia-ml.so.1", False),
          ("libcuda.so.1", f"{LIB32}/libcuda.so.1", True))


def ldconfig_p(cache: Path) -> list[str]:
    out = subprocess.run([LDCONFIG, "-p", "-C", str(cache)], capture_output=True, text=True,
                         check=True).stdout
    return out.splitlines()


# -- image: glibc's format and order ------------------------------------------------------
def test_host_cache_round_trips_and_reads_the_same_with_ldconfig(tmp_path: Path) -> None:
    data = Path("/etc/ld.so.cache").read_bytes()
    parsed = image.parse_image(data)
    assert parsed.entries and parsed.generator.startswith(b"ldconfig")
    out = tmp_path / "cache"
    out.write_bytes(image.serialize(parsed.entries, parsed.generator, parsed.hwcaps))
    assert image.parse_image(out.read_bytes()) == parsed
    assert ldconfig_p(out)[1:] == ldconfig_p(Path("/etc/ld.so.cache"))[1:]


def test_merge_sorts_as_ldconfig_does() -> None:
    """Shuffled, the host's entries come back in ldconfig's order (entries with the same
    name and flags keep their relative order, which here is the shuffled one)."""
    parsed = image.parse_image(Path("/etc/ld.so.cache").read_bytes())
    shuffled = list(parsed.entries)
    random.Random(7).shuffle(shuffled)
    again = image.merge(image.CacheImage(tuple(shuffled), parsed.generator), ())
    key = [(e.key, e.flags) for e in again]
    assert key == [(e.key, e.flags) for e in parsed.entries]


@pytest.mark.parametrize("a, b, sign", [
    (b"libc.so.6", b"libc.so.10", -1), (b"libfoo.so", b"libfoo.so.1", -1),
    (b"liba1", b"libab", 1), (b"lib9", b"lib10", -1), (b"libx.so.2", b"libx.so.2", 0),
], ids=["numeric", "prefix", "digit-over-letter", "9<10", "equal"])
def test_libcmp_key(a: bytes, b: bytes, sign: int) -> None:
    ka, kb = image.libcmp_key(a), image.libcmp_key(b)
    assert (ka > kb) - (ka < kb) == sign


def glibc_libcmp(p1: bytes, p2: bytes) -> int:
    """glibc's `_dl_cache_libcmp`, transcribed: `char` is signed, the NUL compares as 0."""
    def at(s: bytes, i: int) -> int:
        c = s[i] if i < len(s) else 0
        return c - 256 if c >= 128 else c

    def digit(c: int) -> bool:
        return 48 <= c <= 57

    i = j = 0
    while at(p1, i) != 0:
        if digit(at(p1, i)):
            if not digit(at(p2, j)):
                return 1
            v1 = v2 = 0
            while digit(at(p1, i)):
                v1, i = v1 * 10 + at(p1, i) - 48, i + 1
            while digit(at(p2, j)):
                v2, j = v2 * 10 + at(p2, j) - 48, j + 1
            if v1 != v2:
                return v1 - v2
        elif digit(at(p2, j)):
            return -1
        elif at(p1, i) != at(p2, j):
            return at(p1, i) - at(p2, j)
        else:
            i, j = i + 1, j + 1
    return at(p1, i) - at(p2, j)


_NAMES = st.binary(max_size=12).map(lambda b: b.replace(b"\0", b"")) | st.text(
    alphabet="ab.-_019\xff ", max_size=12).map(lambda t: t.encode("latin-1"))


@settings(max_examples=3000, deadline=None)
@given(_NAMES, _NAMES)
def test_libcmp_key_orders_as_glibc(a: bytes, b: bytes) -> None:
    ka, kb = image.libcmp_key(a), image.libcmp_key(b)
    want = glibc_libcmp(a, b)
    assert (ka > kb) - (ka < kb) == (want > 0) - (want < 0), (a, b)


def test_hwcaps_extension_round_trips() -> None:
    entries = (image.CacheEntry(b"libz.so.1", b"/usr/lib/glibc-hwcaps/x86-64-v3/libz.so.1",
                                0x303, 0, image.HWCAP_EXTENSION | 0),
               image.CacheEntry(b"libz.so.1", b"/usr/lib/libz.so.1", 0x303))
    data = image.serialize(entries, b"gen", (b"x86-64-v3",))
    assert image.parse_image(data) == image.CacheImage(entries, b"gen", (b"x86-64-v3",))


@pytest.mark.parametrize("data", [b"", b"garbage" * 10, b"glibc-ld.so.cache1.0" + b"\0" * 40],
                         ids=["empty", "garbage", "old-version"])
def test_unusual_caches_are_not_rewritten(data: bytes) -> None:
    with pytest.raises(image.UnsupportedCache):
        image.parse_image(data)


# -- write: into a rootfs, undone ---------------------------------------------------------
def plan(dirs: tuple[str, ...] = (LIB, LIB32)) -> MountPlan:
    return MountPlan((), (), dirs, LIB, LIB32, "/usr/bin", C.COMPUTE, (), (),
                     ldcache_entries=DRIVER)


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "proc").mkdir()
    return root


def write(rootfs: Path, the_plan: MountPlan | None = None) -> tuple[str, Journal]:
    libc = Libc()
    journal = Journal("test")
    with ProcFs.open(libc, private=False) as procfs, Root.open(str(rootfs), libc,
                                                               procfs=procfs) as root:
        done = update_ldcache(root, procfs, the_plan or plan(), (0, 0), journal, "x86_64")
    return done, journal


def test_writes_the_driver_entries_over_the_image_cache(rootfs: Path) -> None:
    cache = rootfs / "etc/ld.so.cache"
    shutil.copy("/etc/ld.so.cache", cache)
    before = cache.read_bytes()
    done, journal = write(rootfs)
    assert done.startswith("wrote /etc/ld.so.cache")
    lines = ldconfig_p(cache)
    assert f"\tlibcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1" in lines
    assert f"\tlibcuda.so.1 (libc6) => {LIB32}/libcuda.so.1" in lines
    image_lines = [x for x in ldconfig_p(Path("/etc/ld.so.cache"))[1:]
                   if not x.startswith("Cache generated by")]
    assert set(image_lines) <= set(lines)
    assert not any(x.startswith("Cache generated by") for x in lines)  # not the image's text
    journal.rollback()
    assert cache.read_bytes() == before
    assert sorted(os.listdir(rootfs / "etc")) == ["ld.so.cache", "ld.so.conf", "ld.so.conf.d"]


def test_commit_keeps_the_new_cache_and_removes_the_old(rootfs: Path) -> None:
    shutil.copy("/etc/ld.so.cache", rootfs / "etc/ld.so.cache")
    _, journal = write(rootfs)
    journal.commit()
    assert sorted(os.listdir(rootfs / "etc")) == ["ld.so.cache", "ld.so.conf", "ld.so.conf.d"]
    assert write(rootfs)[0].startswith("unchanged")


def test_a_glibc_image_without_a_cache_gets_one(rootfs: Path) -> None:
    done, journal = write(rootfs)
    assert done.startswith("wrote") and len(ldconfig_p(rootfs / "etc/ld.so.cache")) == 5
    journal.rollback()
    assert not (rootfs / "etc/ld.so.cache").exists()


def test_a_musl_image_is_left_alone(rootfs: Path) -> None:
    shutil.rmtree(rootfs / "etc/ld.so.conf.d")
    (rootfs / "etc/ld.so.conf").unlink()
    assert write(rootfs)[0].startswith("skipped")
    assert os.listdir(rootfs / "etc") == []


def _plant_fifo(path: Path) -> None:
    os.mkfifo(path)


def _plant_device(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # like /dev/zero


def _plant_link(path: Path) -> None:
    path.symlink_to("/etc/shadow")


@pytest.mark.parametrize("plant", [_plant_fifo, _plant_device, _plant_link],
                         ids=["fifo", "char-device", "symlink-to-host"])
def test_a_planted_entry_is_replaced_never_opened_and_restored(
        rootfs: Path, plant: Callable[[Path], None]) -> None:
    cache = rootfs / "etc/ld.so.cache"
    plant(cache)
    planted = stat.S_IFMT(os.lstat(cache).st_mode)
    shadow = Path("/etc/shadow").read_bytes()
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(write(rootfs)), daemon=True)
    worker.start()
    worker.join(10)
    assert result, "the writer blocked on what the image planted"
    done, journal = result[0]  # type: ignore[misc]
    assert done.startswith("wrote") and stat.S_ISREG(os.lstat(cache).st_mode)
    journal.rollback()
    assert stat.S_IFMT(os.lstat(cache).st_mode) == planted  # the image's entry is back
    assert Path("/etc/shadow").read_bytes() == shadow


def test_a_directory_at_the_cache_falls_back(rootfs: Path) -> None:
    (rootfs / "etc/ld.so.cache").mkdir()
    with pytest.raises(Fallback, match="is a directory"):
        write(rootfs)


def test_compat_first_falls_back(rootfs: Path) -> None:
    with pytest.raises(Fallback, match="CUDA compat directory"):
        write(rootfs, plan(("/usr/local/cuda/compat", LIB, LIB32)))


def test_an_unusual_image_cache_falls_back(rootfs: Path) -> None:
    (rootfs / "etc/ld.so.cache").write_bytes(b"not a cache")
    with pytest.raises(Fallback, match=r"the image's ld\.so\.cache"):
        write(rootfs)


# ---- budgets on the image's cache (issue 8, class 4: hostile input, Python-speed work) ---------

def _cache(n: int, key_bytes: int, value_bytes: int = 40) -> bytes:
    entries = tuple(image.CacheEntry((f"{i}" + "1a" * key_bytes)[:key_bytes].encode(),
                                     (f"/{i}/" + "v" * value_bytes)[:value_bytes].encode(), 0x303)
                    for i in range(n))
    return image.serialize(entries)


@pytest.mark.parametrize(("n", "key_bytes", "value_bytes", "why"), [
    (image.MAX_ENTRIES + 1, 8, 40, "size"),
    (10, image.MAX_KEY_BYTES + 1, 40, "longer than 255"),
    (10, 20, image.MAX_VALUE_BYTES + 1, "longer than 4096"),
    (image.MAX_ALL_KEY_BYTES // 200 + 1, 200, 40, "names of more than"),
], ids=["entries", "one-name", "one-path", "all-names"])
def test_oversized_image_caches_fall_back_to_ldconfig(n: int, key_bytes: int,
                                                      value_bytes: int, why: str) -> None:
    """Before: a cache of 2^20 entries (64 MiB) cost 31 s of parse, merge and sort."""
    with pytest.raises(image.UnsupportedCache, match=why):
        image.parse_image(_cache(n, key_bytes, value_bytes))


def test_the_largest_accepted_cache_is_cheap() -> None:
    import time

    data = _cache(image.MAX_ALL_KEY_BYTES // 32, 32)  # names alternating digits and letters
    start = time.monotonic()
    parsed = image.parse_image(data)
    image.serialize(image.merge(parsed, parsed.entries[:10]), parsed.generator, parsed.hwcaps)
    assert time.monotonic() - start < 2.0  # ~0.5 s on the project VM
