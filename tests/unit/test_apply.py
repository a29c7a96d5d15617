"""apply_plan on the real kernel: a temp rootfs in a private mount namespace, host sources.

Each test runs in a forked child (`in_private_ns`), which plays the container's mount
namespace: the plan is applied there, checked, and rolled back (or made to fail).
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from nvmount._libc import Libc
from nvmount.apply.journal import Journal
from nvmount.apply.steps import apply_plan, clone_sources
from nvmount.capabilities import DriverCapability as C
from nvmount.errors import MountError, NvmountError
from nvmount.faults import Faults
from nvmount.fs.paths import SourceKind
from nvmount.fs.procfs import ProcFs
from nvmount.fs.rootfs import Root
from nvmount.plan.types import (
    RO_DEV,
    RO_IPC,
    RO_LIB,
    RO_PROC,
    Bind,
    MountPlan,
    PlanEntry,
    Symlink,
    Tmpfs,
    WriteFile,
)
from tests.fixtures.privns import in_private_ns

pytestmark = pytest.mark.root

LIB = "/usr/lib/x86_64-linux-gnu"
VER = "550.54.15"
OWNER = (1234, 4321)


def mountinfo() -> list[str]:
    """The mount table's lines that could be ours (`relevant_mount_marks`: the session's temp
    dir, driver paths): a daemon on the host that removes a mount point takes that mount out of
    this private namespace's copy too (the kernel detaches it), which is no change of ours."""
    from tests.fixtures.containers import relevant_mount_marks

    marks = relevant_mount_marks()
    with open("/proc/self/mountinfo") as f:
        return sorted(" ".join(line.split()[1:]) for line in f.read().splitlines()
                      if any(m in line for m in marks))


