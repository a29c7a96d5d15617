"""nvmount.pipeline against a real "container": a process in its own mount namespace whose
rootfs is a temp glibc tree, with /proc mounted, the simulation's /proc/driver tmpfs and a
v1 devices cgroup; the driver is the simulated one.

The fault sweep arms a fault at every step of a full configure (NVML init, every source
clone, mountpoint, mount, file, link, tmpfs seal, cgroup write, ldconfig) and checks that
the container's mountinfo, its rootfs listing, its ld.so.cache and its device cgroup are
exactly as before, that no fd leaked, and that the error names the step.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvhook.dev.demo.rootfs import RootfsFlavor, copy_rootfs
from nvhook.dev.sim import SimRoot
from nvhook.dev.sim.prestart import mount_proc_driver
from nvmount._libc import Libc
from nvmount.capabilities import DriverCapability as C
from nvmount.container.dryrun import open_rootfs_readonly
from nvmount.errors import NvmountError, RequirementError
from nvmount.faults import Faults
from nvmount.pipeline import configure_container, plan_only
from nvmount.plan.types import Bind
from nvmount.requests import EngineOptions, EngineRequest
from tests.fixtures.cgroup import devices_list, require_v1_devices, v1_cgroup
from tests.fixtures.containers import RootfsCache, relevant_mount_marks

pytestmark = pytest.mark.root

LIB = "/usr/lib/x86_64-linux-gnu"
FULL_CAPS = C.UTILITY | C.COMPUTE | C.VIDEO | C.GRAPHICS | C.DISPLAY


@dataclass
class Target:
    pid: int
    rootfs: str
    cgroup: str

    def view(self, path: str) -> str:
        """Host path of a container path, through the container's mount namespace."""
        return f"/proc/{self.pid}/root{self.rootfs}{path}"


@contextmanager
def container(rootfs: Path, cgroup: str, *, nvidia_dir: bool = False,
              sim_step: bool = True) -> Iterator[Target]:
    """A sleeping process in its own mount namespace with <rootfs>/proc mounted, the
    simulation's tmpfs on <rootfs>/proc/driver (unless not `sim_step`), inside `cgroup`."""
    script = f"mount -t proc proc {rootfs}/proc && exec sleep 600"
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
    try:
        deadline = time.monotonic() + 10
        while not os.readlink(f"/proc/{proc.pid}/exe").endswith("/sleep"):
            assert time.monotonic() < deadline, "the container process did not start"
            time.sleep(0.01)
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(proc.pid))
        if sim_step:
            mount_proc_driver(proc.pid, str(rootfs), with_nvidia_dir=nvidia_dir)
        yield Target(proc.pid, str(rootfs), cgroup)
    finally:
        proc.kill()
        proc.wait()


