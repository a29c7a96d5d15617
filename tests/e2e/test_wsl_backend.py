"""The WSL2 backend in a real runc container: a simulated WSL2 guest (`nvhook sim create
--wsl`: /dev/dxg and a driver store under /usr/lib/wsl) gets /dev/dxg and no /dev/nvidia*,
the driver store at its own path, libdxcore.so, /usr/bin/nvidia-smi linked into the store,
and libcuda.so.1 resolving to the store's libcuda.so.1.1 through the ld.so.cache."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nvhook.dev.demo.bundle import Runc
from nvhook.dev.sim import SimSpec
from nvhook.dev.sim.wsl import STORE
from tests.fixtures.containers import GpuRig, RootfsCache, rig_for
from tests.fixtures.sim import SimRootFactory
from tests.unit.test_cli import NVHOOK

pytestmark = [pytest.mark.e2e, pytest.mark.root]
SCRIPT = rf"""
ls /dev | grep -E '^(dxg|nvidia)' | sed 's/^/dev /'
msg=$( (exec 3<>/dev/dxg) 2>&1 ); echo "open dxg: ${{msg:-opened}}"
ls {STORE} | sed 's/^/store /'
[ -f /usr/lib/wsl/lib/libdxcore.so ] && echo dxcore
echo "smi $(readlink /usr/bin/nvidia-smi)"
[ -x /sbin/ldconfig ] && /sbin/ldconfig -p | grep wsl | sed 's/^/cache /'
echo done
"""


@pytest.fixture(scope="module")
def wsl(tmp_path_factory: pytest.TempPathFactory, rootfs_cache: RootfsCache,
        runc_default: Runc, sim_root_factory: SimRootFactory, hook_launcher: Path) -> GpuRig:
    return rig_for(sim_root_factory(SimSpec(gpus=1, wsl=True)), tmp_path_factory, rootfs_cache,
                   runc_default, hook_launcher, "wsl-e2e")


def test_wsl_guest_gets_dxg_and_the_driver_store(wsl: GpuRig) -> None:
    out = wsl.containers.sh(SCRIPT, env=("NVIDIA_VISIBLE_DEVICES=all",
                                         "NVIDIA_DRIVER_CAPABILITIES=compute,utility")).stdout
    assert [x for x in out.splitlines() if x.startswith("dev ")] == ["dev dxg"], out
    assert "open dxg: " in out and "Operation not permitted" not in out
    store = {x.split()[1] for x in out.splitlines() if x.startswith("store ")}
    assert store == {"libcuda.so.1.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1",
                     "nvcubins.bin", "nvidia-smi"}
    assert "dxcore" in out and f"smi {STORE}/nvidia-smi" in out
    assert f"cache \tlibcuda.so.1 (libc6,x86-64) => {STORE}/libcuda.so.1.1" in out, out


def test_wsl_report_in_info(wsl: GpuRig) -> None:
    proc = subprocess.run([*NVHOOK, "--config", str(wsl.config), "info", "--json"],
                          capture_output=True, text=True, check=True, timeout=60)
    report = json.loads(proc.stdout)["backend_report"]
    assert report[0].startswith(f"wsl: /dev/dxg, 6 files from {STORE}")
