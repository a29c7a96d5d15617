"""Specs that heal (issue 31, nvhook.cdi.heal): `cdi refresh` creates the missing GPU and control
nodes first (NVIDIA's refresh service, toolkit #1979), writes a spec only when it is whole and
otherwise refuses in one line and keeps the spec it had; a spec written before the driver was
ready is replaced once it is; a refresh that gives the same spec writes nothing; two refreshes
at once leave one whole spec. `cdi check` says when a spec - ours, nvidia-ctk's, a DRA claim
spec - no longer matches the host, and names a GPU spec that offers only `all`."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from nvhook.dev.sim import SimRoot, SimSpec
from tests.fixtures.sim import SimRootFactory
from tests.unit.test_cdi_check import NVIDIA, cdi, nvidia_spec
from tests.unit.test_cli import NVHOOK

SIM2 = SimSpec(gpus=2, ipc=True)


def _sim(factory: SimRootFactory) -> SimRoot:
    sim = factory(SIM2, private=True)
    if not sim.real_device_nodes:
        pytest.skip("needs mknod (root)")
    return sim


def refresh(sim: SimRoot, out: Path, wait: str = "0") -> subprocess.CompletedProcess[str]:
    return cdi(sim, "refresh", "--output", str(out), "--hook-path", "/usr/bin/true",
               "--wait", wait)


def names(path: Path) -> list[str]:
    return [str(d["name"]) for d in yaml.safe_load(path.read_text())["devices"]]


def _no_node_creation(sim: SimRoot) -> None:
    params = Path(sim.proc_root) / "driver/nvidia/params"
    params.write_text(params.read_text().replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0"))


def test_refresh_restores_a_missing_gpu_node(sim_root_factory: SimRootFactory,
                                             tmp_path: Path) -> None:
    """GPU 1's node gone while the driver lists it: the refresh makes it (the driver's
    major, the params' mode), then writes a spec with gpu=1 (it wrote one without, exit 0)."""
    sim = _sim(sim_root_factory)
    node = Path(sim.path) / "dev/nvidia1"
    node.unlink()
    out = tmp_path / "cdi/nvidia.yaml"
    proc = refresh(sim, out)
    assert proc.returncode == 0, proc.stderr
    st = node.stat()
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 195 and os.minor(st.st_rdev) == 1
    assert "1" in names(out) and sim.gpus[1].uuid in names(out)


def test_refresh_refuses_and_keeps_the_old_spec(sim_root_factory: SimRootFactory,
                                                tmp_path: Path) -> None:
    """With `ModifyDeviceFiles: 0` nothing may be created: one line names the GPU whose node is
    missing, exit 1, the spec there is kept byte for byte, and none is written where none was."""
    sim = _sim(sim_root_factory)
    out = tmp_path / "cdi/nvidia.yaml"
    assert refresh(sim, out).returncode == 0
    before = out.read_bytes()
    _no_node_creation(sim)
    (Path(sim.path) / "dev/nvidia1").unlink()
    proc = refresh(sim, out)
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    bus = sim.gpus[1].proc_bus_id
    assert f"{out}: not written: the spec would be incomplete: GPU {bus} (/dev/nvidia1)" in (
        proc.stderr) or "device nvidia.com/gpu=1: " in proc.stderr, proc.stderr
    assert "the spec there is kept" in proc.stderr
    assert out.read_bytes() == before
    fresh = tmp_path / "other/nvidia.yaml"
    proc = refresh(sim, fresh)
    assert proc.returncode == 1 and f"GPU {bus} (/dev/nvidia1) is not in it" in proc.stderr
    assert not fresh.exists()


def test_spec_written_before_the_driver_was_ready_is_replaced(
        sim_root_factory: SimRootFactory, tmp_path: Path) -> None:
    """A spec made while GPU 1 had no node (`cdi generate` at boot) lacks gpu=1; the driver's
    state is the same once the node appears, yet the refresh replaces the spec."""
    sim = _sim(sim_root_factory)
    node = Path(sim.path) / "dev/nvidia1"
    node.unlink()
    out = tmp_path / "nvidia.yaml"
    proc = cdi(sim, "generate", "--hook-path", "/usr/bin/true", "--output", str(out))
    assert proc.returncode == 0 and "1" not in names(out)
    check = cdi(sim, "check", "--spec", str(out))
    assert check.returncode == 1 and "(/dev/nvidia1) is not in it" in check.stdout, check.stdout
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(195, 1))
    proc = refresh(sim, out)
    assert proc.returncode == 0 and "refreshed" in proc.stdout, (proc.stdout, proc.stderr)
    assert "1" in names(out)
    assert refresh(sim, out).stdout == f"{out}: current (driver state unchanged)\n"