def listing(top: str) -> list[tuple[str, int, int, int]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top and "proc" in dirnames:
            dirnames.remove("proc")  # procfs; /proc/driver/nvidia is compared via mountinfo
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            size = 0 if stat.S_ISDIR(st.st_mode) else st.st_size  # dirs keep grown blocks
            out.append((p[len(top):], st.st_mode, st.st_uid, size))
    return sorted(out)


def snapshot(t: Target) -> dict[str, object]:
    """The container's state; of its mount table only what could be ours (under its rootfs,
    or the session's or the driver's marks): another session removing a directory it had
    mounted detaches that mount here too (a busy host)."""
    with open(f"/proc/{t.pid}/mountinfo") as f:
        mounts = sorted(line for line in f.read().splitlines()
                        if line.split()[4].startswith(t.rootfs)
                        or any(mark in line for mark in relevant_mount_marks()))
    cache = Path(t.view("/etc/ld.so.cache"))
    return {
        "mountinfo": mounts,
        "files": listing(t.view("")),
        "ldcache": hashlib.sha256(cache.read_bytes()).hexdigest() if cache.exists() else "",
        "cgroup": sorted(devices_list(t.cgroup)),
        "proc_driver": sorted(os.listdir(t.view("/proc/driver"))),
    }


def snapshot_diff(before: dict[str, object], after: dict[str, object]) -> dict[str, object]:
    """What differs between two snapshots: per key, the items only before / only after."""
    out: dict[str, object] = {}
    for key in before:
        if before[key] != after[key]:
            old, new = before[key], after[key]
            if isinstance(old, list) and isinstance(new, list):
                was, now = set(map(str, old)), set(map(str, new))
                out[key] = {"-": sorted(was - now), "+": sorted(now - was)}
            else:
                out[key] = {"-": old, "+": new}
    return out


def options(sim: SimRoot, **changes: object) -> EngineOptions:
    base: dict[str, object] = {"root": sim.path, "proc_root": sim.proc_root,
                               "ldconfig_required": True}
    base.update(changes)
    return EngineOptions(**base)  # type: ignore[arg-type]


@pytest.fixture
def rootfs(rootfs_cache: RootfsCache, tmp_path: Path) -> Path:
    return copy_rootfs(rootfs_cache.get(RootfsFlavor.GLIBC), tmp_path / "rootfs")


@pytest.fixture
def cgroup() -> Iterator[str]:
    require_v1_devices()
    with v1_cgroup(deny_all=True) as path:
        yield path


# -- success ------------------------------------------------------------------------------
def test_configure_a_running_container(sim_root: SimRoot, rootfs: Path, cgroup: str) -> None:
    with container(rootfs, cgroup) as t:
        result = configure_container(
            EngineRequest(devices=("1",), capabilities=C.UTILITY | C.COMPUTE), t.pid, t.rootfs,
            options(sim_root), Libc())
        assert result.ldconfig is None and result.ldcache.startswith("wrote /etc/ld.so.cache")
        assert Path(t.view(f"{LIB}/libcuda.so.550.54.15")).read_bytes().startswith(b"\x7fELF")
        assert os.readlink(t.view(f"{LIB}/libcuda.so.1")) == "libcuda.so.550.54.15"
        assert os.readlink(t.view(f"{LIB}/libcuda.so")) == "libcuda.so.1"
        params = Path(t.view("/proc/driver/nvidia/params")).read_text()
        assert "ModifyDeviceFiles: 0" in params
        assert os.path.exists(t.view("/dev/nvidia1"))
        assert not os.path.exists(t.view("/dev/nvidia0"))
        rules = devices_list(cgroup)
        assert "c 195:1 rw" in rules and "c 195:255 rw" in rules
        assert "c 195:0 rw" not in rules
        assert not any("*" in r for r in rules)
        ldcache = subprocess.run(["/sbin/ldconfig", "-p", "-C", t.view("/etc/ld.so.cache")],
                                 capture_output=True, text=True, check=True).stdout
        assert "libcuda.so.1 (libc6,x86-64)" in ldcache
        smi = subprocess.run(["nsenter", "-t", str(t.pid), "-m", "chroot", t.rootfs,
                              "/usr/bin/nvidia-smi", "-L"], capture_output=True, text=True)
        assert smi.returncode == 0, smi.stderr
        assert smi.stdout.count("GPU ") == 1
        assert set(result.timings_ms) >= {"inventory", "plan", "mounts", "cgroup", "ldcache"}


def test_timing_record(sim_root: SimRoot, rootfs: Path, cgroup: str, tmp_path: Path) -> None:
    import json

    log = tmp_path / "timing.jsonl"
    with container(rootfs, cgroup) as t:
        configure_container(EngineRequest(devices=("all",), capabilities=C.UTILITY), t.pid,
                            t.rootfs, options(sim_root, timing_log=str(log), container_id="c1"),
                            Libc())
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["container"] == "c1" and record["pid"] == t.pid
    assert set(record["phases_ms"]) >= {"inventory", "plan", "mounts", "ldcache", "cgroup"}
    assert record["gpus"] == 8 and record["device_rules"] == 9
    assert record["peak_rss_kb"] > 0 and record["total_ms"] > 0


def test_requirement_failure_changes_nothing(sim_root: SimRoot, rootfs: Path,
                                             cgroup: str) -> None:
    with container(rootfs, cgroup) as t:
        before = snapshot(t)
        with pytest.raises(RequirementError, match=r"^requirement cuda>=99"):
            configure_container(EngineRequest(devices=("0",), capabilities=C.COMPUTE,
                                              requirements=("cuda>=99",)),
                                t.pid, t.rootfs, options(sim_root), Libc())
        assert snapshot(t) == before, snapshot_diff(before, snapshot(t))


@pytest.mark.parametrize("required", [False, True], ids=["warning", "required"])
def test_ldconfig_failure(sim_root: SimRoot, rootfs: Path, cgroup: str,
                          required: bool) -> None:
    from nvmount.errors import LdcacheError

    opts = options(sim_root, ldconfig="@/nonexistent/ldconfig", ldconfig_required=required,
                   ldcache_mode="ldconfig")
    with container(rootfs, cgroup) as t:
        before = snapshot(t)
        request = EngineRequest(devices=("0",), capabilities=C.UTILITY)
        if required:
            with pytest.raises(LdcacheError, match=r"^run ldconfig: host /nonexistent/ldconfig"):
                configure_container(request, t.pid, t.rootfs, opts, Libc())
            assert snapshot(t) == before, snapshot_diff(before, snapshot(t))
        else:
            result = configure_container(request, t.pid, t.rootfs, opts, Libc())
            assert result.ldconfig is not None and not result.ldconfig.ok
            assert any("/nonexistent/ldconfig" in w for w in result.warnings)
            assert os.path.exists(t.view("/usr/bin/nvidia-smi"))
            assert "c 195:0 rw" in devices_list(cgroup)


def _proc_driver_mounts(t: Target) -> list[str]:
    with open(f"/proc/{t.pid}/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(
            f"{t.rootfs}/proc/driver")]


