"""`nvhook demo` (the README's first command) as a user runs it: a subprocess, as root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.containers import require_root_and_runc

pytestmark = [pytest.mark.e2e, pytest.mark.root]


def _demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    require_root_and_runc()
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the demo's work dir lands here
    return subprocess.run([sys.executable, "-m", "nvhook", "demo", "--sim", *args],
                          capture_output=True, text=True, env=env, timeout=300, check=False)


def _gpu_rows(smi_table: str) -> list[str]:
    return [ln for ln in smi_table.splitlines() if "NVIDIA A100" in ln and ln.startswith("|")]


def test_demo_prints_nvidia_smi_of_the_selected_gpus_and_cleans_up(tmp_path: Path) -> None:
    proc = _demo(tmp_path, "--gpus", "1,2")
    assert proc.returncode == 0, proc.stderr
    table, _, listing = proc.stdout.partition("$ runc run (NVIDIA_VISIBLE_DEVICES=0)")
    assert "NVIDIA-SMI 550.54.15" in table and "CUDA Version: 12.4" in table
    assert len(_gpu_rows(table)) == 2, table
    gpus = [ln for ln in listing.splitlines() if ln.startswith("GPU ")]
    assert len(gpus) == 1, listing
    assert gpus[0].startswith("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-"), listing
    assert list(tmp_path.iterdir()) == [], "the demo left its work directory behind"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("NVHOOK_LONG") != "1", reason="long variant (NVHOOK_LONG=1)")
def test_demo_keep_leaves_the_bundles(tmp_path: Path) -> None:
    proc = _demo(tmp_path, "--keep")
    assert proc.returncode == 0, proc.stderr
    kept = Path(proc.stdout.rstrip().rsplit("kept: ", 1)[1])
    try:
        assert (kept / "bundle-smi" / "config.json").is_file()
        assert len(_gpu_rows(proc.stdout)) == 8
    finally:
        shutil.rmtree(kept)


def test_demo_rejects_unknown_option(tmp_path: Path) -> None:
    proc = _demo(tmp_path, "--bogus")
    assert proc.returncode != 0
    assert "--bogus" in proc.stderr
