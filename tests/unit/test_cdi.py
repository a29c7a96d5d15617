"""`nvhook cdi`: the spec for 8 simulated GPUs and a MIG layout, valid against the official
schema (tests/data/cdi-schema) and the rules the CDI library enforces, equal to the engine's
plan for the same request; YAML and JSON; `check` finds a stale spec and `--refresh` fixes it."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from nvhook.cdi import spec as S
from nvhook.cdi.generate import host_layout, host_spec, render
from nvhook.cdi.hooks import gpu_devices, parse_args
from nvhook.cdi.yamlish import dump, load
from nvhook.config.load import load_config
from nvhook.config.model import HookConfig
from nvhook.errors import UsageError
from nvhook.sim import SimRoot
from tests.fixtures.sim import SIM_DEFAULT_SPEC, SimRootFactory
from tests.unit.test_cli import NVHOOK

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "data" / "cdi-schema"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9]$|^[A-Za-z0-9]$")
HOOK_NAMES = {"prestart", "createRuntime", "createContainer", "startContainer", "poststart",
              "poststop"}


def _config(sim: SimRoot) -> HookConfig:
    return load_config(sim.config_path, {})


def validate(spec: dict[str, Any]) -> None:
    """The official schema, then the CDI library's own rules (cdi.md: Go-side validation)."""
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry = Registry().with_resource(  # schema.json refers to "defs.json#/definitions/..."
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7))
    jsonschema.Draft7Validator(schema, registry=registry).validate(spec)
    assert spec["cdiVersion"] in ("0.3.0", "0.4.0", "0.5.0")  # what Podman 4.3 reads
    names = [d["name"] for d in spec["devices"]]
    assert len(names) == len(set(names)) and all(NAME.match(n) for n in names)
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec["containerEdits"]]
    assert all(e for e in edits)  # a device with empty edits is invalid
    for e in edits:
        for h in e.get("hooks", ()):
            assert h["hookName"] in HOOK_NAMES and h["path"].startswith("/")
            assert all(x.index("=") > 0 for x in h.get("env", ()))
        for n in e.get("deviceNodes", ()):
            assert n["type"] == "c" and set(n["permissions"]) <= set("rwm")
        for m in e.get("mounts", ()):
            assert m["hostPath"].startswith("/") and m["containerPath"].startswith("/")


def _plan(config: HookConfig, devices: tuple[str, ...]) -> Any:
    from nvhook.cdi.generate import _Layout, _planner
    from nvhook.engine import engine_options
    from nvmount.engine import discover_cached
    from nvmount.faults import Faults

    options = engine_options(config)
    inventory, _ = discover_cached(options, Faults())
    return _planner(inventory, _Layout(host_layout(inventory)), config, options)(devices)


def test_spec_for_8_gpus_is_valid_and_the_plan(sim_root: SimRoot) -> None:
    config = _config(sim_root)
    spec = host_spec(config)
    validate(spec)
    assert spec["kind"] == "nvidia.com/gpu" and spec["cdiVersion"] == "0.5.0"
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    for gpu in sim_root.gpus:
        assert devices[str(gpu.index)] == devices[gpu.uuid]
        plan = _plan(config, (str(gpu.index),))
        nodes = {(n.target, n.rdev) for n in S.nodes(plan)}
        common = {(n["path"], (n["major"], n["minor"]))
                  for n in spec["containerEdits"]["deviceNodes"]}
        mine = {(n["path"], (n["major"], n["minor"])) for n in
                devices[str(gpu.index)]["deviceNodes"]}
        assert mine == {(f"/dev/nvidia{gpu.minor}", (195, gpu.minor)),
                        (f"/dev/dri/card{gpu.index}", (226, gpu.index)),
                        (f"/dev/dri/renderD{128 + gpu.index}", (226, 128 + gpu.index))}
        assert common | mine == nodes  # the plan's nodes, no more, no less
        binds = {(b.source, b.target) for b in plan.entries
                 if getattr(b, "what", "") in ("binary", "library", "library32", "firmware",
                                                "ipc", "graphics")}
        assert {(m["hostPath"], m["containerPath"])
                for m in spec["containerEdits"]["mounts"]} == binds
    assert len(devices["all"]["deviceNodes"]) == 8 * 3  # /dev/nvidiaN, cardN, renderD
    mounts = spec["containerEdits"]["mounts"]
    assert all(m["options"] == ["ro", "nosuid", "nodev", "bind"] for m in mounts
               if m["containerPath"].startswith("/usr/lib"))
    assert any(m["containerPath"].endswith("libcuda.so.550.54.15") for m in mounts)