@pytest.mark.parametrize("sim_step", [False, True], ids=["no-step", "after-the-sim-step"])
def test_sim_procfs_stands_in_for_the_kernel_module(sim_root: SimRoot, rootfs: Path,
                                                   cgroup: str, sim_step: bool) -> None:
    """`sim-procfs`: the engine mounts the tmpfs on /proc/driver itself, once."""
    with container(rootfs, cgroup, sim_step=sim_step) as t:
        configure_container(EngineRequest(devices=("2",), capabilities=C.UTILITY), t.pid,
                            t.rootfs, options(sim_root, sim_procfs=True), Libc())
        mounts = _proc_driver_mounts(t)
        assert {f"{t.rootfs}/proc/driver", f"{t.rootfs}/proc/driver/nvidia"} <= set(mounts)
        assert mounts.count(f"{t.rootfs}/proc/driver") == 1
        assert os.listdir(t.view("/proc/driver/nvidia/gpus")) == [sim_root.gpus[2].proc_bus_id]


@pytest.mark.parametrize("fault", ["mount sim procfs", "mount procfs view", "cgroup allow"])
def test_sim_procfs_is_rolled_back(sim_root: SimRoot, rootfs: Path, cgroup: str,
                                   fault: str) -> None:
    with container(rootfs, cgroup, sim_step=False) as t:
        before = snapshot(t)
        with pytest.raises(NvmountError):
            configure_container(EngineRequest(devices=("0",), capabilities=C.UTILITY), t.pid,
                                t.rootfs, options(sim_root, sim_procfs=True), Libc(),
                                faults=Faults(fault))
        assert snapshot(t) == before, snapshot_diff(before, snapshot(t))
        assert _proc_driver_mounts(t) == []


# -- every step fails once ----------------------------------------------------------------
def _sweep(sim: SimRoot, rootfs: Path, cgroup: str, request: EngineRequest,
           nvidia_dir: bool, mode: str = "write") -> int:
    with container(rootfs, cgroup, nvidia_dir=nvidia_dir) as t:
        before = snapshot(t)
        # record the steps on a throwaway copy (a successful run changes the rootfs)
        recorder = Faults()
        spare = copy_rootfs(rootfs, rootfs.parent / "spare")
        with v1_cgroup(deny_all=True) as spare_cg, container(spare, spare_cg,
                                                             nvidia_dir=nvidia_dir) as s:
            configure_container(request, s.pid, s.rootfs, options(sim, ldcache_mode=mode),
                                Libc(), faults=recorder)
        steps = [step.replace(str(spare), str(rootfs)) for step in recorder.steps]
        last = "write ld.so.cache" if mode == "write" else "ldconfig"
        assert steps[0] == "nvml init" and steps[-1] == last
        assert any(step.startswith("cgroup allow c ") for step in steps)
        fds = sorted(os.listdir("/proc/self/fd"))
        for i, step in enumerate(steps):
            nth = steps[: i + 1].count(step)
            with pytest.raises(NvmountError) as info:
                configure_container(request, t.pid, t.rootfs, options(sim, ldcache_mode=mode),
                                    Libc(), faults=Faults(step, nth))
            message = str(info.value)
            assert "injected fault" in message, (step, message)
            if not step.startswith(("mountpoint ", "nvml ")):
                assert step.split(" (")[0] in message or step in message, (step, message)
            after = snapshot(t)
            if after != before:
                raise AssertionError(f"a fault at {step!r} left changes behind: "
                                     f"{snapshot_diff(before, after)}")
            assert sorted(os.listdir("/proc/self/fd")) == fds, f"fd leak at {step!r}"
        # and the container is still fine to configure
        configure_container(request, t.pid, t.rootfs, options(sim), Libc())
        assert os.path.exists(t.view("/proc/driver/nvidia/params"))
        return len(steps)