def listing(top: str) -> list[tuple[str, int, int, int]]:
    """Every entry under `top`: (path, mode, uid, size), not following mounts' symlinks."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        if os.path.ismount(os.path.join(dirpath, "proc")) and "proc" in dirnames:
            dirnames.remove("proc")  # a real procfs: compared through mountinfo instead
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            size = 0 if stat.S_ISDIR(st.st_mode) else st.st_size  # dirs keep grown blocks
            out.append((p[len(top):], st.st_mode, st.st_uid, size))
    return sorted(out)


def snapshot(rootfs: str) -> tuple[list[str], list[tuple[str, int, int, int]]]:
    return mountinfo(), listing(rootfs)


def make_host(top: Path) -> Path:
    """Host-side driver root: a library, a binary, a proc gpu dir, a char device, a socket."""
    h = top / "drv"
    (h / "usr/lib").mkdir(parents=True)
    (h / f"usr/lib/libcuda.so.{VER}").write_bytes(b"\x7fELF cuda")
    (h / f"usr/lib/libnvidia-ml.so.{VER}").write_bytes(b"\x7fELF nvml")
    (h / "usr/bin").mkdir(parents=True)
    (h / "usr/bin/nvidia-smi").write_bytes(b"#!smi")
    (h / "usr/bin/nvidia-smi").chmod(0o755)
    gpu = h / "proc/driver/nvidia/gpus/00000000:07:00.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: sim\n")
    (h / "dev").mkdir()
    os.mknod(h / "dev/nvidia0", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    (h / "run/nvidia-persistenced").mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(h / "run/nvidia-persistenced/socket"))
    s.close()
    return h


def make_rootfs(top: Path) -> Path:
    """A tiny Debian-shaped rootfs; /proc is a plain directory."""
    r = top / "rootfs"
    for d in ("usr/bin", LIB.lstrip("/"), "etc", "proc", "dev", "run"):
        (r / d).mkdir(parents=True, exist_ok=True)
    (r / "etc/debian_version").write_text("12.0\n")
    (r / "etc/existing").write_text("keep me\n")
    return r


def full_plan(h: Path) -> MountPlan:
    entries: list[PlanEntry] = [
        Tmpfs("/proc/driver/nvidia", 0o555, RO_PROC, "procfs view"),
        WriteFile("/proc/driver/nvidia/params", b"ModifyDeviceFiles: 0\n", 0o444, "procfs file"),
        WriteFile("/proc/driver/nvidia/version", b"NVRM version: 550\n", 0o444, "procfs file"),
        Bind(str(h / "proc/driver/nvidia/gpus/00000000:07:00.0"),
             "/proc/driver/nvidia/gpus/00000000:07:00.0", SourceKind.DIRECTORY, RO_PROC,
             "procfs gpu"),
        Tmpfs("/etc/nvidia/nvidia-application-profiles-rc.d", 0o555, RO_PROC,
              "application profiles"),
        WriteFile("/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf", b"{}",
                  0o555, "application profile"),
        Bind(str(h / "usr/bin/nvidia-smi"), "/usr/bin/nvidia-smi", SourceKind.FILE, RO_LIB,
             "binary", gate=C.UTILITY),
        Bind(str(h / f"usr/lib/libcuda.so.{VER}"), f"{LIB}/libcuda.so.{VER}", SourceKind.FILE,
             RO_LIB, "library", gate=C.COMPUTE),
        Bind(str(h / f"usr/lib/libnvidia-ml.so.{VER}"), f"{LIB}/libnvidia-ml.so.{VER}",
             SourceKind.FILE, RO_LIB, "library", gate=C.UTILITY),
        Symlink(f"{LIB}/libcuda.so", "libcuda.so.1", "special link"),
        Symlink(f"{LIB}/libcuda.so.1", f"libcuda.so.{VER}", "soname link"),
        Symlink(f"{LIB}/libnvidia-ml.so.1", f"libnvidia-ml.so.{VER}", "soname link"),
        Bind(str(h / "run/nvidia-persistenced/socket"), "/run/nvidia-persistenced/socket",
             SourceKind.SOCKET, RO_IPC, "ipc"),
        Bind(str(h / "dev/nvidia0"), "/dev/nvidia0", SourceKind.DEVICE, RO_DEV, "gpu device",
             rdev=(1, 3)),
    ]
    return MountPlan(tuple(entries), (), (LIB,), LIB, "/usr/lib/i386-linux-gnu", "/usr/bin",
                     C.all(), ("GPU-0",), ())


def _proc_driver_tmpfs(r: Path, libc: Libc) -> None:
    """What the simulation's prestart step does: a tmpfs on the container's /proc/driver."""
    (r / "proc/driver").mkdir(parents=True, exist_ok=True)
    libc.mount("tmpfs", str(r / "proc/driver"), "tmpfs", 0, "mode=0755")


def _apply(h: Path, r: Path, plan: MountPlan, faults: Faults | None = None) -> Journal:
    libc = Libc()
    journal = Journal()
    procfs = ProcFs.open(libc)
    sources = clone_sources(plan, libc, faults)
    root = Root.open(str(r), libc, procfs=procfs)
    apply_plan(plan, root, sources, journal, libc, procfs=procfs, owner=OWNER, faults=faults)
    return journal


# -- success, then rollback ---------------------------------------------------------------
def _apply_check_rollback(top: Path) -> dict[str, object]:
    h, r = make_host(top), make_rootfs(top)
    libc = Libc()
    _proc_driver_tmpfs(r, libc)
    before = snapshot(str(r))
    journal = _apply(h, r, full_plan(h))
    seen: dict[str, object] = {}
    mi = {line.split()[3]: line.split()[4] for line in mountinfo()}
    seen["lib_opts"] = mi.get(f"{r}{LIB}/libcuda.so.{VER}")
    seen["dev_opts"] = mi.get(f"{r}/dev/nvidia0")
    seen["ipc_opts"] = mi.get(f"{r}/run/nvidia-persistenced/socket")
    seen["proc_opts"] = mi.get(f"{r}/proc/driver/nvidia")
    seen["params"] = (r / "proc/driver/nvidia/params").read_bytes()
    seen["gpu_info"] = (r / "proc/driver/nvidia/gpus/00000000:07:00.0/information").read_text()
    seen["lib"] = (r / f"{LIB.lstrip('/')}/libcuda.so").read_bytes()
    seen["link"] = os.readlink(r / f"{LIB.lstrip('/')}/libcuda.so.1")
    seen["link_owner"] = os.lstat(r / f"{LIB.lstrip('/')}/libcuda.so.1").st_uid
    seen["mountpoint_owner"] = os.stat(r / "etc/nvidia").st_uid
    try:
        (r / "proc/driver/nvidia/extra").write_text("x")
        seen["proc_writable"] = True
    except OSError as err:
        seen["proc_writable"] = err.errno
    seen["profile"] = (r / "etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"
                       ).read_bytes()
    seen["steps"] = len(journal)
    failures = journal.rollback()
    seen["failures"] = failures
    seen["restored"] = snapshot(str(r)) == before
    return seen


def test_apply_then_rollback(tmp_path: Path) -> None:
    seen = in_private_ns(_apply_check_rollback, tmp_path)
    assert seen["lib_opts"] is not None and {"ro", "nosuid", "nodev"} <= set(
        str(seen["lib_opts"]).split(","))
    dev = set(str(seen["dev_opts"]).split(","))
    assert {"ro", "nosuid", "noexec"} <= dev and "nodev" not in dev
    ipc = set(str(seen["ipc_opts"]).split(","))
    assert {"ro", "nosuid", "nodev", "noexec"} <= ipc  # read-only: issue 8
    assert {"ro", "nosuid", "nodev", "noexec"} <= set(str(seen["proc_opts"]).split(","))
    assert seen["params"] == b"ModifyDeviceFiles: 0\n"
    assert seen["gpu_info"] == "Model: sim\n"
    assert seen["lib"] == b"\x7fELF cuda"
    assert seen["link"] == f"libcuda.so.{VER}"
    assert seen["link_owner"] == OWNER[0]
    assert seen["mountpoint_owner"] == OWNER[0]
    assert seen["proc_writable"] == 30  # EROFS: sealed after it was filled
    assert seen["profile"] == b"{}"
    assert seen["failures"] == ()
    assert seen["restored"] is True


# -- every step fails once ----------------------------------------------------------------
def _record_steps(top: Path) -> list[str]:
    h, r = make_host(top), make_rootfs(top)
    _proc_driver_tmpfs(r, Libc())
    faults = Faults()
    _apply(h, r, full_plan(h), faults).rollback()
    return faults.steps


def _fail_at(top: Path, step: str, nth: int) -> dict[str, object]:
    h, r = make_host(top), make_rootfs(top)
    _proc_driver_tmpfs(r, Libc())
    before = snapshot(str(r))
    fds_before = sorted(os.listdir("/proc/self/fd"))
    try:
        _apply(h, r, full_plan(h), Faults(step, nth))
    except NvmountError as err:
        error = str(err)
    else:
        error = ""
    return {"error": error, "restored": snapshot(str(r)) == before,
            "fds": sorted(os.listdir("/proc/self/fd")) == fds_before}


def test_a_fault_at_every_step_leaves_nothing_behind(tmp_path: Path) -> None:
    steps = in_private_ns(_record_steps, tmp_path / "record")
    assert len(steps) >= 30
    assert steps[0].startswith("open source procfs gpu ")
    assert any(s.startswith("seal procfs view /proc/driver/nvidia") for s in steps)
    for i, recorded in enumerate(steps):
        nth = steps[: i + 1].count(recorded)
        step = recorded.replace(str(tmp_path / "record"), str(tmp_path / f"s{i}"))
        seen = in_private_ns(_fail_at, tmp_path / f"s{i}", step, nth)
        assert seen["error"], f"no error for step {step!r}"
        # the error names the step: its first words are the step, or the mount it belongs to
        words = " ".join(step.split()[:2])
        assert words in str(seen["error"]) or step.startswith("mountpoint "), (step, seen)
        assert "injected fault" in str(seen["error"])
        assert seen["restored"], f"fault at {step!r} left changes behind"


def test_error_names_the_mount_step(tmp_path: Path) -> None:
    def run(top: Path) -> str:
        h, r = make_host(top), make_rootfs(top)
        _proc_driver_tmpfs(r, Libc())
        step = f"mount library {h}/usr/lib/libcuda.so.{VER} -> {LIB}/libcuda.so.{VER} " \
               "(ro,nosuid,nodev)"
        try:
            _apply(h, r, full_plan(h), Faults(step))
        except MountError as err:
            return str(err)
        return ""

    error = in_private_ns(run, tmp_path)
    assert error.startswith(f"mount library {tmp_path}/drv/usr/lib/libcuda.so.{VER} -> "
                            f"{LIB}/libcuda.so.{VER} (ro,nosuid,nodev): injected fault")


# -- real failures ------------------------------------------------------------------------
def _real_failure(top: Path) -> dict[str, object]:
    """/usr/bin is a regular file in the image: the binary's mountpoint cannot be made."""
    h, r = make_host(top), make_rootfs(top)
    _proc_driver_tmpfs(r, Libc())
    (r / "usr/bin").rmdir()
    (r / "usr/bin").write_text("not a dir")
    before = snapshot(str(r))
    try:
        _apply(h, r, full_plan(h))
    except NvmountError as err:
        return {"error": str(err), "restored": snapshot(str(r)) == before}
    return {"error": "", "restored": False}


