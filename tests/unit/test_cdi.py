"""`nvhook cdi generate`: specs valid against the official schema (v1.1.0, tests/data/cdi-schema)
and the CDI library's rules, whose container paths are the legacy plan's for the same request
on every driver layout the tests have; self-contained hooks (one, with every input in its
arguments); the hook path of the running installation; --cdi-version; stamps."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from nvhook.cdi import spec as S
from nvhook.cdi.generate import GenerateOptions, generate_spec, render, spec_layout
from nvhook.cdi.spec_hook_args import GRANT_PREFIX, parse
from nvhook.cdi.spec_hook_plan import hook_plan
from nvhook.config.load import load_config
from nvhook.config.model import HookConfig
from nvhook.dev.sim import SimRoot, SimSpec
from nvhook.errors import CdiError
from nvmount.plan.types import Bind, MountPlan, Symlink, Tmpfs, WriteFile
from tests.fixtures.sim import SIM_DEFAULT_SPEC, SIM_MIG_SPEC, SimRootFactory
from tests.unit.test_cli import NVHOOK

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "data" / "cdi-schema"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9]$|^[A-Za-z0-9]$")
HOOK = "/usr/bin/true"  # an executable stand-in: these tests never run the hook


def _config(sim: SimRoot) -> HookConfig:
    return load_config(sim.config_path, {})


def spec_of(config: HookConfig, **options: Any) -> dict[str, Any]:
    return generate_spec(config, GenerateOptions(**{"hook_path": HOOK, **options}))


def validate(spec: dict[str, Any]) -> None:
    """The official schema, then the CDI library's own rules (cdi.md: Go-side validation)."""
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry = Registry().with_resource(  # schema.json refers to "defs.json#/definitions/..."
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7))
    jsonschema.Draft7Validator(schema, registry=registry).validate(spec)
    names = [d["name"] for d in spec["devices"]]
    assert len(names) == len(set(names)) and all(NAME.match(n) for n in names)
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec["containerEdits"]]
    assert all(e for e in edits)  # a device with empty edits is invalid
    for e in edits:
        for n in e.get("deviceNodes", ()):
            assert n["type"] == "c" and set(n["permissions"]) <= set("rwm")
    from nvhook.cdi.document import check_spec

    assert check_spec(spec, "generated") is spec


# -- container paths: the spec = the legacy plan, on every driver layout ----------------------

# (id, the driver root's config for a SimRootFactory). Engineer realdrv adds the Debian driver
# packages' layouts here (tests/fixtures/realdriver.py): any factory returning a config path.
ConfigFactory = Callable[[SimRootFactory], str]


def _sim(spec: SimSpec) -> ConfigFactory:
    return lambda factory: factory(spec).config_path


DRIVER_LAYOUTS: list[tuple[str, ConfigFactory]] = [
    ("sim-8", _sim(SIM_DEFAULT_SPEC)),
    ("sim-mig", _sim(SIM_MIG_SPEC)),
    ("sim-gated", _sim(SimSpec(gpus=2, ipc=True, gated=True))),
    ("sim-minors", _sim(SimSpec(gpus=3, minors=(2, 0, 5)))),
    ("sim-no-32bit", _sim(SimSpec(gpus=2, compat32=False))),
    ("sim-wsl", _sim(SimSpec(gpus=1, wsl=True))),
    ("sim-tegra", _sim(SimSpec(gpus=1, tegra=True))),
]


