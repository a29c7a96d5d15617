"""nvmount._libc on ctypes' C module alone: its C types are ctypes', its calls work, and
importing it loads no `ctypes` package (the GPU start's ~2 ms)."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvmount import _libc

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("ours", "theirs"), [
    (_libc.c_int, ctypes.c_int), (_libc.c_uint, ctypes.c_uint), (_libc.c_long, ctypes.c_long),
    (_libc.c_ulong, ctypes.c_ulong), (_libc.c_size_t, ctypes.c_size_t),
    (_libc.c_uint64, ctypes.c_uint64), (_libc.c_char, ctypes.c_char)])
def test_the_c_types_are_ctypes_own(ours: type, theirs: type) -> None:
    assert ours._type_ == theirs._type_  # type: ignore[attr-defined]
    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)


def test_the_structures_have_the_kernels_sizes() -> None:
    import struct

    assert struct.calcsize(_libc._OPEN_HOW) == _libc.OPEN_HOW_SIZE == 24  # struct open_how
    # struct mount_attr, MOUNT_ATTR_SIZE_VER0
    assert struct.calcsize(_libc._MOUNT_ATTR) == _libc.MOUNT_ATTR_SIZE == 32


def test_importing_libc_loads_no_ctypes_package() -> None:
    code = ("import sys, os; sys.path.insert(0, sys.argv[1]); import nvmount._libc as l; "
            "c = l.Libc(); os.close(c.openat2(-100, '/', os.O_RDONLY)); "
            "print(sorted(m for m in sys.modules if m.startswith('ctypes')))")
    out = subprocess.run([sys.executable, "-IS", "-c", code, str(REPO)], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_calls_work_and_fail_with_the_errno(tmp_path: Path) -> None:
    libc = _libc.Libc()
    (tmp_path / "f").write_text("x")
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = libc.openat2(dirfd, "f", os.O_RDONLY, resolve=_libc.RESOLVE_IN_ROOT)
        assert os.read(fd, 1) == b"x"
        os.close(fd)
        with pytest.raises(OSError) as err:
            libc.openat2(dirfd, "missing", os.O_RDONLY, resolve=_libc.RESOLVE_IN_ROOT)
        assert err.value.errno == errno.ENOENT and err.value.filename == "missing"
        proc = os.open("/proc/self", os.O_RDONLY)
        try:
            assert libc.fstatfs_type(proc) == _libc.PROC_SUPER_MAGIC
        finally:
            os.close(proc)
    finally:
        os.close(dirfd)


def test_a_call_takes_arguments_built_with_ctypes(tmp_path: Path) -> None:
    """nvmount._bpf builds its own arguments with ctypes and passes them through `syscall`."""
    (tmp_path / "a").write_text("a")
    libc = _libc.Libc()
    libc.syscall("renameat2", _libc.AT_FDCWD, str(tmp_path / "a").encode(), _libc.AT_FDCWD,
                 str(tmp_path / "b").encode(), ctypes.c_uint(_libc.RENAME_NOREPLACE))
    assert (tmp_path / "b").read_text() == "a"


def test_string_buffers_are_zeroed() -> None:
    assert _libc.create_string_buffer(4).raw == b"\0" * 4


def test_statmount_request_passed_as_bytes() -> None:
    libc = _libc.Libc()
    fd = os.open("/", os.O_RDONLY)
    try:
        mnt_id = libc.mount_id_unique(fd)
    finally:
        os.close(fd)
    if mnt_id is None:
        pytest.skip("no STATX_MNT_ID_UNIQUE before Linux 6.8")
    propagation, peer_group = libc.mount_propagation(mnt_id)
    assert propagation >= 0 and peer_group >= 0