def test_mig_devices(sim_mig_root: SimRoot) -> None:
    config = _config(sim_mig_root)
    spec = host_spec(config)
    validate(spec)
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    gpu0 = next(g for g in sim_mig_root.gpus if g.index == 0)
    assert {"0:0", "0:1", "0:2", "0:3", "1:6"} <= set(devices)
    paths = {n["path"] for n in devices["0:1"]["deviceNodes"]}
    assert f"/dev/nvidia{gpu0.minor}" in paths
    assert len([p for p in paths if p.startswith("/dev/nvidia-caps/")]) == 2  # gi and ci access
    plan = _plan(config, ("0:1",))
    assert {n.target for n in S.nodes(plan)} - {
        n["path"] for n in spec["containerEdits"]["deviceNodes"]} == paths


def test_strategies_and_minimal_version(sim_root: SimRoot) -> None:
    config = _config(sim_root)
    by_uuid = host_spec(config, strategy="uuid")
    assert all(d["name"].startswith("GPU-") or d["name"] == "all" for d in by_uuid["devices"])
    typed = host_spec(config, strategy="type-index")
    assert [d["name"] for d in typed["devices"]][:2] == ["gpu0", "gpu1"]
    validate(typed)
    minimal = {"devices": [{"name": "gpu0", "containerEdits": {"deviceNodes": [
        {"path": "/dev/nvidia0"}]}}], "containerEdits": {}}
    assert S.minimal_version(minimal) == "0.3.0"
    minimal["devices"][0]["containerEdits"]["mounts"] = [{"type": "bind"}]
    assert S.minimal_version(minimal) == "0.4.0"


def test_yaml_and_json_round_trip(sim_mig_root: SimRoot) -> None:
    spec = host_spec(_config(sim_mig_root))
    text = render(spec, "yaml")
    assert load(text) == spec == yaml.safe_load(text)  # names like "0:1" stay strings
    assert load(render(spec, "json")) == spec
    assert load(dump({"a": [], "b": {}, "c": True, "d": -3})) == {"a": [], "b": {}, "c": True,
                                                                   "d": -3}


def test_stamp_names_driver_majors_and_digest(sim_root: SimRoot) -> None:
    spec = host_spec(_config(sim_root))
    stamp = S.parse_stamp(S.spec_stamp(spec) or "")
    assert stamp["driver"] == "550.54.15"
    assert "nvidia-uvm:506" in stamp["majors"] and stamp["digest"].startswith("sha256:")
    hooks = spec["containerEdits"]["hooks"]
    assert [h["args"][3] for h in hooks] == ["create-symlinks", "update-ldcache", "procfs"]
    assert all(h["hookName"] == "createRuntime" for h in hooks)


def _cdi(sim: SimRoot, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NVHOOK, "--config", sim.config_path, "cdi", *args],
                          capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.root
def test_check_finds_a_stale_spec_and_refresh_fixes_it(sim_root_factory: SimRootFactory,
                                                       tmp_path: Path) -> None:
    sim = sim_root_factory(SIM_DEFAULT_SPEC, private=True)
    if not sim.real_device_nodes:
        pytest.skip("needs mknod (root)")
    spec = tmp_path / "nvidia.yaml"
    assert _cdi(sim, "generate", "--output", str(spec)).returncode == 0
    assert _cdi(sim, "check", "--spec", str(spec)).stdout == f"{spec}: current\n"
    devices = Path(sim.proc_root) / "devices"  # nvidia-uvm gets another major
    devices.write_text(devices.read_text().replace("506 nvidia-uvm", "511 nvidia-uvm"))
    for minor, name in ((0, "nvidia-uvm"), (1, "nvidia-uvm-tools")):
        node = Path(sim.path) / "dev" / name
        node.unlink()
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(511, minor))
    proc = _cdi(sim, "check", "--spec", str(spec))
    assert proc.returncode == 1
    assert "stale: device majors changed:" in proc.stdout and "nvidia-uvm:511" in proc.stdout
    assert "(fix: nvhook cdi check --refresh)" in proc.stdout
    proc = _cdi(sim, "check", "--spec", str(spec), "--refresh")
    assert proc.returncode == 0 and "refreshed" in proc.stdout, proc.stderr
    assert _cdi(sim, "check", "--spec", str(spec)).returncode == 0
    assert '"major": 511' in json.dumps(load(spec.read_text()))


