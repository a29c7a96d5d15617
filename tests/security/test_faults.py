"""Fault injection through real runc starts: a failure at every step of the pipeline leaves
the container namespace and the host exactly as before, and the error names the step.

nvhook's hook runs under tools/hookwrap.py, which snapshots the container (its namespace's
mountinfo, every rootfs entry, the ld.so.cache digest, its devices.list) before and after
the hook. Faults (nvmount/faults.py) are armed by `[nvhook] test-faults = true` in the config,
the hook entry's env NVHOOK_FAULT=<step prefix>[:<nth>] and --debug. NVML errors come from
the simulated driver (NVSIM_FAIL=<function>:<code>). "A container that dies mid-way": the
wrapper SIGKILLs the container init at a chosen delay after the hook started.

CI runs one or two faults of every kind of step; NVHOOK_LONG=1 fails every effect in turn
(`NVHOOK_FAULT=:N` for N = 1, 2, ... until the start succeeds) and many kill delays.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from nvhook.dev.demo.bundle import HookEntry
from nvhook.dev.demo.driver import nvhook_hook_entry
from tests.fixtures.containers import relevant_mount_marks
from tests.fixtures.security import TOOLS, AttackRig, HostOracle, Outcome, token
from tests.security.conftest import LONG

pytestmark = [pytest.mark.root, pytest.mark.e2e]

# one or two of every kind of step (the step names of nvmount.apply.steps / effects / pipeline)
CI_FAULTS = (
    "nvml init", "open source:1", "open source:9", "mountpoint:1", "mountpoint:14",
    "mount :1", "mount :13", "mount procfs", "write:1", "write:3", "symlink:1", "symlink:7",
    "seal:1", "cgroup allow:1", "cgroup allow:2", "write ld.so.cache",
)
KILL_DELAYS = (0.0, 0.02, 0.05, 0.08, 0.11, 0.14, 0.17, 0.2, 0.3) if not LONG else tuple(
    round(0.01 * i, 2) for i in range(40))
NVML_FAILURES = (
    "nvmlInit_v2:DRIVER_NOT_LOADED", "nvmlInit_v2:UNKNOWN", "nvmlDeviceGetCount_v2:UNKNOWN",
    "nvmlDeviceGetHandleByIndex_v2:GPU_IS_LOST", "nvmlDeviceGetUUID:GPU_IS_LOST",
    "nvmlDeviceGetMinorNumber:UNKNOWN", "nvmlDeviceGetPciInfo:UNKNOWN",
    "nvmlSystemGetDriverVersion:UNKNOWN", "nvmlSystemGetCudaDriverVersion:UNKNOWN",
    "nvmlDeviceGetMigMode:UNKNOWN", "nvmlDeviceGetBrand:UNKNOWN",
)


def _wrapped(rig: AttackRig, report: Path, env: tuple[str, ...], *, debug: bool,
             kill_after: float | str = -1, config: Path | None = None) -> HookEntry:
    text = (config or Path(rig.sim.config_path)).read_text()
    armed = rig.tmp / f"faults-{token()}.toml"  # fault injection: [nvhook] test-faults = true
    armed.write_text(text.replace("[nvhook]\n", "[nvhook]\ntest-faults = true\n", 1))
    hook = nvhook_hook_entry(rig.launcher, armed, *(["--debug"] if debug else []))
    return HookEntry("/usr/bin/python3",
                     ("python3", "-I", str(TOOLS / "hookwrap.py"), str(report), str(kill_after),
                      hook.path, *hook.args[1:]), (*hook.env, *env), timeout=60)


def _start(rig: AttackRig, report: Path, env: tuple[str, ...] = (), *, debug: bool = False,
           kill_after: float | str = -1, caps: str = "all",
           config: Path | None = None) -> tuple[Outcome, dict[str, Any]]:
    hook = _wrapped(rig, report, env, debug=debug, kill_after=kill_after, config=config)
    out = rig.start(caps=caps, nvhook=hook)
    return out, json.loads(report.read_text())


def _assert_unchanged(rep: dict[str, Any], *, alive: bool = True) -> None:
    """Container state before == after the hook. Known limit of `ldcache = "ldconfig"`: when
    the init dies while ldconfig runs ("after ldconfig: ..."), ldconfig's rewrite of the
    image's ld.so.cache is not undone; the default (the hook writes the cache) undoes it too."""
    before, after = rep["before"], rep["after"]
    keys: tuple[str, ...] = ("mountinfo", "files", "ldcache", "devices")
    if not alive:
        keys = ("host_files", "devices")
        if "after ldconfig:" not in rep["stderr"]:
            keys += ("ldcache",)
    for key in keys:
        b, a = set(before[key] or ()), set(after[key] or ())
        if key == "mountinfo":  # other sessions' mounts show up in a container before pivot
            marks = relevant_mount_marks()
            b = {x for x in b if any(m in x for m in marks)}
            a = {x for x in a if any(m in x for m in marks)}
        if a != b:
            raise AssertionError(f"container {key} changed: +{sorted(a - b)[:10]} "
                                 f"-{sorted(b - a)[:10]}")


def _injected_step(stderr: str) -> str:
    found = re.findall(r"injecting a fault at step '(.*)'", stderr)
    assert len(found) == 1, stderr[-2000:]
    return str(found[0])


