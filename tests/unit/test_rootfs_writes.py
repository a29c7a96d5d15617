"""nvmount.fs.rootfs.Root's in-root write vocabulary shared by apply, spec delivery and NVIDIA's
CDI hooks: `symlink(replace=True)`, `write_file(replace=, parents=)`, `mkdir_all` and
`exchange_file` (the ld.so.cache writer's install step). Nothing at a target is ever opened or
followed; owners and modes are the caller's; nothing is left at a temporary name."""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvmount._libc import Libc
from nvmount.errors import PathError
from nvmount.fs.rootfs import EntryKind, Root

pytestmark = pytest.mark.root


@pytest.fixture
def libc() -> Libc:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    return Libc()


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    r = tmp_path / "rootfs"
    for d in ("etc", "usr/lib", "proc", "dev"):
        (r / d).mkdir(parents=True)
    return r


@pytest.fixture
def marker() -> Iterator[str]:
    """A host path that must never come into existence."""
    path = f"/tmp/HOST_{secrets.token_hex(6)}"
    yield path
    assert not os.path.lexists(path), f"host marker {path} was created"


def leftovers(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(".") and "nvhook" in n]


EXISTING: list[Callable[[Path, str], object]] = [
    lambda p, m: p.write_text("x"),
    lambda p, m: p.symlink_to(m),
    lambda p, m: p.symlink_to("libother.so.1"),
    lambda p, m: os.mkfifo(p),
]


@pytest.mark.parametrize("existing", EXISTING, ids=["file", "host-symlink", "other-link", "fifo"])
def test_symlink_replace_swaps_the_entry_out(rootfs: Path, libc: Libc, marker: str,
                                            existing: Callable[[Path, str], object]) -> None:
    link = rootfs / "usr/lib/libcuda.so"
    existing(link, marker)
    with Root.open(str(rootfs), libc) as root:
        made = root.symlink("/usr/lib/libcuda.so", "libcuda.so.1", 7, 8, replace=True)
    assert [(c.path, c.kind) for c in made] == [("/usr/lib/libcuda.so", EntryKind.SYMLINK)]
    assert os.readlink(link) == "libcuda.so.1"
    assert (os.lstat(link).st_uid, os.lstat(link).st_gid) == (7, 8)
    assert leftovers(link.parent) == []


def test_symlink_replace_keeps_the_same_link(rootfs: Path, libc: Libc) -> None:
    link = rootfs / "usr/lib/libcuda.so"
    link.symlink_to("libcuda.so.1")
    before = os.lstat(link).st_ino
    with Root.open(str(rootfs), libc) as root:
        assert root.symlink("/usr/lib/libcuda.so", "libcuda.so.1", replace=True) == ()
    assert os.lstat(link).st_ino == before


def test_symlink_replace_refuses_a_directory(rootfs: Path, libc: Libc) -> None:
    (rootfs / "usr/lib/libcuda.so").mkdir()
    (rootfs / "usr/lib/libcuda.so/keep").write_text("k")
    with Root.open(str(rootfs), libc) as root, pytest.raises(PathError, match="directory"):
        root.symlink("/usr/lib/libcuda.so", "libcuda.so.1", replace=True)
    assert (rootfs / "usr/lib/libcuda.so/keep").read_text() == "k"
    assert leftovers(rootfs / "usr/lib") == []


def test_symlink_in_a_setgid_directory_gets_the_owner_group(rootfs: Path, libc: Libc) -> None:
    """The hooks' own in-place symlinkat skipped this check: a link there took the
    directory's group."""
    lib = rootfs / "usr/lib"
    os.chown(lib, 0, 5)
    os.chmod(lib, 0o2755)
    with Root.open(str(rootfs), libc) as root:
        root.symlink("/usr/lib/libcuda.so", "libcuda.so.1", 0, 0, replace=True)
    assert (os.lstat(lib / "libcuda.so").st_uid, os.lstat(lib / "libcuda.so").st_gid) == (0, 0)


