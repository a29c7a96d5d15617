"""Feature-gated device families in real runc containers (simulated driver with `--gated`):
each family's nodes and files only when the image sets NVIDIA_<NAME>=enabled, with their
device rules (the nodes open past the device cgroup: ENXIO, no driver behind them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.dev.demo.bundle import Runc
from nvhook.dev.sim import SimSpec
from tests.fixtures.containers import GpuRig, RootfsCache, rig_for
from tests.fixtures.sim import SimRootFactory

pytestmark = [pytest.mark.e2e, pytest.mark.root]

SCRIPT = r"""
for n in /dev/nvidia-fs* /dev/infiniband/* /dev/nvidia-nvswitch* /dev/gdrdrv; do
  [ -e "$n" ] || continue
  msg=$( (exec 3<>$n) 2>&1 ); echo "node $n: ${msg:-opened}"
done
[ -f /etc/cufile.json ] && echo "cufile"
[ -d /run/udev/data ] && echo "udev"
echo done
"""
FAMILIES = {
    "NVIDIA_GDS": {"/dev/nvidia-fs0", "/dev/nvidia-fs1"},
    "NVIDIA_MOFED": {"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1",
                     "/dev/infiniband/rdma_cm"},
    "NVIDIA_NVSWITCH": {"/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch0",
                        "/dev/nvidia-nvswitch1"},
    "NVIDIA_GDRCOPY": {"/dev/gdrdrv"},
}


@pytest.fixture(scope="module")
def gated_rig(tmp_path_factory: pytest.TempPathFactory, rootfs_cache: RootfsCache,
              runc_default: Runc, sim_root_factory: SimRootFactory,
              hook_launcher: Path) -> GpuRig:
    sim = sim_root_factory(SimSpec(gpus=2, ipc=True, gated=True))
    return rig_for(sim, tmp_path_factory, rootfs_cache, runc_default, hook_launcher, "gated-e2e")


@pytest.mark.parametrize("variable", [*FAMILIES, None])
def test_gated_family(gated_rig: GpuRig, variable: str | None) -> None:
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility"]
    if variable:
        env.append(f"{variable}=enabled")
    out = gated_rig.containers.sh(SCRIPT, env=tuple(env)).stdout
    nodes = {line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("node")}
    assert nodes == (FAMILIES[variable] if variable else set()), out
    # no driver behind them: ENXIO or ENODEV, never EPERM (the device cgroup let them pass)
    assert all("No such device" in line for line in out.splitlines()
               if line.startswith("node")), out
    assert ("cufile" in out and "udev" in out) is (variable == "NVIDIA_GDS"), out


def test_only_exactly_enabled(gated_rig: GpuRig) -> None:
    out = gated_rig.containers.sh(SCRIPT, env=("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=true",
                                               "NVIDIA_MOFED=Enabled")).stdout
    assert "node" not in out and out.endswith("done\n")
