"""What a container start loads (issue 9), counted, not timed: the hook's common path imports
none of dataclasses, typing, inspect, logging, tomllib, re, enum, json or contextlib, and
defines no dataclass; a container that wants no GPU loads little beyond the gate. The same
holds for the runtime wrapper's create of a GPU container in spec delivery (issue 22), and its
sh launcher starts no interpreter at all for runc's other commands or a non-GPU create.

The probe below is the hook launcher's own sequence (gate, then the CLI) run by
/usr/bin/python3 -IS; instead of exiting it writes the loaded module names to $PROBE_OUT.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import _prctl  # type: ignore[import-not-found]
import pytest

from nvhook.dev.demo.bundle import CUDA_IMAGE_ENV, Runc
from nvhook.dev.demo.driver import launcher_python, nvhook_command
from nvhook.launch import pack
from tests.fixtures.containers import GpuRig, created_container

pytestmark = [pytest.mark.root, pytest.mark.e2e]

REPO = Path(__file__).resolve().parent.parent.parent
FORBIDDEN = {"dataclasses", "typing", "inspect", "logging", "tomllib", "tomli", "re", "enum",
             "json", "contextlib", "importlib.util", "argparse", "yaml"}
PROBE = """\
import posix as os
import sys
sys.path.extend({paths!r})
import gc
gc.disable()
from nvhook.launch.screen import screen
declined, data = screen(sys.argv[1:], os.getcwd())
if not declined:
    import nvhook
    from nvhook.launch.pack import use_pack
    use_pack(nvhook.__file__.rsplit("/", 2)[0])
    from nvhook.cli import main
    rc = main(sys.argv[1:], cwd=os.getcwd(), stdin=data)
    assert rc == 0, rc
dataclasses = [m for m, mod in list(sys.modules.items()) if m.startswith(("nvhook", "nvmount"))
               for v in vars(mod).values() if isinstance(v, type) and "__dataclass_fields__"
               in vars(v)]
fd = os.open(os.environ[b"PROBE_OUT"], os.O_WRONLY | os.O_CREAT, 0o600)
os.write(fd, " ".join(["declined" if declined else "hook", *sorted(sys.modules), "|",
                      *dataclasses]).encode())
"""


def run_probe(tmp: Path, argv: list[str], state: str, cwd: Path) -> tuple[str, set[str],
                                                                          list[str]]:
    script = tmp / "probe.py"
    paths = [str(REPO), os.path.dirname(_prctl.__file__)]
    script.write_text(PROBE.format(paths=paths))
    report = tmp / "modules.txt"
    report.unlink(missing_ok=True)
    proc = subprocess.run(["/usr/bin/python3", "-IS", str(script), *argv], input=state.encode(),
                          capture_output=True, cwd=cwd, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "PROBE_OUT": str(report)})
    assert proc.returncode == 0, proc.stderr.decode()
    out = report.read_text()
    what, *rest = out.split(" ")
    sep = rest.index("|")
    return what, set(rest[:sep]), rest[sep + 1:]


def test_no_gpu_container_loads_only_the_gate(gpu_rig: GpuRig, tmp_path: Path) -> None:
    bundle = gpu_rig.baseline.bundle(["/bin/true"], env=["PATH=/bin"])
    state = f'{{"pid": 1, "bundle": "{bundle}"}}'
    what, modules, dataclasses = run_probe(tmp_path, ["prestart"], state, bundle)
    ours = {m for m in modules if m.startswith(("nvhook", "nvmount"))}
    assert what == "declined"
    assert ours == {"nvhook", "nvhook.launch", "nvhook.launch.screen", "nvhook.config",
                    "nvhook.config.basics", "nvhook.hook", "nvhook.hook.request_env",
                    "nvmount", "nvmount.jsonio"}, ours  # the screen's names; the strict decoder
    assert not modules & (FORBIDDEN | {"os", "ctypes"}) and not dataclasses


def test_gpu_container_start_loads_none_of_the_heavy_modules(gpu_rig: GpuRig, tmp_path: Path,
                                                             runc_default: Runc) -> None:
    """A CUDA image's prestart (its NVIDIA_REQUIRE_CUDA checked) on a warm node."""
    config = str(gpu_rig.sim.config_path)
    for _attempt in range(2):  # the first start fills the config and inventory caches
        bundle = gpu_rig.baseline.bundle(["/bin/true"], env=list(CUDA_IMAGE_ENV))
        with created_container(bundle, runc_default, tag="hot") as ctr:
            state = f'{{"pid": {ctr.pid}, "bundle": "{bundle}"}}'
            what, modules, dataclasses = run_probe(tmp_path, ["--config", config, "prestart"],
                                                   state, bundle)
    assert what == "hook"
    assert not modules & FORBIDDEN, sorted(modules & FORBIDDEN)
    assert "nvmount.discover.nvml_worker" not in modules  # the inventory came from the cache
    assert "nvmount.ldcache.sandbox" not in modules  # the cache was written, not ldconfig run
    # a cgroupfs path (runc's default driver): no systemd registration, no D-Bus, no socket
    assert not {m for m in modules if m.startswith("nvmount.systemd")} | (modules & {"socket"})
    assert not dataclasses
    assert "ctypes" not in modules  # nvmount._libc uses the C module `_ctypes` alone
    # the pack's hook list is what a real GPU prestart imports (the launcher's sequence)
    ours = {m for m in modules if m.startswith(("nvhook", "nvmount"))} - {"nvhook.launch.pack"}
    assert ours == set(pack.HOOK_MODULES), (
        f"HOOK_MODULES: add {sorted(ours - set(pack.HOOK_MODULES))}, "
        f"drop {sorted(set(pack.HOOK_MODULES) - ours)}")


