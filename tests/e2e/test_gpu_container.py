"""Real runc containers against the simulated 8-GPU driver, checked from inside.

Each container runs the sim's prestart step (tmpfs on /proc/driver) and then our installed hook
launcher (`nvhook install`, /usr/bin/python3 -IS). PROBE_SCRIPT reports mounts, /dev nodes,
library dirs, ldconfig -p, the procfs view and `nvidia-smi -L`; probes are cached per
(environment, rootfs flavour) for the module, so each scenario starts one container.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nvhook.demo_bundle import Runc, container_cgroup_dirs
from nvhook.demo_driver import nvhook_hook_entry, sim_prestart_entry
from nvhook.demo_rootfs import RootfsFlavor
from nvmount.sim import SimRoot
from tests.e2e.expected import (
    ALL_CAPS,
    Expected,
    canonical,
    expected_exposure,
    parse_caps,
    selected_gpus,
)
from tests.fixtures.containers import (
    CGROUP2_RUNC,
    ContainerFactory,
    HostSnapshot,
    Probe,
    RootfsCache,
    created_container,
    probe,
)

pytestmark = [pytest.mark.e2e, pytest.mark.root]

GLIBC, MUSL, NONDEB = RootfsFlavor.GLIBC, RootfsFlavor.MUSL_LIKE, RootfsFlavor.NON_DEBIAN
LIBS32 = {GLIBC: "/usr/lib/i386-linux-gnu", MUSL: "/usr/lib/i386-linux-gnu", NONDEB: "/usr/lib"}
OPEN_SCRIPT = """
for m in 0 1 2 3 4 5 6 7 255; do
  mknod /dev/probe$m c 195 $m || exit 3
  msg=$( (exec 3<>/dev/probe$m) 2>&1 ); echo "mknod $m: ${msg:-opened}"
