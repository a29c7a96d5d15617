"""nvmount.apply.mounts: host-side clones attached into another mount namespace, flags, propagation,
rollback - on the real kernel, in forked children with private mount namespaces."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from nvmount import _libc
from nvmount._libc import Libc
from nvmount.apply.mounts import (
    apply_flags,
    attach,
    check_source_mode,
    clone_source,
    detach,
    is_shared,
    make_tmpfs,
    mount_attrs,
    mount_identity,
    shared_groups,
)
from nvmount.apply.namespace import entered
from nvmount.errors import MountError
from nvmount.fs.paths import SourceKind
from nvmount.fs.procfs import ProcFs
from nvmount.fs.rootfs import Root
from nvmount.plan.types import RO_DEV, RO_IPC, RO_LIB, RO_PROC, MountFlag
from tests._compat import zip_strict
from tests.fixtures.containers import HostSnapshot
from tests.fixtures.privns import in_private_ns, sleeper
from tests.unit.test_rootfs import listing

pytestmark = pytest.mark.root

NULL = os.makedev(1, 3)


def mountinfo(pid: int | str = "self") -> list[str]:
    with open(f"/proc/{pid}/mountinfo") as f:
        return f.read().splitlines()


def lines_for(lines: list[str], path: str) -> list[str]:
    return [line for line in lines if line.split()[4].startswith(path)]


def is_mounted(path: str) -> bool:
    return any(line.split()[4] == path for line in mountinfo())


def options(line: str) -> set[str]:
    return set(line.split()[5].split(","))


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """Host-side sources: a library, a directory, a socket, a symlink, /dev/null-like node."""
    h = tmp_path / "host"
    (h / "lib").mkdir(parents=True)
    (h / "lib/libcuda.so.999").write_text("driver")
    (h / "lib/libcuda.so.1").symlink_to("libcuda.so.999")
    (h / "gpus/0000:01:00.0").mkdir(parents=True)
    (h / "gpus/0000:01:00.0/information").write_text("Model: fake")
    os.mknod(h / "nvidia0", stat.S_IFCHR | 0o666, NULL)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(h / "socket"))
    s.close()
    return h


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    r = tmp_path / "rootfs"
    for d in ("usr/bin", "usr/lib", "proc/driver", "dev", "run"):
        (r / d).mkdir(parents=True)
    return r


# -- pure -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "mode, rdev, kind, want, why",
    [
        (stat.S_IFREG | 0o755, 0, SourceKind.FILE, None, None),
        (stat.S_IFLNK | 0o777, 0, SourceKind.FILE, None, "unexpected source file mode 120777"),
        (stat.S_IFDIR | 0o755, 0, SourceKind.FILE, None, "unexpected source file mode 40755"),
        (stat.S_IFREG | 0o644, 0, SourceKind.DIRECTORY, None, "expected a directory"),
        (stat.S_IFCHR | 0o666, os.makedev(195, 0), SourceKind.DEVICE, (195, 0), None),
        (stat.S_IFCHR | 0o666, os.makedev(195, 1), SourceKind.DEVICE, (195, 0),
         "invalid device node: is 195:1, expected 195:0"),
        (stat.S_IFBLK | 0o666, os.makedev(195, 0), SourceKind.DEVICE, (195, 0),
         "expected a device"),
        (stat.S_IFSOCK | 0o777, 0, SourceKind.SOCKET, None, None),
        (stat.S_IFIFO | 0o600, 0, SourceKind.SOCKET, None, "unexpected source file mode 10600"),
    ],
    ids=["file", "symlink", "dir-for-file", "file-for-dir", "device", "device-wrong-rdev",
         "block-device", "socket", "fifo-for-socket"],
)
def test_check_source_mode(mode: int, rdev: int, kind: SourceKind, want, why) -> None:
    got = check_source_mode(mode, rdev, kind, want)
    assert got == why or (why is not None and got is not None and why in got)


def test_mount_attrs() -> None:
    assert mount_attrs(MountFlag.NONE) == 0
    assert mount_attrs(RO_LIB) == (
        _libc.MOUNT_ATTR_RDONLY | _libc.MOUNT_ATTR_NODEV | _libc.MOUNT_ATTR_NOSUID
    )
    assert mount_attrs(RO_DEV) & _libc.MOUNT_ATTR_NODEV == 0


# -- source checks ----------------------------------------------------------------------------
def _clone(path: str, kind: SourceKind, rdev: tuple[int, int] | None) -> str:
    libc = Libc()
    fd = clone_source(path, kind, rdev, libc)
    try:
        with ProcFs.open(libc) as procfs:
            return "private" if not is_shared(fd, procfs) else "shared"
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "name, kind, rdev, error",
    [
        ("lib/libcuda.so.999", SourceKind.FILE, None, None),
        ("lib/libcuda.so.1", SourceKind.FILE, None, "unexpected source file mode 120777"),
        ("lib", SourceKind.FILE, None, "unexpected source file mode 40"),
        ("gpus/0000:01:00.0", SourceKind.DIRECTORY, None, None),
        ("nvidia0", SourceKind.DEVICE, (1, 3), None),
        ("nvidia0", SourceKind.DEVICE, (195, 0), "invalid device node: is 1:3, expected 195:0"),
        ("socket", SourceKind.SOCKET, None, None),
        ("missing", SourceKind.FILE, None, "open source .*/missing: no such file"),
    ],
    ids=["file", "symlink-refused", "dir-as-file", "directory", "device", "device-wrong-rdev",
         "socket", "missing"],
)
def test_clone_source_checks(host: Path, name: str, kind: SourceKind, rdev, error) -> None:
    if error is None:
        assert in_private_ns(_clone, str(host / name), kind, rdev) == "private"
    else:
        with pytest.raises(MountError, match=error):
            in_private_ns(_clone, str(host / name), kind, rdev)


# -- clone on the host, setns, attach ---------------------------------------------------------
CASES = [
    ("lib/libcuda.so.999", "/usr/lib/x86_64-linux-gnu/libcuda.so.999", SourceKind.FILE, RO_LIB),
    ("nvidia0", "/dev/nvidia0", SourceKind.DEVICE, RO_DEV),
    ("socket", "/run/nvidia-persistenced/socket", SourceKind.SOCKET, RO_IPC),
    ("gpus/0000:01:00.0", "/proc/driver/nvidia/gpus/0000:01:00.0", SourceKind.DIRECTORY, RO_PROC),
]


def _attach_into(pid: int, host: str, rootfs: str, staged: bool) -> dict[str, object]:
    """Clone every source here, enter `pid`'s namespace, attach, report, roll back.

    With `staged`, everything runs with only Stage.MOUNT's capabilities effective."""
    from contextlib import nullcontext

    from nvmount import privileges as P

    with P.stage(P.Stage.MOUNT) if staged else nullcontext():
        return _attach_into_staged(pid, host, rootfs)