PYTHON_PROBE = """#!/bin/sh
# the interpreter of the probed launchers: python3 -X importtime, its report appended to a file
echo python >>"${PROBE_OUT:-/dev/null}"
exec /usr/bin/python3 -X importtime "$@" 2>>"${PROBE_OUT:-/dev/null}"
"""


def test_nvidias_hooks_load_little(gpu_rig: GpuRig, tmp_path: Path) -> None:
    """The six createContainer hooks of NVIDIA 1.20's spec through nvhook's nvidia-cdi-hook
    launcher: the first, which does the others' work, loads none of the heavy modules; the
    others are answered by the launcher's sh front, without starting Python."""
    from tests.e2e.test_nvidia_hooks import run_session, spec_setup
    from tests.fixtures.nvidia_specs import spec_for

    python = tmp_path / "python"
    python.write_text(PYTHON_PROBE)
    python.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "nvhook", "install", "--print", "cdihook",
                           "--python", str(python)], capture_output=True, text=True,
                          timeout=60, check=True, cwd=REPO)
    launcher = tmp_path / "nvidia-cdi-hook"
    launcher.write_text(proc.stdout)
    launcher.chmod(0o755)
    spec = spec_for("1.20.0", gpu_rig.sim.path)
    words = [h["args"][1:] for h in spec["containerEdits"]["hooks"]]

    def listed(doc: dict[str, object]) -> None:
        doc["hooks"] = {"createContainer": [{"path": str(launcher), "args": ["x", *w]}
                                            for w in words]}

    bundle = gpu_rig.baseline.bundle(["/bin/true"], edit_spec=listed)
    out = tmp_path / "probe.txt"
    proc = run_session(bundle, [[str(launcher), *w] for w in words],
                       spec_setup(bundle / "rootfs", spec, 0), {"PROBE_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr
    report = out.read_text().splitlines()
    assert report.count("python") == 1, report  # the first hook only
    modules = {line.split("|")[-1].strip() for line in report if line.startswith("import time:")}
    assert "nvhook.compat.cdihook.batch" in modules
    assert not modules & FORBIDDEN, sorted(modules & FORBIDDEN)
    assert "nvmount.ldcache.sandbox" not in modules  # the cache was written, not ldconfig run


# -- the runtime wrapper: its launcher, and the create it hands to Python ----------------------
WRAPPER_PROBE = """\
import sys
sys.path.extend({paths!r})
import posix


def _probe(path, argv, env):  # the wrapper's last step: report instead of exec'ing runc
    dataclasses = [m for m, mod in list(sys.modules.items())
                   if m.startswith(("nvhook", "nvmount")) for v in vars(mod).values()
                   if isinstance(v, type) and "__dataclass_fields__" in vars(v)]
    fd = posix.open(posix.environ[b"PROBE_OUT"], posix.O_WRONLY | posix.O_CREAT, 0o600)
    posix.write(fd, " ".join([*sorted(sys.modules), "|", *dataclasses]).encode())
    posix._exit(0)


import os
os.execve = _probe
from nvhook.runtime.wrapper import launched
launched(sys.argv[1:])
"""


def spec_config(gpu_rig: GpuRig, tmp: Path) -> Path:
    """The sim's config with a private inventory cache and no simulated procfs: a spec
    delivery that needs no hook, as on a node with a real driver."""
    config = tmp / "spec.toml"
    config.write_text(gpu_rig.config.read_text().replace("sim-procfs = true", "sim-procfs = false")
                      + f'cache-dir = "{tmp}/cache"\n')
    return config


@pytest.mark.parametrize("log", [(), ("--log", "LOG", "--log-format", "json"), ("--log", "LOG")],
                         ids=["no-log", "json-log", "text-log"])
def test_a_spec_delivery_loads_none_of_the_heavy_modules(gpu_rig: GpuRig, tmp_path: Path,
                                                         log: tuple[str, ...]) -> None:
    """A CUDA image's create through the wrapper (plan, spec edits, links and ld.so.cache in
    the rootfs) imports what the hook's path imports, and no NVML after the first start; also
    with runc's `--log` and `--log-format json`, which docker and containerd always pass (the
    wrapper writes its records there)."""
    config = spec_config(gpu_rig, tmp_path)
    script = tmp_path / "wrapper_probe.py"
    script.write_text(WRAPPER_PROBE.format(paths=[str(REPO),
                                                  os.path.dirname(_prctl.__file__)]))
    report = tmp_path / "modules.txt"
    for _attempt in range(2):  # the first create fills the inventory cache
        bundle = gpu_rig.baseline.bundle(["/bin/true"], env=list(CUDA_IMAGE_ENV))
        report.unlink(missing_ok=True)
        flags = [str(tmp_path / "runtime-log") if f == "LOG" else f for f in log]
        proc = subprocess.run(
            ["/usr/bin/python3", "-IS", str(script), str(tmp_path / "nvhook-runtime"),
             str(config), "", *flags, "create", "--bundle", str(bundle), "hot-wrapper"],
            capture_output=True, cwd=bundle, timeout=60, check=False,
            env={"PATH": "/usr/bin:/bin", "PROBE_OUT": str(report)})
        assert proc.returncode == 0, proc.stderr.decode()
    modules_text, _, dataclasses = report.read_text().partition(" | ")
    modules = set(modules_text.split())
    assert "nvhook.runtime.spec_delivery" in modules and "nvhook.runtime.rootfs" in modules
    assert not modules & FORBIDDEN, sorted(modules & FORBIDDEN)
    assert "nvmount.discover.nvml_worker" not in modules  # the inventory came from the cache
    assert not dataclasses.split()
    doc = json.loads((bundle / "config.json").read_text())
    assert not doc.get("hooks", {}).get("prestart")  # one process: no hook left
    if log:  # the records were written, in the format asked for
        lines = (tmp_path / "runtime-log").read_text().splitlines()
        assert lines and all(line.startswith("{" if "json" in log else "time=")
                             for line in lines), lines


@pytest.mark.skipif(not shutil.which("strace"), reason="needs strace")
def test_the_runtime_launcher_starts_python_only_for_gpu_creates(gpu_rig: GpuRig,
                                                                 tmp_path: Path) -> None:
    """The sh launcher execs runc itself for state, kill, delete, start and a non-GPU
    create; only a GPU container's create starts the interpreter."""
    config = spec_config(gpu_rig, tmp_path)
    prefix = tmp_path / "bin"
    proc = subprocess.run([*nvhook_command(), "--config", str(config), "install", "--prefix",
                           str(prefix), "--python", launcher_python(), "--runtime-name",
                           "nvhook-runtime"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    plain = gpu_rig.baseline.bundle(["/bin/true"], env=["PATH=/bin"])
    gpu = gpu_rig.baseline.bundle(["/bin/true"], env=["NVIDIA_VISIBLE_DEVICES=0"])
    state = str(tmp_path / "runc")  # runc's state root: nothing of the test's under /run
    calls = [(["--root", state, "state", "hot-none"], False),
             (["--root", state, "kill", "hot-none", "9"], False),
             (["--root", state, "delete", "--force", "hot-none"], False),
             (["--root", state, "start", "hot-none"], False),
             (["--root", state, "create", "--bundle", str(plain), "hot-plain"], False),
             (["--root", state, "create", "--bundle", str(gpu), "hot-gpu"], True)]
    for args, python in calls:
        trace = tmp_path / "execve.txt"
        # the launcher's own process only (it execs runc or python; not grep, not runc init)
        subprocess.run(["strace", "-qq", "-e", "trace=execve", "-o", str(trace),
                        str(prefix / "nvhook-runtime"), *args], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # runc init keeps
                       timeout=120, check=False, env={"PATH": "/usr/sbin:/usr/bin:/bin"})
        programs = [line.split('"')[1] for line in trace.read_text().splitlines()
                    if "execve(" in line and "= 0" in line]
        assert any(p.endswith("/runc") for p in programs), (args, programs)
        assert any("python" in p for p in programs) == python, (args, programs)
        for cid in ("hot-plain", "hot-gpu"):
            subprocess.run(["runc", "--root", state, "delete", "-f", cid],
                           capture_output=True, check=False)