def test_a_refresh_that_gives_the_same_spec_writes_nothing(
        sim_root_factory: SimRootFactory, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from nvhook.cdi import refresh as R
    from nvhook.cdi.generate import GenerateOptions, generate_spec, render
    from nvhook.config.load import load_config

    sim = _sim(sim_root_factory)
    out = tmp_path / "nvidia.yaml"
    assert refresh(sim, out).returncode == 0
    before = out.stat()
    config = load_config(sim.config_path, {})
    monkeypatch.setattr(R, "unchanged", lambda *a: False)  # regenerated and compared
    done = R.refresh(str(out), config,
                     lambda c: generate_spec(c, GenerateOptions(hook_path="/usr/bin/true")),
                     lambda s: render(s, "yaml"), wait=0)
    assert done == f"{out}: current"
    after = out.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_two_refreshes_at_once_leave_one_whole_spec(sim_root_factory: SimRootFactory,
                                                     tmp_path: Path) -> None:
    """The spec's directory is locked for the whole refresh: a second one waits for the first
    (held here), then finds the spec the first wrote; no temporary file is left."""
    from nvhook.cdi.heal import locked

    sim = _sim(sim_root_factory)
    out = tmp_path / "cdi/nvidia.yaml"
    args = [*NVHOOK, "--config", sim.config_path, "cdi", "refresh", "--output", str(out),
            "--hook-path", "/usr/bin/true", "--wait", "0"]
    with locked(str(out)):
        procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        time.sleep(1.5)
        assert [p.poll() for p in procs] == [None, None]  # both wait for the lock
        assert not out.exists()
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    said = sorted(r[0].strip().split(": ", 1)[1] for r in results)
    assert said == ["current (driver state unchanged)", "written (5 devices)"]
    assert names(out) == ["0", sim.gpus[0].uuid, "1", sim.gpus[1].uuid, "all"]
    assert os.listdir(out.parent) == ["nvidia.yaml"]


# -- cdi check: whose spec, and does it still match the host ----------------------------------

@pytest.mark.parametrize("path", NVIDIA, ids=lambda p: p.stem)
def test_check_names_an_all_only_spec(sim_root_factory: SimRootFactory, tmp_path: Path,
                                      path: Path) -> None:
    """toolkit #1895: a spec offering only nvidia.com/gpu=all (here nvidia-ctk's, cut down)
    cannot serve the device plugin's per-UUID requests: check says so, exit 1."""
    sim = sim_root_factory(SIM2)
    spec = nvidia_spec(path, sim, tmp_path / "cdi")
    doc = yaml.safe_load(spec.read_text())
    doc["devices"] = [d for d in doc["devices"] if d["name"] == "all"]
    spec.write_text(yaml.safe_dump(doc))
    proc = cdi(sim, "check", "--spec", str(spec))
    assert proc.returncode == 1
    assert ("does not match this host: offers only nvidia.com/gpu=all: a request for one GPU "
            "(the device plugin's nvidia.com/gpu=GPU-<uuid>) does not resolve") in proc.stdout


def test_check_names_our_all_only_spec(sim_root_factory: SimRootFactory, tmp_path: Path) -> None:
    sim = sim_root_factory(SIM2)
    out = tmp_path / "nvidia.yaml"
    proc = cdi(sim, "generate", "--hook-path", "/usr/bin/true", "--output", str(out))
    assert proc.returncode == 0
    doc = yaml.safe_load(out.read_text())
    doc["devices"] = [d for d in doc["devices"] if d["name"] == "all"]
    out.write_text(yaml.safe_dump(doc))
    proc = cdi(sim, "check", "--spec", str(out))
    assert proc.returncode == 1 and "offers only nvidia.com/gpu=all" in proc.stdout


@pytest.mark.parametrize("path", NVIDIA, ids=lambda p: p.stem)
def test_check_names_a_gpu_another_tools_spec_lacks(sim_root_factory: SimRootFactory,
                                                    tmp_path: Path, path: Path) -> None:
    sim = sim_root_factory(SIM2)
    spec = nvidia_spec(path, sim, tmp_path / "cdi")
    doc = yaml.safe_load(spec.read_text())
    doc["devices"] = [d for d in doc["devices"] if not any(
        n["path"] == "/dev/nvidia1" for n in d["containerEdits"].get("deviceNodes") or ())]
    spec.write_text(yaml.safe_dump(doc))
    proc = cdi(sim, "check", "--spec", str(spec))
    assert proc.returncode == 1
    assert f"GPU {sim.gpus[1].proc_bus_id} (/dev/nvidia1) is not in it" in proc.stdout


def test_check_covers_dra_claim_specs(sim_root_factory: SimRootFactory, tmp_path: Path) -> None:
    """The DRA driver's claim specs (kind k8s.gpu.nvidia.com/claim) in the spec dirs are
    checked too: a claim naming a node that is gone (kubernetes-sigs/dra-driver-nvidia-gpu
    #1380) is reported, a whole one is valid; never asked to name every GPU."""
    sim = _sim(sim_root_factory)
    dirs = tmp_path / "cdi"
    dirs.mkdir()
    for name, minor in (("good", 0), ("gone", 1)):
        (dirs / f"k8s.gpu.nvidia.com-claim_{name}.yaml").write_text(yaml.safe_dump({
            "cdiVersion": "0.5.0", "kind": "k8s.gpu.nvidia.com/claim",
            "devices": [{"name": f"{name}-gpu-{minor}", "containerEdits": {"deviceNodes": [
                {"path": f"/dev/nvidia{minor}", "hostPath": f"{sim.path}/dev/nvidia{minor}"}]}}],
        }))
    (Path(sim.path) / "dev/nvidia1").unlink()
    config = tmp_path / "c.toml"
    config.write_text(f'nvidia-container-runtime.modes.cdi.spec-dirs = ["{dirs}"]\n'
                      + Path(sim.config_path).read_text())
    proc = cdi(sim, "check", config=str(config))
    assert proc.returncode == 1
    lines = dict(x.split(": ", 1) for x in proc.stdout.splitlines())
    assert lines[f"{dirs}/k8s.gpu.nvidia.com-claim_good.yaml"].startswith("valid (written by "
                                                                          "another tool")
    assert lines[f"{dirs}/k8s.gpu.nvidia.com-claim_gone.yaml"].startswith(
        "does not match this host: device k8s.gpu.nvidia.com/claim=gone-gpu-1: ")


def test_refresh_into_a_file_where_the_directory_should_be(sim_root_factory: SimRootFactory,
                                                           tmp_path: Path) -> None:
    sim = sim_root_factory(SIM2)
    (tmp_path / "cdi").write_text("a file")
    proc = refresh(sim, tmp_path / "cdi/nvidia.yaml")
    assert proc.returncode == 1 and proc.stderr.startswith(f"cdi refresh: lock {tmp_path}/cdi: ")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_doctor_names_an_all_only_spec(sim_root_factory: SimRootFactory, tmp_path: Path) -> None:
    """doctor follows cdi check: another tool's spec offering only `all` is a warning, and so
    is nvhook's own."""
    from nvhook.admin.doctor import host
    from nvhook.cdi.generate import GenerateOptions, generate_spec, render
    from nvhook.config.model import config_from_document

    sim = sim_root_factory(SIM2)
    specs = tmp_path / "cdi"
    spec = nvidia_spec(NVIDIA[-1], sim, specs)
    doc = yaml.safe_load(spec.read_text())
    doc["devices"] = [d for d in doc["devices"] if d["name"] == "all"]
    spec.write_text(yaml.safe_dump(doc))
    document = {"nvidia-container-cli": {"root": sim.path},
                "nvhook": {"proc-root": sim.proc_root, "sim-procfs": True},
                "nvidia-container-runtime": {"modes": {"cdi": {"spec-dirs": [str(specs)]}}}}
    config = config_from_document(document, None)
    ours = generate_spec(config, GenerateOptions(hook_path="/usr/bin/true"))
    ours["devices"] = [d for d in ours["devices"] if d["name"] == "all"]
    (specs / "z-nvhook.yaml").write_text(render(ours, "yaml"))
    found = [(f.level, f.message) for f in host.check_cdi(config, str(tmp_path / "nobin"))]
    assert ("warn", f"{spec} (nvidia-ctk's) does not match this host: offers only "
            "nvidia.com/gpu=all: a request for one GPU (the device plugin's "
            "nvidia.com/gpu=GPU-<uuid>) does not resolve") in found, found
    assert any(level == "warn" and m.startswith(f"{specs}/z-nvhook.yaml offers only")
               for level, m in found), found
