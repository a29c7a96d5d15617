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
from pathlib import Path

import pytest

from nvhook.dev.demo.bundle import Runc, container_cgroup_dirs
from nvhook.dev.demo.rootfs import RootfsFlavor
from tests.fixtures.containers import (
    CGROUP2_RUNC,
    ContainerFactory,
    GpuRig,
    HostSnapshot,
    created_container,
)
from tests.fixtures.expected import (
    ALL_CAPS,
    Expected,
    canonical,
    expected_exposure,
    parse_caps,
    selected_gpus,
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


def expected(rig: GpuRig, visible: str, caps: str = "utility,compute",
             flavor: RootfsFlavor = GLIBC) -> Expected:
    return expected_exposure(rig.sim, parse_caps(caps), selected_gpus(rig.sim, visible),
                             libs_dir=flavor.libs_dir, libs32_dir=LIBS32[flavor])


def plan_targets(decision: dict[str, object]) -> set[str]:
    plan = decision.get("plan") or {}
    assert isinstance(plan, dict)
    return {canonical(e["target"]) for e in plan.get("entries", []) if e["op"] in ("bind", "tmpfs")}


@pytest.fixture(scope="module")
def gpu(gpu_rig: GpuRig) -> GpuRig:
    return gpu_rig


@pytest.fixture(autouse=True)
def host_unchanged(gpu: GpuRig) -> Iterator[None]:
    """Every test: the host mount table, our fds and the driver root stay as they were."""
    snap = HostSnapshot(watched=(Path(gpu.sim.path), gpu.launcher.parent))
    yield
    snap.assert_unchanged()


# ---- libraries, links, ldcache ------------------------------------------------------------------

def test_glibc_rootfs_gets_libraries_soname_links_and_ldcache(gpu: GpuRig) -> None:
    p = gpu.probe(("NVIDIA_VISIBLE_DEVICES=all",))
    exp = expected(gpu, "all")
    assert exp.libs <= p.files()
    links = p.links()
    for link, target in exp.links.items():
        assert links.get(link) == target, f"{link}: {links.get(link)!r} != {target!r}"
    cache = "\n".join(p["ldconfig"])
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"):
        # the path ldconfig in this merged-/usr image gives /usr/lib/x86_64-linux-gnu
        assert f"{soname} (libc6,x86-64) => /lib/x86_64-linux-gnu/{soname}" in cache
    assert p["smi"][-1] == "rc=0"


def test_musl_like_rootfs_resolves_through_soname_links(gpu: GpuRig) -> None:
    p = gpu.probe(("NVIDIA_VISIBLE_DEVICES=0",), MUSL)
    exp = expected(gpu, "0", flavor=MUSL)
    assert exp.libs <= p.files()
    assert p.links()["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] == "libnvidia-ml.so.550.54.15"
    assert p["ldconfig"] == []  # no ldconfig in the image: nvidia-smi loads through the links
    assert p.smi_uuids() == [gpu.sim.gpus[0].uuid]


def test_non_debian_layout_uses_usr_lib64(gpu: GpuRig) -> None:
    p = gpu.probe(("NVIDIA_VISIBLE_DEVICES=1",), NONDEB)
    exp = expected(gpu, "1", flavor=NONDEB)
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
    assert set(p["dev"]) == set(expected(gpu, visible).devices)
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
    exp = expected(gpu, "all")
    for target in exp.libs | exp.bins | exp.firmware:
        assert {"ro", "nosuid", "nodev"} <= p.mount(target).options, target
    for target in exp.devices:
        assert {"ro", "nosuid", "noexec"} <= p.mount(target).options, target
    for target in exp.proc:
        assert {"ro", "nosuid", "nodev", "noexec"} <= p.mount(target).options, target
    for target in exp.ipc:  # read-only (libnvc: rw): sockets and FIFOs work on ro mounts
        assert {"ro", "nosuid", "nodev", "noexec"} <= p.mount(target).options, target
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
    exp = expected(gpu, "none")
    assert gpu.new_targets(env) == exp.mount_targets()
    p = gpu.probe(env)
    assert set(p["dev"]) == {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    assert p.smi_uuids() == []


CAP_SETS = ["utility", "compute", "video", "graphics", "display", "compat32", "ngx",
            "compute,utility,compat32", "all"]


@pytest.mark.parametrize("caps", CAP_SETS)
def test_capability_set_exposes_exactly_its_files(gpu: GpuRig, caps: str) -> None:
    env = ("NVIDIA_VISIBLE_DEVICES=2", f"NVIDIA_DRIVER_CAPABILITIES={caps}")
    exp = expected(gpu, "2", caps)
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
        hook = gpu.run_hook({"pid": ctr.pid, "bundle": str(bundle)}, bundle)
        assert hook.returncode == 0, hook.stderr
        out, err = ctr.start_and_wait()
    assert gpu.sim.gpus[4].uuid in out, out + err
    assert "nvidia4" in out.split() and "nvidia0" not in out.split()


@pytest.mark.userns
@pytest.mark.parametrize("state_from", ["runc-state", "bundle-only"])
def test_manual_prestart_from_another_directory(gpu: GpuRig, runc_default: Runc,
                                                tmp_path: Path, state_from: str) -> None:
    """`runc state ID | nvhook prestart` from a directory that is not the bundle (root.path is
    the relative "rootfs"): runc's state names the rootfs; a state with only the bundle gets
    root.path relative to the bundle and one line saying so (issue 28; it was `open rootfs
    <cwd>/rootfs: no such file or directory`)."""
    bundle = gpu.baseline.bundle(["/bin/sh", "-c", "nvidia-smi -L"],
                                 env=["NVIDIA_VISIBLE_DEVICES=4"])
    with created_container(bundle, runc_default, tag="bystate") as ctr:
        state = json.loads(subprocess.run(runc_default.argv("state", ctr.container_id),
                                          capture_output=True, text=True, check=True).stdout)
        assert state["rootfs"] == str(bundle / "rootfs")
        if state_from == "bundle-only":
            state = {"pid": state["pid"], "bundle": state["bundle"]}
        hook = gpu.run_hook(state, tmp_path)
        assert hook.returncode == 0, hook.stderr
        out, err = ctr.start_and_wait()
    assert gpu.sim.gpus[4].uuid in out, out + err
    said = f"relative to the bundle {bundle}, not to the working directory {tmp_path}"
    assert (said in hook.stderr) == (state_from == "bundle-only"), hook.stderr


def test_manual_prestart_gives_a_pivoted_container_its_proc_driver(
    gpu: GpuRig, containers: ContainerFactory, runc_default: Runc
) -> None:
    """No sim step at all: the hook's `sim-procfs` mounts /proc/driver in a container that
    `runc create` has already pivoted (nothing may be imported from inside its namespace)."""
    bundle = containers.bundle(["/bin/sh", "-c", "nvidia-smi -L"],
                               env=["NVIDIA_VISIBLE_DEVICES=5"])
    with created_container(bundle, runc_default, tag="manual-sim") as ctr:
        hook = gpu.run_hook({"pid": ctr.pid, "bundle": str(bundle)}, bundle)
        assert hook.returncode == 0, hook.stderr
        out, err = ctr.start_and_wait()
    assert out.split("\n")[0].endswith(f"(UUID: {gpu.sim.gpus[5].uuid})"), out + err