done
for n in /dev/nvidia*; do msg=$( (exec 3<>$n) 2>&1 ); echo "node $n: ${msg:-opened}"; done
"""
ENXIO, EPERM = "No such device or address", "Operation not permitted"


@dataclass
class GpuRig:
    """The simulated driver, the installed hook and a container factory that uses both."""

    sim: SimRoot
    launcher: Path
    config: Path
    containers: ContainerFactory
    baseline: ContainerFactory  # same containers with the sim step but without nvhook
    probes: dict[tuple[tuple[str, ...], RootfsFlavor], Probe] = field(default_factory=dict)

    def probe(self, env: tuple[str, ...] = (), flavor: RootfsFlavor = GLIBC) -> Probe:
        key = (env, flavor)
        if key not in self.probes:
            self.probes[key] = probe(self.containers, env=env, flavor=flavor)
        return self.probes[key]

    def baseline_targets(self, flavor: RootfsFlavor = GLIBC) -> set[str]:
        key = (("<baseline>",), flavor)
        if key not in self.probes:
            self.probes[key] = probe(self.baseline, flavor=flavor)
        return self.probes[key].mount_targets()

    def new_targets(self, env: tuple[str, ...], flavor: RootfsFlavor = GLIBC) -> set[str]:
        return self.probe(env, flavor).mount_targets() - self.baseline_targets(flavor)

    def expected(self, visible: str, caps: str = "utility,compute",
                 flavor: RootfsFlavor = GLIBC) -> Expected:
        return expected_exposure(self.sim, parse_caps(caps), selected_gpus(self.sim, visible),
                                 libs_dir=flavor.libs_dir, libs32_dir=LIBS32[flavor])

    def dry_run(self, env: tuple[str, ...], flavor: RootfsFlavor = GLIBC) -> dict[str, object]:
        """The hook's `--dry-run` decision for a bundle with `env` (runs no container)."""
        bundle = self.containers.bundle(["/bin/true"], env=env, flavor=flavor)
        proc = subprocess.run(
            [str(self.launcher), "--config", str(self.config), "prestart", "--dry-run"],
            input=json.dumps({"pid": 0, "bundle": str(bundle)}), capture_output=True,
            text=True, cwd=bundle, check=False, timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        result: dict[str, object] = json.loads(proc.stdout)
        return result


def plan_targets(decision: dict[str, object]) -> set[str]:
    plan = decision.get("plan") or {}
    assert isinstance(plan, dict)
    return {canonical(e["target"]) for e in plan.get("entries", []) if e["op"] in ("bind", "tmpfs")}


@pytest.fixture(scope="module")
def gpu(tmp_path_factory: pytest.TempPathFactory, rootfs_cache: RootfsCache,
        runc_default: Runc, sim_root: SimRoot, hook_launcher: Path) -> GpuRig:
    config = Path(sim_root.config_path)
    step = sim_prestart_entry(config, hook_launcher)
    hook = nvhook_hook_entry(hook_launcher, config)
    work = tmp_path_factory.mktemp("gpu-e2e")
    return GpuRig(
        sim_root, hook_launcher, config,
        ContainerFactory(work / "gpu", rootfs_cache, runc_default, (step, hook), tag="gpu"),
        ContainerFactory(work / "base", rootfs_cache, runc_default, (step,), tag="gpu"),
    )


@pytest.fixture(autouse=True)
def host_unchanged(gpu: GpuRig) -> Iterator[None]:
    """Every test: the host mount table, our fds and the driver root stay as they were."""
    snap = HostSnapshot(watched=(Path(gpu.sim.path), gpu.launcher.parent))
    yield
    snap.assert_unchanged()


# ---- libraries, links, ldcache ------------------------------------------------------------------

def test_glibc_rootfs_gets_libraries_soname_links_and_ldcache(gpu: GpuRig) -> None:
    p = gpu.probe(("NVIDIA_VISIBLE_DEVICES=all",))
    exp = gpu.expected("all")
    assert exp.libs <= p.files()
    links = p.links()
    for link, target in exp.links.items():
        assert links.get(link) == target, f"{link}: {links.get(link)!r} != {target!r}"
    cache = "\n".join(p["ldconfig"])
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"):
        assert f"{soname} (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/{soname}" in cache
    assert p["smi"][-1] == "rc=0"


def test_musl_like_rootfs_resolves_through_soname_links(gpu: GpuRig) -> None:
    p = gpu.probe(("NVIDIA_VISIBLE_DEVICES=0",), MUSL)
    exp = gpu.expected("0", flavor=MUSL)
    assert exp.libs <= p.files()
    assert p.links()["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] == "libnvidia-ml.so.550.54.15"
    assert p["ldconfig"] == []  # no ldconfig in the image: nvidia-smi loads through the links
    assert p.smi_uuids() == [gpu.sim.gpus[0].uuid]


def test_non_debian_layout_uses_usr_lib64(gpu: GpuRig) -> None:
    p = gpu.probe(("NVIDIA_VISIBLE_DEVICES=1",), NONDEB)
    exp = gpu.expected("1", flavor=NONDEB)
    assert all(t.startswith("/usr/lib64/") for t in exp.libs)
    assert exp.libs <= p.files()
    assert not any("x86_64-linux-gnu" in t for t in gpu.new_targets(("NVIDIA_VISIBLE_DEVICES=1",),
                                                                   NONDEB))
    assert "libnvidia-ml.so.1 (libc6,x86-64) => /usr/lib64/libnvidia-ml.so.1" in "\n".join(
        p["ldconfig"])
    assert p.smi_uuids() == [gpu.sim.gpus[1].uuid]


# ---- GPU selection: nvidia-smi, /dev nodes, procfs ---------------------------------------------

SELECTIONS = ["all", "0", "0,3", "uuid:5", "7,2"]


def _visible(gpu: GpuRig, sel: str) -> str:
    return gpu.sim.gpus[int(sel[5:])].uuid if sel.startswith("uuid:") else sel


@pytest.mark.parametrize("sel", SELECTIONS)
def test_nvidia_smi_lists_exactly_the_selected_gpus(gpu: GpuRig, sel: str) -> None:
    visible = _visible(gpu, sel)
    p = gpu.probe((f"NVIDIA_VISIBLE_DEVICES={visible}",))
    want = sorted(g.uuid for g in selected_gpus(gpu.sim, visible))
    assert sorted(p.smi_uuids()) == want, p["smi"]


@pytest.mark.parametrize("sel", SELECTIONS)
def test_device_nodes_and_procfs_only_for_the_selected_gpus(gpu: GpuRig, sel: str) -> None:
    visible = _visible(gpu, sel)
    p = gpu.probe((f"NVIDIA_VISIBLE_DEVICES={visible}",))
    gpus = selected_gpus(gpu.sim, visible)
    assert set(p["dev"]) == set(gpu.expected(visible).devices)
    assert sorted(p["procgpus"]) == sorted(g.proc_bus_id for g in gpus)
    assert "ModifyDeviceFiles: 0" in p["params"]
    assert not any("ModifyDeviceFiles: 1" in line for line in p["params"])


@pytest.mark.parametrize("runc_kind", ["cgroup-v1", "cgroup-v2"])
def test_selected_gpu_opens_enxio_unselected_eperm(gpu: GpuRig, runc_kind: str) -> None:
    runc = CGROUP2_RUNC if runc_kind == "cgroup-v2" else None
    res = gpu.containers.sh(OPEN_SCRIPT, env=["NVIDIA_VISIBLE_DEVICES=0,3"], runc=runc)
    out = dict(line.split(": ", 1) for line in res.stdout.splitlines())
    for minor in (0, 3, 255):
        assert ENXIO in out[f"mknod {minor}"], res.stdout
    for minor in (1, 2, 4, 5, 6, 7):
        assert EPERM in out[f"mknod {minor}"], res.stdout
    for node in ("/dev/nvidia0", "/dev/nvidia3", "/dev/nvidiactl"):
        assert ENXIO in out[f"node {node}"], res.stdout
    assert container_cgroup_dirs(res.container_id) == []


# ---- mount options -------------------------------------------------------------------------------

def test_mount_options(gpu: GpuRig) -> None:
    p = gpu.probe(("NVIDIA_VISIBLE_DEVICES=all",))
    exp = gpu.expected("all")
    for target in exp.libs | exp.bins | exp.firmware:
        assert {"ro", "nosuid", "nodev"} <= p.mount(target).options, target
    for target in exp.devices:
        assert {"ro", "nosuid", "noexec"} <= p.mount(target).options, target
    for target in exp.proc:
        assert {"ro", "nosuid", "nodev", "noexec"} <= p.mount(target).options, target
    for target in exp.ipc:
        opts = p.mount(target).options
        assert {"nosuid", "nodev", "noexec"} <= opts and "rw" in opts, target
    assert p.mount("/proc/driver/nvidia").fstype == "tmpfs"


# ---- NVIDIA_VISIBLE_DEVICES none / void / unset, capability sets -------------------------------

@pytest.mark.parametrize(
    "env", [(), ("NVIDIA_VISIBLE_DEVICES=",), ("NVIDIA_VISIBLE_DEVICES=void",)],
    ids=["unset", "empty", "void"],
)
def test_no_gpu_container_gets_nothing(gpu: GpuRig, env: tuple[str, ...]) -> None:
    assert gpu.new_targets(env) == set()
    p = gpu.probe(env)
    assert p["dev"] == [] and p["procgpus"] == []
    assert gpu.dry_run(env)["gpu_container"] is False


def test_none_gets_driver_files_but_no_gpu(gpu: GpuRig) -> None:
    env = ("NVIDIA_VISIBLE_DEVICES=none",)
    exp = gpu.expected("none")
    assert gpu.new_targets(env) == exp.mount_targets()
    p = gpu.probe(env)
    assert set(p["dev"]) == {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    assert p.smi_uuids() == []


CAP_SETS = ["utility", "compute", "video", "graphics", "display", "compat32", "ngx",
            "compute,utility,compat32", "all"]


@pytest.mark.parametrize("caps", CAP_SETS)
def test_capability_set_exposes_exactly_its_files(gpu: GpuRig, caps: str) -> None:
    env = ("NVIDIA_VISIBLE_DEVICES=2", f"NVIDIA_DRIVER_CAPABILITIES={caps}")
    exp = gpu.expected("2", caps)
    got = gpu.new_targets(env)
    assert got == exp.mount_targets(), (
        f"unexpected: {sorted(got - exp.mount_targets())}\n"
        f"missing: {sorted(exp.mount_targets() - got)}")
    assert plan_targets(gpu.dry_run(env)) == got
    links = gpu.probe(env).links()
    for link, target in exp.links.items():
        assert links.get(link) == target, link


def test_all_capabilities_is_the_union(gpu: GpuRig) -> None:
    assert parse_caps("all") == frozenset(ALL_CAPS)


# ---- requirements --------------------------------------------------------------------------------

def test_unmet_cuda_requirement_stops_the_container(gpu: GpuRig) -> None:
    res = gpu.containers.sh("echo started", check=False,
                            env=["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99.0"])
    assert res.returncode != 0
    assert "started" not in res.stdout
    assert "error running hook" in res.stderr
    assert "requirement" in res.stderr and "cuda>=99.0" in res.stderr, res.stderr
    assert container_cgroup_dirs(res.container_id) == []


def test_met_cuda_requirement_starts(gpu: GpuRig) -> None:
    res = gpu.containers.sh("nvidia-smi -L",
                            env=["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0"])
    assert gpu.sim.gpus[0].uuid in res.stdout


# ---- the hook run by hand against a paused container -------------------------------------------

def test_manual_prestart_against_created_container(gpu: GpuRig, runc_default: Runc) -> None:
    """`runc create` (only the sim step as hook), `nvhook prestart` by hand, `runc start`."""
    bundle = gpu.baseline.bundle(["/bin/sh", "-c", "nvidia-smi -L; ls /dev"],
                                 env=["NVIDIA_VISIBLE_DEVICES=4"])
    with created_container(bundle, runc_default, tag="manual") as ctr:
        hook = subprocess.run(
            [str(gpu.launcher), "--config", str(gpu.config), "prestart"],
            input=json.dumps({"pid": ctr.pid, "bundle": str(bundle)}),
            capture_output=True, text=True, cwd=bundle, check=False, timeout=60,
        )
        assert hook.returncode == 0, hook.stderr
        out, err = ctr.start_and_wait()
    assert gpu.sim.gpus[4].uuid in out, out + err
    assert "nvidia4" in out.split() and "nvidia0" not in out.split()