@pytest.mark.parametrize("mode", ["write", "ldconfig"])
def test_a_fault_at_every_step_leaves_nothing_behind(sim_mig_root: SimRoot, rootfs: Path,
                                                     cgroup: str, mode: str) -> None:
    """A MIG device of GPU 0 (its parent comes along), graphics and display included; the
    ld.so.cache written by the hook and by ldconfig."""
    request = EngineRequest(devices=("0:3",), capabilities=FULL_CAPS, imex_channels=(0,))
    count = _sweep(sim_mig_root, rootfs, cgroup, request, nvidia_dir=False, mode=mode)
    assert count > 150


@pytest.mark.slow
def test_a_fault_at_every_step_all_gpus_all_caps(sim_root: SimRoot, rootfs: Path,
                                                 cgroup: str) -> None:
    if os.environ.get("NVHOOK_LONG") != "1":
        pytest.skip("long variant: set NVHOOK_LONG=1")
    request = EngineRequest(devices=("all",), capabilities=C.all())
    assert _sweep(sim_root, rootfs, cgroup, request, nvidia_dir=True) > 300


# -- dry run ------------------------------------------------------------------------------
def _plan_as_nobody(sim: SimRoot, rootfs: str) -> tuple[int, int, list[str]]:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)  # no capabilities, no root
    plan = plan_only(EngineRequest(devices=("all",), capabilities=C.UTILITY | C.COMPUTE), rootfs,
                     options(sim), Libc())
    assert plan is not None
    return len(plan.entries), plan.count(Bind), [f"{r.major}:{r.minor}" for r in
                                                   plan.device_rules]


def test_plan_only_needs_no_privileges(rootfs_cache: RootfsCache) -> None:
    import shutil
    import tempfile

    from nvhook.dev.sim import SimSpec, create_sim_root
    from tests.fixtures.privns import in_private_ns

    top = Path(tempfile.mkdtemp(prefix="nvhook-dry-"))
    try:
        top.chmod(0o755)  # readable by nobody, unlike pytest's temp dirs
        sim = create_sim_root(top / "sim", SimSpec(gpus=8, ipc=True))
        rootfs = copy_rootfs(rootfs_cache.get(RootfsFlavor.GLIBC), top / "rootfs")
        before = listing(str(rootfs))
        entries, binds, rules = in_private_ns(_plan_as_nobody, sim, str(rootfs))
        assert entries == 60 and binds == 46  # 8 GPUs, utility+compute, IPC on
        assert rules[0] == "195:255" and len(rules) == 11
        assert listing(str(rootfs)) == before
    finally:
        shutil.rmtree(top)


@pytest.mark.parametrize(("request_", "reads"), [
    (EngineRequest(devices=("all",)), False),
    (EngineRequest(devices=("0:3",)), False),  # a MIG device has its own access files and caps
    (EngineRequest(devices=("0",), mig_config="all"), True),
    (EngineRequest(devices=("0",), mig_monitor="all"), True),
], ids=["gpus", "mig-device", "mig-config", "mig-monitor"])
def test_mig_minors_are_read_only_for_mig_config_or_monitor(
        sim_mig_root: SimRoot, rootfs: Path, request_: EngineRequest, reads: bool) -> None:
    """Skipping the ~4300-line minors file must not change any plan: with and without it."""
    from nvmount import pipeline

    opts = options(sim_mig_root)
    assert pipeline.needs_mig_minors(request_) is reads
    plan = plan_only(request_, str(rootfs), opts, Libc())
    full = pipeline.discover(opts, Faults(), mig_minors=True)
    assert full.mig_minors
    with open_rootfs_readonly(str(rootfs), Libc()) as root:
        reference = pipeline.make_plan(full, pipeline.select_and_check(full, request_), request_,
                                     root, opts)
    assert plan is not None and plan.device_rules == reference.device_rules
    assert plan.entries == reference.entries


def test_plan_only_without_a_driver(rootfs: Path, tmp_path: Path) -> None:
    assert plan_only(EngineRequest(devices=("all",)), str(rootfs),
                     EngineOptions(root=str(tmp_path)), Libc()) is None


# -- the hook bridge ----------------------------------------------------------------------
def _config(sim: SimRoot) -> object:
    from nvhook.config.load import load_config

    return load_config(sim.config_path, {}, cwd="/")