@pytest.mark.parametrize("existing", EXISTING, ids=["file", "host-symlink", "other-link", "fifo"])
def test_write_file_replace(rootfs: Path, libc: Libc, marker: str,
                            existing: Callable[[Path, str], object]) -> None:
    path = rootfs / "etc/nvidia/profiles/10-container.conf"
    path.parent.mkdir(parents=True)
    existing(path, marker)
    with Root.open(str(rootfs), libc) as root:
        entry = root.write_file("/etc/nvidia/profiles/10-container.conf", b"{}", 0o444, 7, 8,
                                replace=True)
    st = os.lstat(path)
    assert entry.kind is EntryKind.FILE and (entry.dev, entry.ino) == (st.st_dev, st.st_ino)
    assert stat.S_ISREG(st.st_mode) and path.read_bytes() == b"{}"
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o444, 7, 8)
    assert leftovers(path.parent) == []


def test_write_file_makes_parents_with_mode_and_owner(rootfs: Path, libc: Libc) -> None:
    with Root.open(str(rootfs), libc) as root:
        root.write_file("/etc/nvidia/rc.d/10-container.conf", b"x", 0o444, 7, 8, parents=0o555)
        with pytest.raises(PathError, match="file exists"):  # without replace: a new name only
            root.write_file("/etc/nvidia/rc.d/10-container.conf", b"y", parents=0o555)
        with pytest.raises(PathError, match="no such file"):  # without parents: they exist
            root.write_file("/etc/other/x.conf", b"y")
    for d in ("etc/nvidia", "etc/nvidia/rc.d"):
        st = os.stat(rootfs / d)
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o555, 7, 8)
    assert (rootfs / "etc/nvidia/rc.d/10-container.conf").read_bytes() == b"x"


def test_write_file_replace_refuses_a_directory(rootfs: Path, libc: Libc) -> None:
    (rootfs / "etc/conf").mkdir()
    with Root.open(str(rootfs), libc) as root, pytest.raises(PathError, match="directory"):
        root.write_file("/etc/conf", b"x", replace=True)
    assert (rootfs / "etc/conf").is_dir() and leftovers(rootfs / "etc") == []


def test_mkdir_all(rootfs: Path, libc: Libc, marker: str) -> None:
    (rootfs / "usr/lib64").symlink_to(marker)  # an absolute link: resolved in the root
    with Root.open(str(rootfs), libc) as root:
        for path in ("/usr/lib", "/usr/lib64/sub", "/opt/a/b"):
            fd = root.mkdir_all(path, 0o750, 7, 8)
            try:
                assert root.real_path(fd) in (path, marker + "/sub")
            finally:
                os.close(fd)
    assert (rootfs / marker.lstrip("/") / "sub").is_dir()
    st = os.stat(rootfs / "opt/a/b")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o750, 7, 8)


@pytest.mark.parametrize("old", [b"old cache", None, "fifo"], ids=["file", "none", "fifo"])
def test_exchange_file_undo_and_close(rootfs: Path, libc: Libc, old: bytes | str | None
                                      ) -> None:
    cache = rootfs / "etc/ld.so.cache"
    if isinstance(old, bytes):
        cache.write_bytes(old)
    elif old == "fifo":
        os.mkfifo(cache)
    with Root.open(str(rootfs), libc) as root:
        done = root.exchange_file("/etc/ld.so.cache", b"new cache", 0o644, 7, 8)
        st = os.lstat(cache)
        assert cache.read_bytes() == b"new cache" and st.st_ino == done.ours
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o644, 7, 8)
        done.undo()
        done.close()
    if isinstance(old, bytes):
        assert cache.read_bytes() == old
    elif old == "fifo":
        assert stat.S_ISFIFO(os.lstat(cache).st_mode)
    else:
        assert not os.path.lexists(cache)
    assert leftovers(rootfs / "etc") == []


def test_exchange_file_commit_and_a_changed_file(rootfs: Path, libc: Libc) -> None:
    cache = rootfs / "etc/ld.so.cache"
    cache.write_bytes(b"old")
    with Root.open(str(rootfs), libc) as root:
        done = root.exchange_file("/etc/ld.so.cache", b"new")
        done.close()  # a commit: the old entry goes
        assert cache.read_bytes() == b"new" and leftovers(rootfs / "etc") == []
        again = root.exchange_file("/etc/ld.so.cache", b"newer")
        os.rename(cache, rootfs / "etc/moved")  # kept: its inode is not reused
        cache.write_bytes(b"someone else's")
        with pytest.raises(PathError, match="not the file we wrote"):
            again.undo()
        again.close()
    assert cache.read_bytes() == b"someone else's"
