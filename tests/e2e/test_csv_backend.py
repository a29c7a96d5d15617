"""The Tegra CSV backend in a real runc container: a simulated Jetson root (`nvhook sim
create --tegra`, mode = "csv") whose L4T mount specification lists devices, libraries, a
link, a directory, a missing library and a conflicting entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.dev.demo.bundle import Runc
from nvhook.dev.sim import SimSpec
from tests.fixtures.containers import GpuRig, RootfsCache, rig_for
from tests.fixtures.sim import SimRootFactory

pytestmark = [pytest.mark.e2e, pytest.mark.root]
TEGRA = "/usr/lib/aarch64-linux-gnu/tegra"
SCRIPT = rf"""
ls {TEGRA} | sed 's/^/lib /'
echo "link $(readlink {TEGRA}/libcuda.so)"
cat /usr/lib/aarch64-linux-gnu/tegra-egl/nvidia.json
for n in /dev/nvhost-ctrl /dev/nvhost-ctrl-gpu /dev/nvmap; do
  msg=$( (exec 3<>$n) 2>&1 ); echo "node $n: ${{msg:-opened}}"
done
[ -x /sbin/ldconfig ] && /sbin/ldconfig -p | grep tegra | sed 's/^/cache /'
echo done
"""


@pytest.fixture(scope="module")
def jetson(tmp_path_factory: pytest.TempPathFactory, rootfs_cache: RootfsCache,
           runc_default: Runc, sim_root_factory: SimRootFactory, hook_launcher: Path) -> GpuRig:
    return rig_for(sim_root_factory(SimSpec(gpus=1, tegra=True)), tmp_path_factory, rootfs_cache,
                   runc_default, hook_launcher, "csv-e2e")


def test_csv_listed_files_nodes_and_links(jetson: GpuRig) -> None:
    out = jetson.containers.sh(SCRIPT, env=("NVIDIA_VISIBLE_DEVICES=all",)).stdout
    libs = {line.split()[1] for line in out.splitlines() if line.startswith("lib ")}
    assert libs == {"libcuda.so.1.1", "libcuda.so"}  # not the missing or conflicting ones
    assert "link libcuda.so.1.1" in out
    assert '"library_path": "libEGL_nvidia.so.0"' in out
    nodes = [line for line in out.splitlines() if line.startswith("node ")]
    assert len(nodes) == 3 and all("No such device" in line for line in nodes), out
    assert f"cache \tlibcuda.so.1 (libc6,x86-64) => {TEGRA}/libcuda.so.1.1" in out, out


def test_csv_report_in_info(jetson: GpuRig) -> None:
    import json
    import subprocess

    from tests.unit.test_cli import NVHOOK

    proc = subprocess.run([*NVHOOK, "--config", str(jetson.config), "info", "--json"],
                          capture_output=True, text=True, check=True, timeout=60)
    report = json.loads(proc.stdout)["backend_report"]
    assert report[0].startswith("csv: 3 devices, 2 files and directories, 1 links")
    assert f"conflict: {TEGRA}/libnvrm_gpu.so is listed as dev and lib" in report
    assert f"skipped: {TEGRA}/libnvmissing.so (lib) is missing" in report