def _attach_into_staged(pid: int, host: str, rootfs: str) -> dict[str, object]:
    libc = Libc()
    trees = [clone_source(f"{host}/{src}", kind, (1, 3) if kind is SourceKind.DEVICE else None,
                          libc) for src, _, kind, _ in CASES]
    ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    before = mountinfo(pid)
    out: dict[str, object] = {}
    with ProcFs.open(libc) as procfs, entered(ns, libc), Root.open(rootfs, libc) as root:
        made = []
        for tree, (_, target, kind, flags) in zip_strict(trees, CASES):
            fd, created = root.ensure_mountpoint(target, kind, 1000, 1000)
            made += created
            apply_flags(tree, flags, libc, what=target)
            attach(tree, fd, libc, what=target, procfs=procfs)
            os.close(fd)
        out["mounted"] = mountinfo(pid)
        with open(f"{rootfs}/usr/lib/x86_64-linux-gnu/libcuda.so.999") as f:
            out["content"] = f.read()
        try:
            with open(f"{rootfs}/usr/lib/x86_64-linux-gnu/libcuda.so.999", "w"):
                out["write"] = "allowed"
        except OSError as err:
            out["write"] = err.errno
        for tree in reversed(trees):
            detach(tree, libc, procfs, mnt_id=mount_identity(tree, procfs, libc))
        out["removed"] = [root.remove_created(e) for e in reversed(made)]
    for tree in trees:
        os.close(tree)
    os.close(ns)
    out["after"] = mountinfo(pid)
    out["before"] = before
    out["own_after"] = mountinfo()
    return out