def test_run_engine_dry_run_document(sim_root: SimRoot, rootfs: Path) -> None:
    from nvhook.hook.mount import run_engine
    from nvhook.hook.request import ContainerRef, ContainerRequest

    request = ContainerRequest(devices=("0", "2"), mig_config_devices=(),
                               mig_monitor_devices=(), imex_channels=("0",),
                               driver_capabilities=C.UTILITY | C.COMPUTE | C.GRAPHICS,
                               requirements=("cuda>=12.0",), disable_require=False)
    ref = ContainerRef(pid=0, bundle=str(rootfs.parent), rootfs=str(rootfs))
    doc = run_engine(request, ref, _config(sim_root), dry_run=True, debug=False)  # type: ignore[arg-type]
    assert doc is not None
    assert doc["driver"] == {"version": "550.54.15", "cuda_version": "12.4",
                             "root": sim_root.path}
    assert doc["devices"] == [g.uuid for g in sim_root.gpus if g.index in (0, 2)]
    entries = doc["entries"]
    assert isinstance(entries, list)
    ops = {e["op"] for e in entries}
    assert ops == {"tmpfs", "file", "bind", "symlink"}
    cuda = next(e for e in entries if e["target"] == f"{LIB}/libcuda.so.550.54.15")
    assert cuda == {"op": "bind", "source": f"{sim_root.path}{LIB}/libcuda.so.550.54.15",
                    "target": f"{LIB}/libcuda.so.550.54.15", "flags": "ro,nosuid,nodev",
                    "what": "library"}
    link = next(e for e in entries if e["target"] == f"{LIB}/libcuda.so.1")
    assert link == {"op": "symlink", "target": f"{LIB}/libcuda.so.1",
                    "link": "libcuda.so.550.54.15", "flags": "", "what": "soname link"}
    assert doc["device_rules"][:2] == ["c 195:255 rw", "c 506:0 rw"]  # type: ignore[index]
    assert "c 195:0 rw" in doc["device_rules"]  # type: ignore[operator]
    assert "c 195:1 rw" not in doc["device_rules"]  # type: ignore[operator]
    assert doc["ldconfig_dirs"] == [LIB, "/usr/lib/i386-linux-gnu"]
    by_cap = doc["files_by_capability"]
    assert isinstance(by_cap, dict)
    assert set(by_cap) == {"always", "utility", "compute", "video", "graphics", "display"}
    assert f"{sim_root.path}/usr/bin/nvidia-smi" in by_cap["utility"]
    import json

    json.dumps(doc)  # JSON-ready


@pytest.mark.parametrize(("mode", "allow", "expected"), [
    ("ldconfig", False, "ldconfig"), ("mount", False, "mount"), ("disabled", False, "disabled"),
    ("hook", False, "disabled"), ("", False, "disabled"), ("bogus", True, "mount"),
], ids=["ldconfig", "mount", "disabled", "hook", "empty", "other-with-opt-in"])
def test_compat_mode_mapping(mode: str, allow: bool, expected: str) -> None:
    from nvhook.config.model import FeaturesConfig, HookConfig, RuntimeConfig
    from nvhook.hook.mount import compat_mode

    config = HookConfig(runtime=RuntimeConfig(modes_legacy_cuda_compat_mode=mode),
                        features=FeaturesConfig(allow_cuda_compat_libs_from_container=allow))
    assert compat_mode(config) == expected


@pytest.mark.parametrize(("value", "ok"), [("0", True), ("1048575", True), ("1048576", False),
                                           ("-1", False), ("x", False), ("٣", False)],
                         ids=["zero", "max", "too-big", "negative", "word", "non-ascii-digit"])
def test_imex_channel_values(value: str, ok: bool) -> None:
    from nvhook.hook.mount import imex_channel
    from nvmount.errors import SelectionError

    if ok:
        assert imex_channel(value) == int(value)
    else:
        with pytest.raises(SelectionError, match=r"^unsupported IMEX channel value: "):
            imex_channel(value)


def test_engine_options_from_config(sim_root: SimRoot) -> None:
    from nvhook.hook.mount import engine_options
    from nvhook.hook.request import ContainerRef

    opts = engine_options(_config(sim_root), ContainerRef(1, "/b/ctr-1/", "/b/ctr-1/rootfs"),  # type: ignore[arg-type]
                          limit_privileges=True)
    assert (opts.root, opts.ldcache, opts.proc_root) == (sim_root.path, "/etc/ld.so.cache",
                                                         sim_root.proc_root)
    assert opts.ldconfig.startswith("@/sbin/ldconfig")
    assert opts.container_id == "ctr-1" and opts.limit_privileges
