"""`nvhook info` and `nvhook list` as processes, against simulated 8-GPU driver roots."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nvhook.dev.sim import SimRoot
from tests._compat import zip_strict

INFO_LABELS = ("Device Index", "Device Minor", "Model", "Brand", "GPU UUID", "Bus Location",
               "Architecture")


def nvhook(sim: SimRoot, *args: str, env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nvhook", "--config", sim.config_path, *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _host(sim: SimRoot, out: str) -> list[str]:
    """`list` prints paths relative to the driver root, as nvidia-container-cli does."""
    lines = out.splitlines()
    assert not any(x.startswith(sim.path) for x in lines)
    return [sim.path + x for x in lines]


def test_info_text(sim_root: SimRoot) -> None:
    out = _ok(nvhook(sim_root, "info"))
    expected = f"NVRM version:   {sim_root.driver_version}\nCUDA version:   12.4\n"
    for g in sim_root.gpus:
        values = (g.index, g.minor, g.model, g.brand, g.uuid, g.bus_id.lower(), g.architecture)
        expected += "\n" + "".join(f"{k + ':':<15} {v}\n"
                                   for k, v in zip_strict(INFO_LABELS, values))
    body, tail = out.rsplit("\n\n", 1)
    assert body + "\n" == expected
    root_line, cache_line = tail.splitlines()
    assert root_line == f"Driver root:    {sim_root.path} (nvidia-container-cli.root)"
    assert cache_line.startswith("Inventory cache: ")


def test_info_csv(sim_root: SimRoot) -> None:
    lines = _ok(nvhook(sim_root, "info", "--csv")).splitlines()
    assert lines[:4] == ["NVRM version,CUDA version", f"{sim_root.driver_version},12.4", "",
                         ",".join(INFO_LABELS)]
    g = sim_root.gpus[7]
    assert lines[-1] == (f"7,{g.minor},{g.model},{g.brand},{g.uuid},{g.bus_id.lower()},"
                         f"{g.architecture}")
    assert len(lines) == 4 + 8


def test_info_json(sim_mig_root: SimRoot) -> None:
    doc = json.loads(_ok(nvhook(sim_mig_root, "info", "--json")))
    assert (doc["driver_version"], doc["cuda_version"]) == (sim_mig_root.driver_version, "12.4")
    assert [set(g) for g in doc["gpus"]] == [{
        "index", "minor", "uuid", "bus_id", "model", "brand", "architecture", "mig_devices",
        "dri_nodes"}] * 8
    for got, sim in zip_strict(doc["gpus"], sim_mig_root.gpus):
        assert (got["index"], got["minor"], got["uuid"], got["bus_id"], got["model"],
                got["brand"], got["architecture"]) == (
            sim.index, sim.minor, sim.uuid, sim.bus_id.lower(), sim.model, sim.brand,
            sim.architecture)
        assert got["dri_nodes"] == [f"/dev/dri/card{sim.index}",
                                    f"/dev/dri/renderD{128 + sim.index}"]
        assert got["mig_devices"] == [
            {"index": m.index, "uuid": m.uuid, "gi": m.gi, "ci": m.ci, "profile": m.profile}
            for m in sim.mig_devices]
    assert doc["gpus"][0]["mig_devices"][0]["profile"] == "3g.40gb"


def test_info_text_shows_mig_devices(sim_mig_root: SimRoot) -> None:
    out = _ok(nvhook(sim_mig_root, "info"))
    m = sim_mig_root.gpus[1].mig_devices[6]
    assert f"MIG Device:     1:6 {m.uuid} (gi {m.gi}, ci 0, 1g.10gb)\n" in out


def _expected_default_list(sim: SimRoot) -> list[str]:
    root = sim.path
    nodes = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"]
    out = [f"{root}/dev/{n}" for n in nodes]
    out += [f"{root}/dev/nvidia{g.minor}" for g in sim.gpus]
    out += [f"{root}/dev/dri/{n}" for g in sim.gpus
            for n in (f"card{g.index}", f"renderD{128 + g.index}")]
    out += [f.path for f in sim.binaries]
    groups = ("utility", "compute", "ngx", "video", "graphics", "graphics-glvnd")
    for libs in (sim.libraries, sim.libraries32):
        out += [f.path for group in groups for f in libs if f.group == group]
    out += [f.path for f in sim.ipc] + [f.path for f in sim.firmware]
    return out


def _graphics_files(sim: SimRoot) -> set[str]:
    from nvhook.dev.sim import graphics

    rels = [*graphics.ICD_FILES, *graphics.TEXT_FILES,
            *(x.format(v=sim.driver_version) for x in graphics.XORG)]
    libs = [f.path for f in sim.libraries if f.group == "graphics-extra"]
    return {sim.path + r for r in rels} | set(libs)


def test_list_everything(sim_root: SimRoot) -> None:
    lines = _host(sim_root, _ok(nvhook(sim_root, "list")))
    drawing = _graphics_files(sim_root)
    assert [x for x in lines if x not in drawing] == _expected_default_list(sim_root)
    assert {x for x in lines if x in drawing} == drawing  # after the libraries (-g)
    assert all(os.path.isabs(p) and os.path.lexists(p) for p in lines)


@pytest.mark.parametrize("args,expect", [
    (["-d", "0", "-l"], "devices0+libs"),
    (["-b"], "bins"),
    (["-i", "--no-persistenced"], "ipc-no-persistenced"),
    (["-f", "--no-gsp-firmware"], "nothing"),
    (["-l", "--compat32"], "libs+libs32"),
], ids=["device-libs", "bins", "ipc", "no-firmware", "compat32"])
def test_list_options(sim_root: SimRoot, args: list[str], expect: str) -> None:
    root = sim_root.path
    lines = _host(sim_root, _ok(nvhook(sim_root, "list", *args)))
    libs = [p for p in _expected_default_list(sim_root) if p.startswith(sim_root.lib_dir)]
    libs32 = [p for p in _expected_default_list(sim_root) if p.startswith(sim_root.lib32_dir)]
    want = {
        "devices0+libs": [f"{root}/dev/{n}" for n in ("nvidiactl", "nvidia-uvm",
                                                      "nvidia-uvm-tools", "nvidia-modeset")]
        + [f"{root}/dev/nvidia0"] + libs,
        "bins": [f.path for f in sim_root.binaries],
        "ipc-no-persistenced": [f.path for f in sim_root.ipc if "persistenced" not in f.path],
        "nothing": [],
        "libs+libs32": libs + libs32,
    }[expect]
    assert lines == want


def test_list_mig_devices_and_config(sim_mig_root: SimRoot) -> None:
    root = sim_mig_root.path
    lines = _host(sim_mig_root, _ok(nvhook(sim_mig_root, "list", "-d", "1:0")))
    m = sim_mig_root.gpus[1].mig_devices[0]
    caps = f"{root}/proc/driver/nvidia/capabilities/gpu1/mig/gi{m.gi}"
    assert lines[-5:] == [f"{root}/dev/nvidia1", f"{caps}/access",
                          f"{root}/dev/nvidia-caps/nvidia-cap{m.gi_minor}",
                          f"{caps}/ci0/access", f"{root}/dev/nvidia-caps/nvidia-cap{m.ci_minor}"]
    lines = _host(sim_mig_root, _ok(nvhook(sim_mig_root, "list", "-d", "all", "--mig-config",
                                           "all")))
    at = lines.index(f"{root}/proc/driver/nvidia/capabilities/mig/config")
    assert lines[at + 1:at + 4] == [f"{root}/dev/nvidia-caps/nvidia-cap1",
                                    f"{root}/dev/nvidia-caps",
                                    f"{root}/proc/driver/nvidia/capabilities/gpu0"]
    assert not any(p.endswith("/access") for p in lines)


@pytest.mark.parametrize("args,env,rc,message", [
    (["list", "-d", "8"], {}, 1, "device error: 8: unknown device"),
    (["list", "--imex-channel", "x"], {}, 1, "unsupported IMEX channel value: x"),
    (["list", "--imex-channel", "5"], {}, 1, "missing IMEX channel 5"),
    (["list", "--mig-config", "0"], {}, 1, "only 'all' devices are currently supported"),
    (["info", "--fresh"], {"NVSIM_FAIL": "nvmlInit_v2:DRIVER_NOT_LOADED"}, 1,
     "nvml nvmlInit_v2 failed: Driver Not Loaded (code 9) (is the NVIDIA kernel module loaded?"),
    (["info", "--json", "--csv"], {}, 2, "not allowed with argument"),
    (["list", "--bogus"], {}, 2, "unrecognized arguments: --bogus"),
], ids=["unknown-device", "bad-imex", "missing-imex", "mig-config", "nvml", "json-csv",
        "bad-flag"])
def test_errors(sim_root: SimRoot, args: list[str], env: dict[str, str], rc: int,
                message: str) -> None:
    proc = nvhook(sim_root, *args, env=env)
    assert proc.returncode == rc and proc.stdout == ""
    assert message in proc.stderr.splitlines()[0]


def test_list_imex_channel(sim_root: SimRoot) -> None:
    lines = _host(sim_root, _ok(nvhook(sim_root, "list", "--imex-channel", "0", "-b")))
    assert lines[0] == f"{sim_root.path}/dev/nvidia-caps-imex-channels/channel0"


def test_missing_driver_root(tmp_path: str) -> None:
    cfg = os.path.join(str(tmp_path), "config.toml")
    with open(cfg, "w") as f:
        f.write(f'[nvidia-container-cli]\nroot = "{tmp_path}"\n')
    proc = subprocess.run([sys.executable, "-m", "nvhook", "--config", cfg, "info"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"read ld.so.cache {tmp_path}/etc/ld.so.cache: no such file")