@pytest.mark.parametrize("staged", [False, True], ids=["all-caps", "stage-mount-caps"])
def test_clone_on_host_then_attach_in_container_namespace(host: Path, rootfs: Path,
                                                          staged: bool) -> None:
    own_before = HostSnapshot()  # filtered: another daemon's mounts meanwhile do not count
    tree_before = listing(rootfs)
    with sleeper("-m", "--propagation", "private") as pid:
        out = in_private_ns(_attach_into, pid, str(host), str(rootfs), staged)
    mounted = out["mounted"]
    assert isinstance(mounted, list)
    want = {
        "/usr/lib/x86_64-linux-gnu/libcuda.so.999": {"ro", "nosuid", "nodev"},
        "/dev/nvidia0": {"ro", "nosuid", "noexec"},
        "/run/nvidia-persistenced/socket": {"ro", "nosuid", "nodev", "noexec"},
        "/proc/driver/nvidia/gpus/0000:01:00.0": {"ro", "nosuid", "nodev", "noexec"},
    }
    for target, opts in want.items():
        (line,) = lines_for(mounted, f"{rootfs}{target}")
        assert opts <= options(line), line
        assert "shared:" not in line and "master:" not in line, line  # private
    (dev,) = lines_for(mounted, f"{rootfs}/dev/nvidia0")
    assert "nodev" not in options(dev)
    assert out["content"] == "driver"
    assert out["write"] == 30  # EROFS
    assert out["after"] == out["before"]  # rollback left the container's table as it was
    assert out["removed"] == [True] * len(out["removed"])  # type: ignore[arg-type]
    assert listing(rootfs) == tree_before
    own_before.assert_unchanged()  # nothing reached the host


# -- tmpfs and files inside it ----------------------------------------------------------------
def _tmpfs(rootfs: str) -> tuple[list[str], str, int, list[str]]:
    libc = Libc()
    with ProcFs.open(libc) as procfs, Root.open(rootfs, libc) as root:
        fd, created = root.ensure_dir("/proc/driver/nvidia")
        tree = make_tmpfs(0o555, MountFlag.NODEV | MountFlag.NOSUID | MountFlag.NOEXEC, libc,
                          what="procfs view")
        attach(tree, fd, libc, what="/proc/driver/nvidia")
        os.close(fd)
        entry = root.write_file("/proc/driver/nvidia/params", b"ModifyDeviceFiles: 0\n", 0o444)
        with open(f"{rootfs}/proc/driver/nvidia/params") as f:
            text = f.read()
        mode = stat.S_IMODE(os.stat(f"{rootfs}/proc/driver/nvidia").st_mode)
        lines = lines_for(mountinfo(), f"{rootfs}/proc/driver/nvidia")
        detach(tree, libc, procfs)
        os.close(tree)
        assert not root.remove_created(entry)  # gone with the tmpfs
        for e in reversed(created):
            root.remove_created(e)
        return lines, text, mode, lines_for(mountinfo(), f"{rootfs}/proc")


def test_tmpfs_with_mode_flags_and_a_file(rootfs: Path) -> None:
    lines, text, mode, after = in_private_ns(_tmpfs, str(rootfs))
    (line,) = lines
    assert " - tmpfs " in line and "mode=555" in line
    assert {"rw", "nosuid", "nodev", "noexec"} <= options(line)
    assert text == "ModifyDeviceFiles: 0\n"
    assert mode == 0o555
    assert after == []
    assert not (rootfs / "proc/driver/nvidia").exists()


# -- propagation ------------------------------------------------------------------------------
def _propagation(base: str) -> dict[str, bool]:
    libc = Libc()
    s, p = f"{base}/S", f"{base}/P"
    os.makedirs(s)
    os.makedirs(p)
    libc.mount("tmpfs", s, "tmpfs", 0)
    libc.mount(None, s, None, 1 << 20)  # MS_SHARED
    libc.mount(s, p, None, _libc.MS_BIND)  # P is a peer of S (stands for the host's view)
    out = {}
    with ProcFs.open(libc) as procfs, Root.open(s, libc) as root:
        fd, _ = root.ensure_dir("/view")
        out["parent_shared"] = is_shared(fd, procfs)
        tmp = make_tmpfs(0o755, MountFlag.NONE, libc)
        attach(tmp, fd, libc, what="/view", procfs=procfs)
        os.close(fd)
        out["ours_shared"] = is_shared(tmp, procfs)
        src = f"{base}/src"
        with open(src, "w") as f:
            f.write("x")
        tree = clone_source(src, SourceKind.FILE, None, libc)
        ffd, _ = root.ensure_file("/view/lib")
        attach(tree, ffd, libc, what="/view/lib", procfs=procfs)
        os.close(ffd)
        out["nested_in_S"] = is_mounted(f"{s}/view/lib")
        out["nested_in_P"] = is_mounted(f"{p}/view/lib")
        detach(tree, libc, procfs)
        detach(tmp, libc, procfs)
        out["view_left_in_P"] = is_mounted(f"{p}/view")
        for fd in (tree, tmp):
            os.close(fd)
    return out


def test_our_mounts_are_private_under_a_shared_parent(tmp_path: Path) -> None:
    out = in_private_ns(_propagation, str(tmp_path))
    assert out["parent_shared"] is True
    assert out["ours_shared"] is False  # re-made private after the attach
    assert out["nested_in_S"] is True
    assert out["nested_in_P"] is False  # nothing beneath ours propagates
    assert out["view_left_in_P"] is False  # and the unmount cleaned the peer copy