def _last_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _check_fault(rig: AttackRig, oracle: HostOracle, tmp_path: Path, spec: str) -> str | None:
    """Arm `spec`; None if no step matched (the start succeeded), else the failed step."""
    report = tmp_path / f"report-{abs(hash(spec))}.json"
    env = (f"NVHOOK_FAULT={spec}",)
    out, rep = _start(rig, report, env, debug=True)
    if rep["rc"] == 0:
        assert "injecting a fault" not in rep["stderr"]
        return None
    assert not out.ok
    step = _injected_step(rep["stderr"])
    error = _last_line(rep["stderr"])
    # the step itself, or (a mount point made inside a mount step) the path it is about
    assert step in error or step.split(" ", 1)[-1] in error, (step, error)
    assert "internal error" not in error and "Traceback" not in error, error
    _assert_unchanged(rep)
    oracle.assert_clean()
    return step


@pytest.mark.parametrize("spec", CI_FAULTS)
def test_fault_at_each_kind_of_step(rig: AttackRig, oracle: HostOracle, tmp_path: Path,
                                    spec: str) -> None:
    step = _check_fault(rig, oracle, tmp_path, spec)
    assert step is not None, f"NVHOOK_FAULT={spec} matched no step"
    print(f"{spec}: {step}")


@pytest.mark.slow
def test_fault_at_every_step(rig: AttackRig, oracle: HostOracle, tmp_path: Path) -> None:
    """NVHOOK_FAULT=:N for every N until a start succeeds: every effect fails once."""
    steps = []
    for n in range(1, 1000):
        step = _check_fault(rig, oracle, tmp_path, f":{n}")
        if step is None:
            break
        steps.append(step)
    kinds = sorted({s.split(" ", 1)[0] for s in steps})
    print(f"\n{len(steps)} steps failed in turn, kinds: {kinds}")
    assert len(steps) > 50


@pytest.mark.parametrize("fail", NVML_FAILURES)
def test_nvml_error(rig: AttackRig, oracle: HostOracle, tmp_path: Path, fail: str) -> None:
    """An NVML error fails the start with one line naming the function (nothing changed).
    The inventory cache is off: NVML must run for its errors to show."""
    no_cache = rig.config(replace={"[nvhook]\n": '[nvhook]\ncache-dir = ""\n'})
    out, rep = _start(rig, tmp_path / "report.json", (f"NVSIM_FAIL={fail}",), config=no_cache)
    function = fail.split(":")[0]
    print(f"{fail}: rc {rep['rc']}: {rep['stderr'].strip()}")
    assert rep["rc"] == 1 and not out.ok, rep
    error = rep["stderr"].strip()
    assert "\n" not in error and "Traceback" not in error, error
    assert function in error or "nvml" in error.lower(), error
    _assert_unchanged(rep)
    oracle.assert_clean()


@pytest.mark.parametrize("delay", KILL_DELAYS)
def test_container_dies_mid_way(rig: AttackRig, oracle: HostOracle, tmp_path: Path,
                                delay: float) -> None:
    """SIGKILL the container init `delay` s after the hook started: the hook either finished
    first, or fails with one line and leaves the rootfs and the device cgroup as they were;
    no helper process outlives it; the host is unchanged."""
    out, rep = _start(rig, tmp_path / "report.json", (), kill_after=delay)
    assert not out.ok or rep["killed_at"] is None, out.describe()
    print(f"kill after {delay}s: hook rc {rep['rc']} in {rep['seconds']:.2f}s, "
          f"killed at {rep['killed_at']}: {rep['stderr'].strip()[:200]}")
    if rep["rc"] != 0:
        error = rep["stderr"].strip()
        assert error and "\n" not in error and "Traceback" not in error, error
        _assert_unchanged(rep, alive=False)
    _assert_no_stray_helpers(rig.launcher)
    oracle.assert_clean()


def _assert_no_stray_helpers(launcher: Path) -> None:
    """No process of the hook (ldconfig sandbox, NVML child) is left behind."""
    deadline = time.monotonic() + 5
    while True:
        stray = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if str(launcher).encode() in cmdline:
                stray.append(pid)
        if not stray:
            return
        assert time.monotonic() < deadline, f"hook processes left: {stray}"
        time.sleep(0.05)


SLEEP_STEPS = ("nvml init", "open source:1", "mountpoint:3", "mount :5", "write:1",
               "symlink:3", "seal:1", "cgroup allow:1", "write ld.so.cache")


@pytest.mark.parametrize("step", SLEEP_STEPS)
def test_container_dies_while_the_hook_is_at_a_step(rig: AttackRig, oracle: HostOracle,
                                                    tmp_path: Path, step: str) -> None:
    """The hook sleeps at `step` (NVHOOK_FAULT_SLEEP) and the container init is SIGKILLed
    right then: the hook must fail with one line, undo what it did (rootfs entries and
    device cgroup rules as before) and leave no helper process and nothing on the host."""
    env = (f"NVHOOK_FAULT={step}", "NVHOOK_FAULT_SLEEP=0.5")
    out, rep = _start(rig, tmp_path / "report.json", env, debug=True, kill_after="at-sleep")
    assert rep["killed_at"] is not None, rep["stderr"][-2000:]
    error = _last_line(rep["stderr"])
    print(f"killed at {step}: hook rc {rep['rc']}: {error[:200]}")
    assert not out.ok
    assert rep["rc"] == 1, f"the hook finished on a dead container: {error}"
    assert "Traceback" not in error and "internal error" not in error, error
    _assert_unchanged(rep, alive=False)
    _assert_no_stray_helpers(rig.launcher)
    oracle.assert_clean()
