"""The real-GPU validation (bench/gpucheck) runs first time on a lent GPU machine: here its kit is
built and its validator run end to end against the simulated driver, every path passing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.required import missing

REPO = Path(__file__).resolve().parent.parent.parent
pytestmark = [pytest.mark.root, pytest.mark.e2e]
PATHS = ("runc, no GPU", "hook (prestart)", "wrapper auto", "wrapper legacy", "wrapper CDI")


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    for tool in ("runc", "gcc"):
        if shutil.which(tool) is None:
            missing(f"{tool} is not installed (bash packaging/setup.sh)")
    kit = tmp_path_factory.mktemp("gpucheck") / "kit"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench/gpucheck/kit.py"), "--out", str(kit)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for part in ("bin/runc", "lib/runc", "site/prctl.py", "rootfs/usr/bin/nvprobe", "MANIFEST"):
        assert (kit / part).exists(), part
    return kit


def test_validation_passes_every_path_on_the_simulated_driver(kit: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{kit / 'site'}"}
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench/gpucheck/validate.py"),
            "--out",
            str(out),
            "--kit",
            str(kit),
            "--sim",
            "--runs",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "host.txt",
        "log.txt",
        "results.json",
        "summary.md",
    ]
    results = json.loads((out / "results.json").read_text())
    assert tuple(results) == PATHS
    for name in PATHS[1:]:
        assert results[name]["problems"] == [], name
        assert len(results[name]["seen"]["gpus"]) == 1, name
    assert results[PATHS[0]]["seen"]["gpus"] == []
    assert "nvhook doctor" in (out / "host.txt").read_text()


def test_a_missing_kit_is_one_line_with_its_fix(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench/gpucheck/validate.py"),
            "--out",
            str(tmp_path / "out"),
            "--kit",
            str(tmp_path / "none"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "bench/gpucheck/kit.py" in proc.stderr
