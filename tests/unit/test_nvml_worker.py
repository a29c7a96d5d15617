"""NVML runs in a short-lived unprivileged child: same facts as in-process, bounded in time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvhook.dev.sim.records import SimRoot
from nvmount.discover._nvml import open_nvml
from nvmount.discover.nvml_worker import query_nvml
from nvmount.errors import DriverError, NvmlError


def _nvml(sim: SimRoot) -> str:
    return os.path.join(sim.lib_dir, "libnvidia-ml.so.1")


def test_child_answers_like_an_in_process_session(sim_mig_root: SimRoot) -> None:
    with open_nvml(_nvml(sim_mig_root)) as s:
        expected = (s.driver_version(), s.cuda_version(), s.devices())
    assert query_nvml(_nvml(sim_mig_root)) == expected


def test_nvml_is_never_loaded_into_the_calling_process(sim_root: SimRoot) -> None:
    # a fresh interpreter: other tests load NVML into this one on purpose
    script = ("import sys; from nvmount.discover.nvml_worker import query_nvml; "
              "query_nvml(sys.argv[1]); print(open('/proc/self/maps').read())")
    out = subprocess.run([sys.executable, "-c", script, _nvml(sim_root)], check=True,
                         capture_output=True, text=True).stdout
    assert "libnvidia-ml" not in out and os.path.realpath(_nvml(sim_root)) not in out


def test_nvml_errors_cross_the_pipe(sim_root: SimRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSIM_FAIL", "nvmlInit_v2:DRIVER_NOT_LOADED")
    with pytest.raises(NvmlError, match=r"Driver Not Loaded .*kernel module loaded"):
        query_nvml(_nvml(sim_root))


def test_a_hanging_library_is_killed_after_the_timeout(tmp_path: Path) -> None:
    src = tmp_path / "hang.c"
    src.write_text("#include <unistd.h>\nint nvmlInit_v2(void) { for (;;) pause(); }\n")
    lib = tmp_path / "libnvidia-ml.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    start = time.monotonic()
    with pytest.raises(DriverError, match=r"no answer within 0\.5 s .*nvidia-persistenced"):
        query_nvml(str(lib), timeout=0.5)
    assert time.monotonic() - start < 5


def test_a_crashing_library_is_a_clear_error(tmp_path: Path) -> None:
    src = tmp_path / "crash.c"
    src.write_text("#include <signal.h>\nint nvmlInit_v2(void) { raise(SIGSEGV); return 0; }\n")
    lib = tmp_path / "libnvidia-ml.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    with pytest.raises(DriverError, match="died without an answer"):
        query_nvml(str(lib))
