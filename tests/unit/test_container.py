"""nvmount.container.open: opening the target container (F16) and detecting its layout (§2.2)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from nvmount._libc import Libc
from nvmount.container.layout import (
    choose_layout,
    detect_layout,
    find_compat_libs,
    is_compat_lib_name,
)
from nvmount.container.open import (
    IDENTITY_UID_MAP,
    Container,
    check_rootfs_path,
    open_container,
    parse_id_map,
)
from nvmount.errors import ContainerError, PathError
from nvmount.fs.rootfs import Root
from nvmount.plan.types import ContainerLayout
from tests.fixtures.privns import sleeper

root_only = pytest.mark.root


@pytest.fixture
def libc() -> Libc:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    return Libc()


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    r = tmp_path / "rootfs"
    (r / "etc").mkdir(parents=True)
    (r / "usr/lib").mkdir(parents=True)
    (r / "etc/debian_version").write_text("12\n")
    return r


# -- pure -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rootfs",
    ["rootfs", "/a/../b", "/a/", "/", "//a", "/a/./b", "/a//b", ""],
    ids=["relative", "dotdot", "trailing-slash", "root", "double-slash-start", "dot",
         "double-slash", "empty"],
)
def test_rootfs_path_must_be_absolute_and_clean(rootfs: str) -> None:
    with pytest.raises(ContainerError, match="check rootfs"):
        check_rootfs_path(rootfs)


@pytest.mark.parametrize("path", ["/var/lib/x/rootfs", "/r", "/a/b.c/d-e_f"])
def test_clean_rootfs_path_is_accepted(path: str) -> None:
    assert check_rootfs_path(path) is None  # no ContainerError: accepted as given


@pytest.mark.parametrize(
    "text, want",
    [
        ("         0          0 4294967295\n", IDENTITY_UID_MAP),
        ("0 100000 65536\n", ((0, 100000, 65536),)),
        ("0 0 1\n1 100000 65535\n", ((0, 0, 1), (1, 100000, 65535))),
        ("", ()),
    ],
    ids=["identity", "shifted", "two-lines", "empty"],
)
def test_parse_id_map(text: str, want: tuple[tuple[int, int, int], ...]) -> None:
    assert parse_id_map(text) == want


def test_parse_id_map_rejects_garbage() -> None:
    with pytest.raises(ContainerError, match="parse uid_map line 'x y'"):
        parse_id_map("x y\n")


@pytest.mark.parametrize(
    "machine, facts, libs, libs32",
    [
        ("x86_64", dict(debian=True), "/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"),
        ("aarch64", dict(debian=True), "/usr/lib/aarch64-linux-gnu", "/var/empty"),
        ("ppc64le", dict(debian=True), "/usr/lib/powerpc64le-linux-gnu", "/var/empty"),
        ("x86_64", dict(has_usr_lib32=True, has_usr_lib=True), "/usr/lib64", "/usr/lib32"),
        ("x86_64", dict(has_usr_lib=True), "/usr/lib64", "/usr/lib"),
        ("x86_64", dict(has_usr_lib=True, usr_lib_is_lib64=True), "/usr/lib64", "/usr/lib32"),
        ("x86_64", {}, "/usr/lib64", "/usr/lib32"),
        ("aarch64", dict(has_usr_lib=True), "/usr/lib64", "/usr/lib"),
    ],
    ids=["debian-x86_64", "debian-aarch64", "debian-ppc64le", "lib32-exists", "usr-lib",
         "usr-lib-is-lib64", "nothing", "rpm-aarch64"],
)
def test_choose_layout(machine: str, facts: dict[str, bool], libs: str, libs32: str) -> None:
    args = dict(debian=False, has_usr_lib32=False, has_usr_lib=False, usr_lib_is_lib64=False)
    args.update(facts)
    assert choose_layout(machine, **args) == ContainerLayout("/usr/bin", libs, libs32)


def test_choose_layout_unknown_architecture() -> None:
    with pytest.raises(ContainerError, match="unsupported architecture 'riscv64'"):
        choose_layout("riscv64", debian=True, has_usr_lib32=False, has_usr_lib=True,
                      usr_lib_is_lib64=False)


@pytest.mark.parametrize(
    "name, ok",
    [("libcuda.so.1", True), ("libcuda.so.550.54.15", True), ("libcuda.so", False),
     ("cuda.so.1", False), ("libx.so.", True), (".libcuda.so.1", False)],
)
def test_compat_glob(name: str, ok: bool) -> None:
    assert is_compat_lib_name(name) is ok


# -- layout reads -----------------------------------------------------------------------------
@root_only
@pytest.mark.parametrize(
    "build, machine, libs, libs32",
    [
        (lambda r: None, "x86_64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"),
        (lambda r: (r / "etc/debian_version").unlink(), "x86_64", "/usr/lib64", "/usr/lib"),
        (lambda r: ((r / "etc/debian_version").unlink(), (r / "usr/lib32").mkdir()),
         "x86_64", "/usr/lib64", "/usr/lib32"),
        (lambda r: ((r / "etc/debian_version").unlink(), (r / "usr/lib").rmdir(),
                    (r / "usr/lib64").mkdir(), (r / "usr/lib").symlink_to("lib64")),
         "x86_64", "/usr/lib64", "/usr/lib32"),
        (lambda r: ((r / "etc/debian_version").unlink(),
                    (r / "etc/debian_version").symlink_to("/proc/self/root/etc/debian_version")),
         "x86_64", "/usr/lib64", "/usr/lib"),
        (lambda r: None, "aarch64", "/usr/lib/aarch64-linux-gnu", "/var/empty"),
    ],
    ids=["debian", "rpm-usr-lib", "rpm-lib32", "rpm-lib-is-lib64", "debian-version-escapes",
         "debian-aarch64"],
)
def test_detect_layout(rootfs: Path, libc: Libc, build, machine: str, libs: str,
                       libs32: str) -> None:
    build(rootfs)
    with Root.open(str(rootfs), libc) as root:
        layout = detect_layout(root, machine)
    assert (layout.bins_dir, layout.libs_dir, layout.libs32_dir) == ("/usr/bin", libs, libs32)
    assert layout.cuda_compat_libs == ()


@root_only
def test_compat_libs_are_resolved_regular_files_inside_the_root(rootfs: Path, libc: Libc) -> None:
    real = rootfs / "usr/local/cuda-12.4/compat"
    real.mkdir(parents=True)
    (rootfs / "usr/local/cuda").symlink_to("cuda-12.4")
    (real / "libcuda.so.999.1").write_text("")
    (real / "libcuda.so.1").symlink_to("libcuda.so.999.1")
    (real / "libnvidia-ptxjitcompiler.so.999.1").write_text("")
    (real / "libevil.so.1").symlink_to("/proc/1/root/usr/lib/libc.so.6")  # CVE-2024-0132
    (real / "libroot.so.1").symlink_to("/")
    (real / "libdir.so.1").mkdir()
    os.mkfifo(real / "libfifo.so.1")
    (real / "libcuda.so").symlink_to("libcuda.so.1")
    (real / "README").write_text("")
    with Root.open(str(rootfs), libc) as root:
        found = find_compat_libs(root)
    assert found == (
        "/usr/local/cuda-12.4/compat/libcuda.so.999.1",
        "/usr/local/cuda-12.4/compat/libnvidia-ptxjitcompiler.so.999.1",
    )


# -- open_container ---------------------------------------------------------------------------
@root_only
def test_open_container(rootfs: Path, libc: Libc) -> None:
    fds = len(os.listdir("/proc/self/fd"))
    with sleeper("-m", "--propagation", "private") as pid:
        with open_container(pid, str(rootfs), no_cgroups=True, libc=libc) as c:
            st = os.stat(f"/proc/{pid}/ns/mnt")
            assert (c.pid, c.uid, c.gid, c.in_userns, c.cgroup) == (pid, 0, 0, False, None)
            assert c.mntns == (st.st_dev, st.st_ino)
            assert os.fstat(c.mntns_fd).st_ino == st.st_ino
            c.check_alive()
            rec = c.record()
            assert isinstance(rec, Container)
            assert rec.rootfs == str(rootfs) and rec.mntns == c.mntns
            if os.uname().machine == "x86_64":
                assert rec.layout.libs_dir == "/usr/lib/x86_64-linux-gnu"
        assert len(os.listdir("/proc/self/fd")) == fds  # handle closed its fds
        with open_container(pid, str(rootfs), no_cgroups=True, libc=libc) as c:
            os.kill(pid, 9)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    c.check_alive()
                except ContainerError as err:
                    assert "the process exited" in str(err)
                    break
                time.sleep(0.01)
            else:
                pytest.fail("check_alive did not notice the exit")


@root_only
def test_open_container_finds_the_cgroup_unless_told_not_to(rootfs: Path, libc: Libc) -> None:
    from nvmount.errors import CgroupError

    with sleeper("-m") as pid:
        try:
            with open_container(pid, str(rootfs), no_cgroups=False, libc=libc) as c:
                assert c.cgroup is None or c.cgroup.version in (1, 2)
        except CgroupError as err:  # a machine whose cgroup mounts are hidden from us
            pytest.skip(f"cgroup lookup unavailable here: {err}")


@root_only
def test_user_namespace_skips_cgroups(rootfs: Path, libc: Libc) -> None:
    with sleeper("-U", "-m", "-r") as pid, open_container(
        pid, str(rootfs), no_cgroups=False, libc=libc
    ) as c:
        assert c.in_userns is True
        assert c.cgroup is None


def _reaped_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@root_only
@pytest.mark.parametrize(
    "which, match",
    [
        ("self", "its mount namespace is the hook's own"),
        ("same-ns", "its mount namespace is the hook's own"),
        ("reaped", "no such process"),
        ("zombie", r"ns/mnt: no such file or directory|the process exited"),
        ("zero", "not a valid pid"),
        ("negative", "not a valid pid"),
    ],
)
def test_open_container_refusals(rootfs: Path, libc: Libc, which: str, match: str) -> None:
    """F16: our own pid, a process in our mount namespace (pid 1 on a host), gone pids."""
    procs: list[subprocess.Popen[bytes]] = []
    if which == "self":
        pid = os.getpid()
    elif which == "same-ns":
        procs.append(subprocess.Popen(["sleep", "60"]))
        pid = procs[0].pid
    elif which == "reaped":
        pid = _reaped_pid()
    elif which == "zombie":
        procs.append(subprocess.Popen(["true"]))
        pid = procs[0].pid
        while not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
            time.sleep(0.01)
    else:
        pid = 0 if which == "zero" else -5
    try:
        with pytest.raises(ContainerError, match=match):
            open_container(pid, str(rootfs), no_cgroups=True, libc=libc)
    finally:
        for p in procs:
            p.kill()
            p.wait()


@root_only
def test_rootfs_missing_or_symlink_in_the_container(rootfs: Path, libc: Libc) -> None:
    link = rootfs.parent / "link"
    link.symlink_to(rootfs)
    with sleeper("-m", "--propagation", "private") as pid:
        with pytest.raises(PathError, match="rootfs is a symlink"):
            open_container(pid, str(link), no_cgroups=True, libc=libc)
        with pytest.raises(PathError, match="no such file"):
            open_container(pid, str(rootfs) + "-missing", no_cgroups=True, libc=libc)


def _open_with_container_caps(pid: int, rootfs: str) -> tuple[int, bool, str]:
    from nvmount import privileges as P

    libc = Libc()
    with P.stage(P.Stage.CONTAINER), open_container(pid, rootfs, no_cgroups=True,
                                                     libc=libc) as c:
        c.check_alive()
        return c.uid, c.in_userns, c.layout.libs_dir


@root_only
def test_open_container_needs_only_its_stage_capabilities(rootfs: Path) -> None:
    """Stage.CONTAINER has no SYS_ADMIN/KILL: a plain procfs handle, EPERM on signal 0 = alive."""
    from tests.fixtures.privns import in_private_ns

    setpriv = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    with sleeper("-U", "-m", prefix=setpriv) as pid:
        uid, in_userns, libs = in_private_ns(_open_with_container_caps, pid, str(rootfs))
    assert (uid, in_userns) == (65534, True)
    if os.uname().machine == "x86_64":
        assert libs == "/usr/lib/x86_64-linux-gnu"
