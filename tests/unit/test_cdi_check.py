"""`nvhook cdi check|list|refresh` and doctor: whose spec it is. nvhook's specs are regenerated
with the options and config they record and compared; NVIDIA's (nvidia-ctk 1.17.8 and 1.20.0,
tests/data/nvidia-cdi) and any other tool's are checked for validity and for devices this host
no longer has, never called stale by nvhook's stamp, never rewritten (`--refresh` refuses them
in one line and leaves them byte for byte). The refresh units' command waits for the driver,
does nothing while the driver's state is unchanged, and follows MIG reconfiguration."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from nvhook.cdi.generate import GenerateOptions, generate_spec, render
from nvhook.config.load import load_config
from nvhook.dev.sim import SimRoot, SimSpec
from tests.fixtures.sim import SIM_DEFAULT_SPEC, SimRootFactory
from tests.unit.test_cli import NVHOOK

NVIDIA = sorted((Path(__file__).resolve().parent.parent / "data" / "nvidia-cdi").glob("*.yaml"))
SIM2 = SimSpec(gpus=2, ipc=True)  # the sim NVIDIA's fixtures were made for


def cdi(sim: SimRoot, *args: str, config: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NVHOOK, "--config", config or sim.config_path, "cdi", *args],
                          capture_output=True, text=True, check=False, timeout=120)


def nvidia_spec(path: Path, sim: SimRoot, where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    target = where / "nvidia.yaml"
    target.write_text(path.read_text().replace("@SIM_ROOT@", sim.path))
    return target


def ours(sim: SimRoot, out: Path, *args: str) -> Path:
    proc = cdi(sim, "generate", "--hook-path", "/usr/bin/true", "--output", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("path", NVIDIA, ids=lambda p: p.stem)
def test_nvidia_spec_listed_checked_and_never_rewritten(
        sim_root_factory: SimRootFactory, tmp_path: Path, path: Path) -> None:
    sim = sim_root_factory(SIM2)
    spec = nvidia_spec(path, sim, tmp_path / "cdi")
    before = spec.read_bytes()
    names = cdi(sim, "list", "--spec", str(spec)).stdout.split()
    assert names == ["nvidia.com/gpu=0", "nvidia.com/gpu=1", f"nvidia.com/gpu={sim.gpus[1].uuid}",
                     f"nvidia.com/gpu={sim.gpus[0].uuid}", "nvidia.com/gpu=all"]
    proc = cdi(sim, "check", "--spec", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (f"{spec}: valid (written by nvidia-ctk, cdiVersion 0.5.0, 5 "
                           "devices)\n")
    proc = cdi(sim, "check", "--spec", str(spec), "--refresh")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (f"cdi check --refresh: {spec} was written by nvidia-ctk, not nvhook: "
                           "it is never rewritten (regenerate it with the tool that wrote it)\n")
    config = tmp_path / "c.toml"
    config.write_text(f'nvidia-container-runtime.modes.cdi.spec-dirs = ["{spec.parent}"]\n'
                      + Path(sim.config_path).read_text())
    proc = cdi(sim, "check", "--refresh", config=str(config))
    assert proc.returncode == 0 and proc.stdout.endswith(": not nvhook's, left as it is\n")
    assert spec.read_bytes() == before


@pytest.mark.parametrize("path", NVIDIA[-1:], ids=lambda p: p.stem)
def test_foreign_spec_with_a_vanished_gpu(sim_root_factory: SimRootFactory, tmp_path: Path,
                                          path: Path) -> None:
    sim = sim_root_factory(SIM2, private=True)
    spec = nvidia_spec(path, sim, tmp_path / "cdi")
    os.unlink(Path(sim.path) / "dev" / "nvidia1")
    proc = cdi(sim, "check", "--spec", str(spec))
    assert proc.returncode == 1
    assert "does not match this host: device nvidia.com/gpu=1: " in proc.stdout
    assert "(written by nvidia-ctk" in proc.stdout and "stale" not in proc.stdout


def test_our_spec_stale_then_refreshed(sim_root_factory: SimRootFactory, tmp_path: Path) -> None:
    sim = sim_root_factory(SIM_DEFAULT_SPEC, private=True)
    if not sim.real_device_nodes:
        pytest.skip("needs mknod (root)")
    spec = ours(sim, tmp_path / "nvidia.yaml", "--device-name-strategy", "uuid")
    assert cdi(sim, "check", "--spec", str(spec)).stdout == f"{spec}: current\n"
    devices = Path(sim.proc_root) / "devices"  # nvidia-uvm gets another major
    devices.write_text(devices.read_text().replace("506 nvidia-uvm", "511 nvidia-uvm"))
    for minor, name in ((0, "nvidia-uvm"), (1, "nvidia-uvm-tools")):
        node = Path(sim.path) / "dev" / name
        node.unlink()
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(511, minor))
    proc = cdi(sim, "check", "--spec", str(spec))
    assert proc.returncode == 1
    assert "stale: device majors changed:" in proc.stdout and "nvidia-uvm:511" in proc.stdout
    proc = cdi(sim, "check", "--spec", str(spec), "--refresh")
    assert proc.returncode == 0 and "refreshed" in proc.stdout, proc.stderr
    assert cdi(sim, "check", "--spec", str(spec)).returncode == 0
    text = spec.read_text()
    assert "major: 511" in text and "strategy=uuid" in text  # the recorded options kept
    assert all(line.startswith("- name: GPU-") or "all" in line
               for line in text.splitlines() if line.startswith("- name:"))


def test_check_uses_the_config_the_spec_was_made_with(sim_root_factory: SimRootFactory,
                                                      tmp_path: Path) -> None:
    sim = sim_root_factory(SIM_DEFAULT_SPEC)
    spec = ours(sim, tmp_path / "nvidia.json")
    proc = subprocess.run([*NVHOOK, "cdi", "check", "--spec", str(spec)], capture_output=True,
                          text=True, check=False, timeout=120,
                          env={**os.environ, "NVIDIA_CTK_CONFIG_FILE_PATH": ""})
    assert proc.stdout == f"{spec}: current\n", proc.stderr  # not the default config's /


def test_check_driver_upgrade(sim_root_factory: SimRootFactory, tmp_path: Path) -> None:
    sim = sim_root_factory(SIM_DEFAULT_SPEC, private=True)
    spec = ours(sim, tmp_path / "nvidia.json")
    assert json.loads(spec.read_text())["cdiVersion"] == "0.5.0"  # .json: JSON
    proc = subprocess.run([*NVHOOK, "sim", "create", sim.path, "--force", "--gpus", "8",
                           "--ipc", "--driver-version", "555.42.02"], capture_output=True,
                          text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    proc = cdi(sim, "check", "--spec", str(spec))
    assert proc.returncode == 1
    assert "driver version changed: 550.54.15 -> 555.42.02" in proc.stdout
    assert cdi(sim, "check", "--spec", str(spec), "--refresh").returncode == 0
    assert "555.42.02" in spec.read_text()


def test_list_and_broken_specs(sim_root: SimRoot, tmp_path: Path) -> None:
    spec = ours(sim_root, tmp_path / "nvidia.yaml")
    names = cdi(sim_root, "list", "--spec", str(spec)).stdout.split()
    assert names[:2] == ["nvidia.com/gpu=0", f"nvidia.com/gpu={sim_root.gpus[0].uuid}"]
    assert names[-1] == "nvidia.com/gpu=all" and len(names) == 17
    broken = tmp_path / "broken.yaml"
    broken.write_text("devices: [\n")
    proc = cdi(sim_root, "check", "--spec", str(broken))
    assert proc.returncode == 1 and proc.stderr.startswith(f"{broken}: not valid YAML: ")
    assert len(proc.stderr.splitlines()) == 1


# -- the refresh units' command ------------------------------------------------------------------

def test_refresh_writes_waits_and_follows_mig(sim_root_factory: SimRootFactory, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from nvhook.cdi import check as C
    from nvhook.cdi.refresh import refresh

    sim = sim_root_factory(SimSpec(gpus=2, mig=((0, ("1g.10gb",)),)), private=True)
    config = load_config(sim.config_path, {})
    out = tmp_path / "run" / "nvidia.yaml"
    options = GenerateOptions(hook_path="/usr/bin/true")

    def make(c: object) -> dict[str, object]:
        return generate_spec(config, options)

    assert refresh(str(out), config, make, lambda s: render(s, "yaml"), wait=0).endswith(
        "written (7 devices)")
    calls = []
    monkeypatch.setattr(C, "regenerate", lambda *a, **k: calls.append(a) or {})
    assert refresh(str(out), config, make, lambda s: render(s, "yaml"), wait=0) == (
        f"{out}: current (driver state unchanged)")  # no NVML, no generator
    assert calls == []
    monkeypatch.undo()
    gi = Path(sim.proc_root) / "driver/nvidia/capabilities/gpu0/mig/gi13/ci0"
    gi.mkdir(parents=True)  # a MIG reconfiguration: the driver's state changed
    done = refresh(str(out), config, make, lambda s: render(s, "yaml"), wait=0)
    assert done.startswith(f"{out}: ") and "driver state unchanged" not in done


def test_refresh_waits_for_the_driver_then_gives_up(tmp_path: Path) -> None:
    from nvhook.cdi.refresh import when_ready
    from nvhook.errors import CdiError

    slept: list[float] = []
    with pytest.raises(CdiError, match=r"waited 5 s for the driver"):
        when_ready(lambda: 1, str(tmp_path), 5, sleep=slept.append)
    assert slept and sum(slept) <= 6
    (tmp_path / "driver/nvidia").mkdir(parents=True)
    assert when_ready(lambda: 7, str(tmp_path), 5, sleep=slept.append) == 7


def test_refresh_refuses_another_tools_spec(sim_root_factory: SimRootFactory,
                                            tmp_path: Path) -> None:
    sim = sim_root_factory(SIM2)
    spec = nvidia_spec(NVIDIA[-1], sim, tmp_path)
    before = spec.read_bytes()
    proc = cdi(sim, "refresh", "--output", str(spec), "--hook-path", "/usr/bin/true")
    assert proc.returncode == 1 and "was written by nvidia-ctk, not nvhook: left as it is" in (
        proc.stderr)
    assert spec.read_bytes() == before


# -- doctor ------------------------------------------------------------------------------------

def test_doctor_follows_the_same_rules(sim_root_factory: SimRootFactory, tmp_path: Path) -> None:
    from nvhook.admin.doctor import host
    from nvhook.config.model import config_from_document

    sim = sim_root_factory(SIM2)
    specs = tmp_path / "cdi"
    nvidia_spec(NVIDIA[-1], sim, specs)
    document = {"nvidia-container-cli": {"root": sim.path},
                "nvhook": {"proc-root": sim.proc_root, "sim-procfs": True},
                "nvidia-container-runtime": {"modes": {"cdi": {"spec-dirs": [str(specs)]}}}}
    config = config_from_document(document, None)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    podman = bin_dir / "podman"
    podman.write_text("#!/bin/sh\necho podman version 4.3.1\n")
    podman.chmod(0o755)
    found = host.check_cdi(config, str(bin_dir))
    assert [(f.level, f.message) for f in found] == [
        ("ok", f"{specs}/nvidia.yaml: valid (nvidia-ctk's, cdiVersion 0.5.0)")]
    spec = generate_spec(config, GenerateOptions(hook_path="/usr/bin/true", cdi_version="0.7.0"))
    (specs / "z-nvhook.yaml").write_text(render(spec, "yaml"))
    found = host.check_cdi(config, str(bin_dir))
    levels = [(f.level, f.message.split(": ")[-1] if f.level == "ok" else f.message)
              for f in found]
    assert ("ok", "current") in levels
    warn = next(f for f in found if f.level == "warn")
    assert warn.message == (f"{specs}/z-nvhook.yaml (cdiVersion 0.7.0, nvhook's) cannot be read "
                            "by podman 4.3.1 (reads up to 0.5.0)")
    assert warn.fix == f"nvhook cdi generate --output {specs}/z-nvhook.yaml --cdi-version 0.5.0"
    shutil.rmtree(specs)


def test_wrapper_refuses_a_spec_whose_device_is_gone(sim_root_factory: SimRootFactory,
                                                     tmp_path: Path) -> None:
    """Never used stale: the runtime wrapper refuses the device, in one line, with the cause."""
    from nvhook.cdi.resolve import apply_devices
    from nvhook.errors import WrapperError

    sim = sim_root_factory(SIM2, private=True)
    spec = nvidia_spec(NVIDIA[-1], sim, tmp_path / "cdi")
    doc: dict[str, object] = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"]}}
    assert apply_devices(doc, ["nvidia.com/gpu=1"], (str(spec.parent),)) == [str(spec)]
    os.unlink(Path(sim.path) / "dev" / "nvidia1")
    with pytest.raises(WrapperError) as info:
        apply_devices({}, ["nvidia.com/gpu=1"], (str(spec.parent),))
    assert str(info.value).startswith(f"CDI device nvidia.com/gpu=1 ({spec}): ")
    assert "no such file or directory (the spec is stale" in str(info.value)
