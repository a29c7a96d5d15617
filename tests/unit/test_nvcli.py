"""The nvidia-container-cli drop-in (nvhook.compat.nvcli): argp-style parsing, libnvc's output
formats for `info` and `list` against the simulated driver, and libnvc's error shape.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.compat.nvcli.args import parse_cli
from nvhook.compat.nvcli.nvidia_container_cli import engine_request, error_text
from nvhook.dev.sim import SimRoot
from nvhook.errors import UsageError
from nvmount.capabilities import DriverCapability as C
from nvmount.errors import MountError, RequirementError, SelectionError

REPO = Path(__file__).resolve().parent.parent.parent

CTR_ARGV = ["--load-kmods", "configure", "--device=0", "--compute", "--compat32", "--graphics",
            "--utility", "--video", "--display", "--pid=4242", "/s/rootfs"]  # containerd 1.6


def test_containerd_argv() -> None:
    parsed = parse_cli(CTR_ARGV)
    assert parsed.global_opts == {"load-kmods": True}
    assert (parsed.command, parsed.args) == ("configure", ["/s/rootfs"])
    request = engine_request(parsed)
    assert request.devices == ("0",)
    assert request.capabilities == (C.COMPUTE | C.COMPAT32 | C.GRAPHICS | C.UTILITY | C.VIDEO
                                    | C.DISPLAY)
    assert parsed.opts["pid"] == "4242"


def test_argp_forms() -> None:
    parsed = parse_cli(["-k", "-r", "/drv", "--ldc=/c", "-u1000:1000", "configure", "/root",
                        "-d", "0", "--device", "1,2", "-cu", "--require=cuda>=12",
                        "-r", "brand=tesla", "--imex-channel=3", "--no-cgroups"])
    assert parsed.global_opts == {"load-kmods": True, "root": "/drv", "ldcache": "/c",
                                  "user": "1000:1000"}
    request = engine_request(parsed)
    assert request.devices == ("0", "1", "2") and request.capabilities == C.COMPUTE | C.UTILITY
    assert request.requirements == ("cuda>=12", "brand=tesla")
    assert request.imex_channels == (3,) and parsed.opts["no-cgroups"] is True
    assert parsed.args == ["/root"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--bogus", "info"], "unrecognized option '--bogus'"),
    (["--no", "info"], "ambiguous option '--no'"),
    (["-x", "info"], "invalid option -- 'x'"),
    (["--root"], "option '--root' requires an argument"),
    (["info", "--csv=1"], "doesn't allow an argument"),
    (["frobnicate"], "unknown command: frobnicate"),
], ids=["unknown", "ambiguous", "short", "missing-arg", "extra-arg", "command"])
def test_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_cli(argv)


def test_error_shape() -> None:
    assert error_text(RequirementError("unsatisfied condition: cuda>=99.0")) == (
        "requirement error: unsatisfied condition: cuda>=99.0")
    assert error_text(SelectionError("zz: unknown device")) == "device error: zz: unknown device"
    assert error_text(MountError("mount library", "/x", "permission denied")).startswith(
        "mount error: ")
    assert error_text(ValueError("x")).startswith("internal error: ValueError: x")


def _cli(sim: SimRoot, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
           "NVIDIA_CTK_CONFIG_FILE_PATH": sim.config_path}
    return subprocess.run([sys.executable, "-c", "import sys; from nvhook.compat.nvcli."
                           "nvidia_container_cli import main; sys.exit(main(sys.argv[1:]))",
                           *args], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def test_info_is_libnvc_text(sim_root: SimRoot) -> None:
    proc = _cli(sim_root, "info")
    assert proc.returncode == 0, proc.stderr
    gpu = sim_root.gpus[1]
    block = (f"Device Index:   {gpu.index}\nDevice Minor:   {gpu.minor}\n"
             f"Model:          {gpu.model}\nBrand:          {gpu.brand}\n"
             f"GPU UUID:       {gpu.uuid}\nBus Location:   {gpu.bus_id}\n"
             f"Architecture:   {gpu.architecture}\n")
    assert proc.stdout.startswith(f"NVRM version:   {sim_root.driver_version}\n"
                                  f"CUDA version:   {sim_root.cuda_version}\n\n")
    assert "\n" + block in proc.stdout
    assert proc.stdout.count("Device Index:") == 8
    csv = _cli(sim_root, "info", "--csv").stdout.splitlines()
    assert csv[:4] == ["NVRM version,CUDA version",
                       f"{sim_root.driver_version},{sim_root.cuda_version}", "",
                       "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture"]


def test_list_is_root_relative(sim_root: SimRoot) -> None:
    proc = _cli(sim_root, "list", "-d", "2", "-b")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "/dev/nvidiactl"
    assert f"/dev/nvidia{sim_root.gpus[2].minor}" in lines
    assert "/usr/bin/nvidia-smi" in lines
    assert not [line for line in lines if line.startswith(sim_root.path)]
    everything = _cli(sim_root, "list").stdout.splitlines()
    assert any(p.endswith(".so." + sim_root.driver_version) for p in everything)
    assert all(os.path.lexists(sim_root.path + p) for p in everything)


def test_configure_errors_have_libnvc_shape(sim_root: SimRoot) -> None:
    proc = _cli(sim_root, "configure", "--device=zz", "--pid=1", "/tmp")
    assert (proc.returncode, proc.stderr) == (1, "nvidia-container-cli: device error: zz: "
                                                 "unknown device (this host has 8 GPU(s); list "
                                                 "the GPUs and MIG devices with 'nvhook "
                                                 "info')\n")
    proc = _cli(sim_root, "configure", "relative/rootfs")
    assert "input error: invalid rootfs directory" in proc.stderr
    assert _cli(sim_root, "--version").stdout.startswith("cli-version: 1.17.8\n")