class _NoStatmount(Libc):
    """A kernel without statx mount ids / statmount, or a seccomp filter refusing them."""

    def __init__(self, errno_: int | None) -> None:
        super().__init__()
        self.errno_ = errno_

    def mount_id_unique(self, fd: int) -> int | None:
        if self.errno_ is None:
            return None  # before 6.8: statx answers without STATX_MNT_ID_UNIQUE
        raise OSError(self.errno_, os.strerror(self.errno_))


def _groups_each_way(base: str) -> dict[str, list[frozenset[int] | bool]]:
    """shared_groups from mountinfo, from statmount and from the fallbacks, per mount kind."""
    libc = Libc()
    for name in ("S", "P", "Q", "R"):
        os.makedirs(f"{base}/{name}")
    libc.mount("tmpfs", f"{base}/S", "tmpfs", 0)
    libc.mount(None, f"{base}/S", None, 1 << 20)  # MS_SHARED
    libc.mount(f"{base}/S", f"{base}/P", None, _libc.MS_BIND)  # a peer of S
    libc.mount(f"{base}/S", f"{base}/R", None, _libc.MS_BIND)
    libc.mount(None, f"{base}/R", None, _libc.MS_SLAVE)  # a slave, not shared
    libc.mount("tmpfs", f"{base}/Q", "tmpfs", 0)  # private
    ways = [None, libc, _NoStatmount(None), _NoStatmount(38), _NoStatmount(1)]  # ENOSYS, EPERM
    out: dict[str, list[frozenset[int] | bool]] = {}
    with ProcFs.open(libc) as procfs:
        fds = {name: os.open(f"{base}/{name}", os.O_PATH | os.O_CLOEXEC) for name in "SPQR"}
        fds["detached"] = libc.open_tree(_libc.AT_FDCWD, f"{base}/Q",
                                         _libc.OPEN_TREE_CLONE | _libc.OPEN_TREE_CLOEXEC)
        out["statmount"] = [libc.mount_id_unique(fds["S"]) is not None]
        for name, fd in fds.items():
            out[name] = [shared_groups(fd, procfs, way) for way in ways]
            os.close(fd)
    return out


def test_shared_groups_from_statmount_equal_mountinfo(tmp_path: Path) -> None:
    out = in_private_ns(_groups_each_way, str(tmp_path))
    major, minor = (int(v) for v in os.uname().release.split(".")[:2])
    assert out.pop("statmount") == [(major, minor) >= (6, 8)]  # the kernel answered itself
    for name, answers in out.items():
        assert len(set(answers)) == 1, f"{name}: {answers}"
    assert out["S"][0] == out["P"][0] and len(out["S"][0]) == 1  # peers share one group
    assert out["Q"][0] == out["R"][0] == out["detached"][0] == frozenset()


# -- detach safety ----------------------------------------------------------------------------
def _detach_wrong_id(rootfs: str, src: str) -> tuple[str, bool]:
    libc = Libc()
    with ProcFs.open(libc) as procfs, Root.open(rootfs, libc) as root:
        tree = clone_source(src, SourceKind.FILE, None, libc)
        fd, _ = root.ensure_file("/usr/bin/x")
        attach(tree, fd, libc)
        os.close(fd)
        try:
            detach(tree, libc, procfs, mnt_id=mount_identity(tree, procfs, libc) + 1000,
                   what="/usr/bin/x")
        except MountError as err:
            msg = str(err)
        still = is_mounted(f"{rootfs}/usr/bin/x")
        detach(tree, libc, procfs)
        os.close(tree)
        return msg, still


def test_detach_refuses_a_mount_that_is_not_ours(rootfs: Path, host: Path) -> None:
    msg, still = in_private_ns(_detach_wrong_id, str(rootfs), str(host / "lib/libcuda.so.999"))
    assert "is not ours" in msg and "/usr/bin/x" in msg
    assert still is True


def _attach_bad_target(src: str) -> str:
    libc = Libc()
    tree = clone_source(src, SourceKind.FILE, None, libc)
    fd = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        attach(tree, fd, libc, what="/")
    except MountError as err:
        return str(err)
    finally:
        os.close(fd)
        os.close(tree)
    return "attached"


def test_attach_errors_name_the_target(host: Path) -> None:
    msg = in_private_ns(_attach_bad_target, str(host / "lib/libcuda.so.999"))
    assert msg.startswith("attach mount at /: ")