def test_real_failure_rolls_back_and_names_the_step(tmp_path: Path) -> None:
    seen = in_private_ns(_real_failure, tmp_path)
    assert str(seen["error"]).startswith(f"mount binary {tmp_path}/drv/usr/bin/nvidia-smi -> "
                                         "/usr/bin/nvidia-smi (ro,nosuid,nodev): ")
    assert seen["restored"]


def _symlink_source(top: Path) -> str:
    h = make_host(top)
    os.symlink("/etc/passwd", h / "usr/lib/evil.so")
    plan = MountPlan((Bind(str(h / "usr/lib/evil.so"), f"{LIB}/evil.so", SourceKind.FILE,
                           RO_LIB, "library"),), (), (), LIB, "", "/usr/bin", C(0), (), ())
    try:
        clone_sources(plan, Libc())
    except MountError as err:
        return str(err)
    return ""


def test_symlink_source_is_refused(tmp_path: Path) -> None:
    error = in_private_ns(_symlink_source, tmp_path)
    assert error.startswith(f"open source library {tmp_path}/drv/usr/lib/evil.so: ")


# -- /proc/driver/nvidia with and without a directory ---------------------------------------
def _procfs_case(top: Path, case: str) -> dict[str, object]:
    h, r = make_host(top), make_rootfs(top)
    libc = Libc()
    if case == "real-procfs":
        libc.mount("proc", str(r / "proc"), "proc", 0)
    elif case in ("tmpfs-driver", "tmpfs-with-nvidia"):
        _proc_driver_tmpfs(r, libc)
        if case == "tmpfs-with-nvidia":
            (r / "proc/driver/nvidia").mkdir()
            (r / "proc/driver/nvidia/hidden").write_text("image")
    before = snapshot(str(r))
    plan = MountPlan(full_plan(h).entries[:4], (), (), LIB, "", "/usr/bin", C(0), (), ())
    try:
        journal = _apply(h, r, plan)
    except NvmountError as err:
        return {"error": str(err), "restored": snapshot(str(r)) == before}
    listed = sorted(os.listdir(r / "proc/driver/nvidia"))
    journal.rollback()
    return {"error": "", "listed": listed, "restored": snapshot(str(r)) == before}


@pytest.mark.parametrize(("case", "error"), [
    ("real-procfs", "the container's /proc has no driver/nvidia (is the NVIDIA kernel module "
                    "loaded?)"),
    ("tmpfs-driver", ""),
    ("tmpfs-with-nvidia", ""),
    ("plain-dir", ""),
], ids=["real-procfs-without-module", "sim-tmpfs", "sim-tmpfs-dir-present", "plain-dir"])
def test_proc_driver_nvidia(tmp_path: Path, case: str, error: str) -> None:
    if case == "real-procfs" and os.path.exists("/proc/driver/nvidia"):
        pytest.skip("the NVIDIA kernel module is loaded here")
    seen = in_private_ns(_procfs_case, tmp_path, case)
    if error:
        assert error in str(seen["error"])
        assert str(seen["error"]).startswith("mount procfs view tmpfs -> /proc/driver/nvidia")
    else:
        assert seen["error"] == ""
        assert seen["listed"] == ["gpus", "params", "version"]  # image content hidden
    assert seen["restored"]