@pytest.mark.root
def test_check_finds_a_driver_upgrade(sim_root_factory: SimRootFactory, tmp_path: Path) -> None:
    sim = sim_root_factory(SIM_DEFAULT_SPEC, private=True)
    spec = tmp_path / "nvidia.json"
    assert _cdi(sim, "generate", "--output", str(spec)).returncode == 0
    assert json.loads(spec.read_text())["cdiVersion"] == "0.5.0"  # .json: JSON
    proc = subprocess.run([*NVHOOK, "sim", "create", sim.path, "--force", "--gpus", "8",
                           "--ipc", "--driver-version", "555.42.02"], capture_output=True,
                          text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    proc = _cdi(sim, "check", "--spec", str(spec))
    assert proc.returncode == 1
    assert "driver version changed: 550.54.15 -> 555.42.02" in proc.stdout
    assert _cdi(sim, "check", "--spec", str(spec), "--refresh").returncode == 0
    assert "555.42.02" in spec.read_text()


def test_list_and_errors(sim_root: SimRoot, tmp_path: Path) -> None:
    spec = tmp_path / "nvidia.yaml"
    assert _cdi(sim_root, "generate", "--output", str(spec)).returncode == 0
    names = _cdi(sim_root, "list", "--spec", str(spec)).stdout.split()
    assert names[:2] == ["nvidia.com/gpu=0", f"nvidia.com/gpu={sim_root.gpus[0].uuid}"]
    assert names[-1] == "nvidia.com/gpu=all" and len(names) == 17
    broken = tmp_path / "broken.yaml"
    broken.write_text("devices: [\n")
    proc = _cdi(sim_root, "check", "--spec", str(broken))
    assert proc.returncode == 1 and proc.stderr.startswith(f"read CDI spec {broken}: ")


def test_hook_arguments() -> None:
    assert parse_args("update-ldcache", ["--folder", "/usr/lib", "--folder=/lib"]) == [
        "/usr/lib", "/lib"]
    assert parse_args("procfs", []) == []
    for name, args in (("bogus", []), ("procfs", ["--x"]), ("create-symlinks", ["--link"]),
                       ("update-ldcache", ["--folder", ""])):
        with pytest.raises(UsageError):
            parse_args(name, args)


def test_gpu_devices_from_the_spec_nodes(sim_mig_root: SimRoot) -> None:
    from nvhook.engine import engine_options
    from nvmount.engine import discover_cached
    from nvmount.faults import Faults

    inventory, _ = discover_cached(engine_options(_config(sim_mig_root)), Faults())
    gpu3 = next(g for g in inventory.gpus if g.index == 3)
    mig = next(g for g in inventory.gpus if g.index == 0).mig_devices[1]
    assert mig.gi_cap is not None and mig.ci_cap is not None
    nodes = frozenset({("/dev/x", 195, gpu3.minor), ("/dev/g", 195, 0),
                       ("/dev/a", mig.gi_cap.major, mig.gi_cap.minor),
                       ("/dev/b", mig.ci_cap.major, mig.ci_cap.minor)})
    assert gpu_devices(inventory, nodes) == ("3", "0:1")


def test_gated_families_are_devices(sim_root_factory: SimRootFactory) -> None:
    from nvhook.sim import SimSpec

    sim = sim_root_factory(SimSpec(gpus=1, gated=True))
    spec = host_spec(_config(sim))
    validate(spec)
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert [n["path"] for n in devices["gdrcopy"]["deviceNodes"]] == ["/dev/gdrdrv"]
    assert {m["containerPath"] for m in devices["gds"]["mounts"]} == {"/etc/cufile.json",
                                                                      "/run/udev"}
    assert not any(n["path"].startswith("/dev/infiniband") for n in
                   devices["all"]["deviceNodes"])  # `all` is the GPUs


@pytest.mark.parametrize("backend", ["wsl", "tegra"])
def test_backends_without_gpus_give_one_all_device(sim_root_factory: SimRootFactory,
                                                   backend: str) -> None:
    from nvhook.sim import SimSpec

    sim = sim_root_factory(SimSpec(gpus=1, **{backend: True}))
    spec = host_spec(_config(sim))
    validate(spec)
    assert [d["name"] for d in spec["devices"]] == ["all"]
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == (["/dev/dxg"] if backend == "wsl" else
                     ["/dev/nvhost-ctrl", "/dev/nvhost-ctrl-gpu", "/dev/nvmap"])
    assert "deviceNodes" not in spec["containerEdits"]
    assert spec["containerEdits"]["mounts"]
