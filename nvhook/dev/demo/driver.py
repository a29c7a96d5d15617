"""The driver side of a demo/test container: real driver or simulated one, and the hook launcher.

Stage: demo/test support, off the hook's path. Creates a simulated driver (`nvhook sim create`)
and installs the hook launcher (`nvhook install --prefix`) under caller-owned directories, and
builds the `hooks.prestart` entries that use them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from nvhook.dev.demo.bundle import HookEntry
from nvhook.errors import NvhookError
from nvmount.records import record

HOOK_NAME = "nvidia-container-runtime-hook"
REAL_DRIVER_NODE = "/dev/nvidiactl"
NVML_SONAME = "libnvidia-ml.so.1"


@record
class DriverSetup:
    """A driver for containers: `config` is passed to the hook (None: the default config)."""

    root: Path
    config: Path | None
    prestart: tuple[HookEntry, ...]  # steps that run before our hook (the sim's /proc/driver)
    simulated: bool


def nvhook_command() -> list[str]:
    """argv prefix that runs this installation's `nvhook` (the console script, else -m)."""
    script = Path(sys.executable).parent / "nvhook"
    if os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "nvhook"]


def _run_nvhook(*args: str) -> None:
    argv = [*nvhook_command(), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NvhookError(
            f"run {' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip() or proc.stdout}"
        )


def create_sim_driver(root: Path, gpus: int, launcher: Path | None = None) -> DriverSetup:
    """`nvhook sim create root --gpus N --ipc`, plus the sim's prestart step for containers.

    The step runs `launcher` (an installed hook launcher: the system interpreter, isolated)
    when given, else this installation's `nvhook`.
    """
    _run_nvhook("sim", "create", str(root), "--gpus", str(gpus), "--ipc")
    config = root / "config.toml"
    return DriverSetup(root, config, (sim_prestart_entry(config, launcher),), simulated=True)


def sim_prestart_entry(config: Path, launcher: Path | None = None) -> HookEntry:
    """The `nvhook sim prestart` hook entry (tmpfs on the container's /proc/driver)."""
    args = ("--config", str(config), "sim", "prestart")
    if launcher is not None:
        return HookEntry(str(launcher), ("nvhook-hook", *args))
    cmd = nvhook_command()
    return HookEntry(cmd[0], ("nvhook", *cmd[1:], *args))


def real_driver() -> DriverSetup:
    return DriverSetup(Path("/"), None, (), simulated=False)


def has_real_driver() -> bool:
    """A loaded NVIDIA driver: /dev/nvidiactl and libnvidia-ml.so.1 in the host ld.so.cache."""
    if not os.path.exists(REAL_DRIVER_NODE):
        return False
    try:
        with open("/etc/ld.so.cache", "rb") as f:
            return NVML_SONAME.encode() + b"\0" in f.read()
    except OSError:
        return False


def launcher_python() -> str:
    """The interpreter for demo/test launchers: $NVHOOK_LAUNCHER_PYTHON, else /usr/bin/python3
    when it is this Python version (what `nvhook install` defaults to), else this interpreter
    (a venv of another version: its real path, which must be executable by every user that
    runs the launcher, e.g. rootless podman's)."""
    from nvhook.admin.install import DEFAULT_PYTHON

    chosen = os.environ.get("NVHOOK_LAUNCHER_PYTHON")
    if chosen:
        return chosen
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        got = subprocess.run([DEFAULT_PYTHON, "-IS", "-c",
                              "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
    except OSError:
        got = ""
    return DEFAULT_PYTHON if got.strip() == want else os.path.realpath(sys.executable)


def install_hook(prefix: Path) -> Path:
    """`nvhook install --prefix prefix`; return the launcher it wrote."""
    _run_nvhook("install", "--prefix", str(prefix), "--python", launcher_python())
    launcher = prefix / HOOK_NAME
    if not launcher.is_file():
        raise NvhookError(f"install hook into {prefix}: {launcher} was not written")
    return launcher


def nvhook_hook_entry(launcher: Path, config: Path | None, *flags: str) -> HookEntry:
    """Our prestart entry, as the toolkit's installers write it (plus --config)."""
    args = [HOOK_NAME]
    if config is not None:
        args += ["--config", str(config)]
    return HookEntry(str(launcher), (*args, *flags, "prestart"))