def image_like(root: str, tmp: Path) -> str:
    """A rootfs whose layout is the one `spec_layout` chose for the driver root."""
    layout = spec_layout(root)
    rootfs = tmp / "image"
    for d in ("etc", "proc", "usr/bin", layout.libs_dir, layout.libs32_dir):
        (rootfs / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
    if "-linux-gnu" in layout.libs_dir:
        (rootfs / "etc/debian_version").write_text("12\n")
    return str(rootfs)


def plan_paths(plan: MountPlan) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for e in plan.entries:
        if isinstance(e, Bind):
            out.add(("node" if e.rdev is not None else "mount", e.target))
        elif isinstance(e, Symlink):
            out.add(("link", e.target, e.link))
        elif isinstance(e, Tmpfs):
            out.add(("tmpfs", e.target))
        elif isinstance(e, WriteFile):
            out.add(("file", e.target, e.data.hex()))
    return out


def legacy_plan(config: HookConfig, devices: tuple[str, ...], rootfs: str) -> MountPlan:
    from nvhook.hook.mount import engine_options
    from nvmount import pipeline
    from nvmount._libc import Libc
    from nvmount.requests import EngineRequest

    request = EngineRequest(devices=devices, capabilities=config.supported_driver_capabilities)
    plan = pipeline.plan_only(request, rootfs, engine_options(config), Libc())
    assert plan is not None
    return plan


def spec_side(spec: dict[str, Any], names: list[str], rootfs: str) -> tuple[
        set[tuple[str, ...]], MountPlan]:
    """(paths, the hook's plan) a runtime and the spec's hook give a container asking for
    `names`, the hook granted what the devices' edits name."""
    from nvmount.discover.procfiles import read_proc_files

    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    edits = [spec["containerEdits"], *(devices[n] for n in names)]
    paths = {("mount", m["containerPath"]) for e in edits for m in e.get("mounts", ())}
    paths |= {("node", n["path"]) for e in edits for n in e.get("deviceNodes", ())}
    (hook,) = spec["containerEdits"]["hooks"]
    assert hook["args"][1:4] == ["cdi", "hook", "apply"]
    inputs = parse(hook["args"][4:])
    keys = tuple(k for k in inputs.devices if any(
        v == f"{GRANT_PREFIX}{k.replace(':', '_')}={k}" for e in edits for v in e.get("env", ())))
    files = read_proc_files(inputs.proc_dir) if inputs.proc_dir else ()
    plan, _ = hook_plan(inputs, keys, files, spec_layout(inputs.driver_root))
    assert os.path.isdir(rootfs)
    return paths | plan_paths(plan), plan


def requests(spec: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """(CDI name, the legacy devices of the same request): every GPU and MIG device, `all`."""
    out = [(d["name"], (d["name"],)) for d in spec["devices"]
           if re.fullmatch(r"\d+(:\d+)?", d["name"])]
    if any(d["name"] == "all" for d in spec["devices"]):
        out.append(("all", ("all",)))
    return out


@pytest.mark.parametrize("make", [m for _, m in DRIVER_LAYOUTS],
                         ids=[i for i, _ in DRIVER_LAYOUTS])
def test_container_paths_are_the_legacy_plans(sim_root_factory: SimRootFactory,
                                               tmp_path: Path, make: ConfigFactory) -> None:
    config = load_config(make(sim_root_factory), {})
    spec = spec_of(config)
    validate(spec)
    rootfs = image_like(config.cli.root or "/", tmp_path)
    assert requests(spec)
    for name, devices in requests(spec):
        legacy = legacy_plan(config, devices, rootfs)
        ours, hook = spec_side(spec, [name], rootfs)
        assert ours == plan_paths(legacy), name
        assert hook.ldconfig_dirs == legacy.ldconfig_dirs, name
        assert hook.ldcache_entries == legacy.ldcache_entries, name
        assert hook.device_rules == ()  # the runtime allows the spec's nodes, the hook nothing


def test_binaries_stay_on_path_and_libraries_in_the_library_dir(sim_root: SimRoot) -> None:
    """Issue 20 item 7: one directory per kind is the layout's, never a host subdirectory."""
    spec = spec_of(_config(sim_root))
    targets = {m["containerPath"] for m in spec["containerEdits"]["mounts"]}
    assert "/usr/bin/nvidia-smi" in targets
    assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{sim_root.driver_version}" in targets


def test_mig_enabled_full_gpu_keeps_its_procfs_entry(sim_mig_root: SimRoot,
                                                     tmp_path: Path) -> None:
    spec = spec_of(_config(sim_mig_root))
    rootfs = image_like(sim_mig_root.path, tmp_path)
    for gpu in (g for g in sim_mig_root.gpus if g.mig_enabled):
        paths, _ = spec_side(spec, [str(gpu.index)], rootfs)
        assert ("mount", f"/proc/driver/nvidia/gpus/{gpu.proc_bus_id}") in paths
        assert ("node", f"/dev/nvidia{gpu.minor}") in paths


# -- the spec's one hook ------------------------------------------------------------------------

def test_one_self_contained_hook(sim_mig_root: SimRoot) -> None:
    spec = spec_of(_config(sim_mig_root))
    (hook,) = spec["containerEdits"]["hooks"]
    assert hook["hookName"] == "createRuntime" and hook["path"] == HOOK
    assert not any("hooks" in d["containerEdits"] for d in spec["devices"])
    inputs = parse(hook["args"][4:])
    assert inputs.driver_root == sim_mig_root.path and inputs.sim_procfs
    assert inputs.proc_dir == f"{sim_mig_root.proc_root}/driver/nvidia"
    assert ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so") in inputs.links
    assert inputs.folders[:1] == ("/usr/lib/x86_64-linux-gnu",)
    assert {"0", "0:1", "1:6", "3"} <= set(inputs.devices)
    gpu0 = next(g for g in sim_mig_root.gpus if g.index == 0)
    assert inputs.devices["0:1"].nodes[0][1:] == (195, gpu0.minor)
    assert len(inputs.devices["0:1"].files) == 2  # gi and ci access files
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert devices["0:1"]["env"] == ["NVHOOK_CDI_DEVICE_0_1=0:1"]
    assert {f"{GRANT_PREFIX}3=3", f"{GRANT_PREFIX}0_1=0:1"} <= set(devices["all"]["env"])


def test_no_hook_and_device_ids(sim_root: SimRoot) -> None:
    config = _config(sim_root)
    bare = generate_spec(config, GenerateOptions(hooks=False, device_ids=("1",),
                                                 all_device=False, cdi_version="0.6.0"))
    validate(bare)
    assert [d["name"] for d in bare["devices"]] == ["1", sim_root.gpus[1].uuid]
    assert "hooks" not in bare["containerEdits"]
    assert S.STAMP_ANNOTATION in bare["annotations"]  # 0.6.0 has annotations: the stamp
    with pytest.raises(CdiError, match="--device-id 9: no such GPU"):
        generate_spec(config, GenerateOptions(hooks=False, device_ids=("9",)))


def test_strategies_vendor_class_and_versions(sim_root: SimRoot) -> None:
    config = _config(sim_root)
    by_uuid = spec_of(config, strategy="uuid")
    assert all(d["name"].startswith("GPU-") or d["name"] == "all" for d in by_uuid["devices"])
    typed = spec_of(config, strategy="type-index", vendor="example.com", device_class="gpu")
    assert [d["name"] for d in typed["devices"]][:2] == ["gpu0", "gpu1"]
    assert typed["kind"] == "example.com/gpu" and typed["cdiVersion"] == "0.5.0"  # hostPath
    validate(typed)
    forced = spec_of(config, cdi_version="0.7.0")
    assert forced["cdiVersion"] == "0.7.0"
    validate(forced)
    with pytest.raises(CdiError, match=r"--cdi-version 0\.4\.0: this spec needs 0\.5\.0"):
        spec_of(config, cdi_version="0.4.0")


def test_yaml_and_json(sim_mig_root: SimRoot) -> None:
    from nvhook.cdi.document import parse_document

    spec = spec_of(_config(sim_mig_root))
    text = render(spec, "yaml")
    assert "&id" not in text and "*id" not in text  # no YAML aliases for shared edits
    assert parse_document(text.encode(), "y") == spec == yaml.safe_load(text)  # "1:6" a str
    assert parse_document(render(spec, "json").encode(), "j") == spec


def test_stamp_names_driver_majors_state_and_options(sim_root: SimRoot) -> None:
    from nvhook.cdi.stamp import parse_stamp

    spec = spec_of(_config(sim_root), strategy="uuid")
    stamp = parse_stamp(S.spec_stamp(spec) or "")
    assert stamp["driver"] == "550.54.15" and "nvidia-uvm:506" in stamp["majors"]
    assert stamp["digest"].startswith("sha256:") and stamp["state"].startswith("sha256:")
    assert (stamp["strategy"], stamp["ids"], stamp["config"]) == ("uuid", "all",
                                                                  sim_root.config_path)


@pytest.mark.parametrize("backend", ["wsl", "tegra"])
def test_backends_without_gpus_give_one_all_device(sim_root_factory: SimRootFactory,
                                                   backend: str) -> None:
    sim = sim_root_factory(SimSpec(gpus=1, **{backend: True}))
    spec = spec_of(_config(sim))
    validate(spec)
    assert [d["name"] for d in spec["devices"]] == ["all"]
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == (["/dev/dxg"] if backend == "wsl" else
                     ["/dev/nvhost-ctrl", "/dev/nvhost-ctrl-gpu", "/dev/nvmap"])


def test_gated_families_are_devices(sim_root_factory: SimRootFactory) -> None:
    spec = spec_of(_config(sim_root_factory(SimSpec(gpus=1, gated=True))))
    validate(spec)
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert [n["path"] for n in devices["gdrcopy"]["deviceNodes"]] == ["/dev/gdrdrv"]
    assert {m["containerPath"] for m in devices["gds"]["mounts"]} == {"/etc/cufile.json",
                                                                      "/run/udev"}


# -- the hook path: the running installation's launcher ---------------------------------------

def test_hook_path_is_this_installations_launcher(tmp_path: Path) -> None:
    from nvhook.admin.install import import_paths, render_launcher
    from nvhook.cdi import spec_hook_path as hookpath

    prefix = tmp_path / "bin"
    prefix.mkdir()
    launcher = prefix / "nvhook-hook"
    launcher.write_text(render_launcher("/usr/bin/python3", import_paths()))
    launcher.chmod(0o755)
    assert hookpath.default_hook_path(f"/nonexistent:{prefix}") == str(launcher)
    other = tmp_path / "other"
    other.mkdir()
    (other / "nvhook-hook").write_text(render_launcher("/usr/bin/python3", ["/elsewhere"]))
    (other / "nvhook-hook").chmod(0o755)
    assert hookpath.default_hook_path(f"{other}:{prefix}") == str(launcher)  # not another's
    launcher.chmod(0o644)
    found = None
    try:
        found = hookpath.default_hook_path(str(other))
    except CdiError as err:
        assert "run `nvhook install`, or name one with --hook-path" in str(err)
    assert found in (None, os.path.join(os.sys.prefix, "bin", "nvhook"))  # the venv's


def _cdi(sim: SimRoot, *args: str,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NVHOOK, "--config", sim.config_path, "cdi", *args],
                          capture_output=True, text=True, check=False, timeout=120, env=env)


def test_generate_refuses_a_missing_default_hook(sim_root: SimRoot, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from nvhook.cdi import spec_hook_path as hookpath

    monkeypatch.setattr(hookpath, "PACKAGE_LAUNCHER", str(tmp_path / "nvhook"))
    monkeypatch.setattr(hookpath, "INSTALL_PREFIX", str(tmp_path))
    monkeypatch.setattr(hookpath.sys, "prefix", hookpath.sys.base_prefix)
    with pytest.raises(CdiError, match="no launcher of this nvhook installation"):
        generate_spec(_config(sim_root), GenerateOptions())
    spec = generate_spec(_config(sim_root), GenerateOptions(hook_path="/nonexistent/nvhook"))
    assert spec["containerEdits"]["hooks"][0]["path"] == "/nonexistent/nvhook"  # explicit


def test_cli_generate_with_the_venv_launcher(sim_root: SimRoot, tmp_path: Path) -> None:
    out = tmp_path / "nvidia.yaml"
    proc = _cdi(sim_root, "generate", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    hook = yaml.safe_load(out.read_text())["containerEdits"]["hooks"][0]["path"]
    assert os.access(hook, os.X_OK), hook
