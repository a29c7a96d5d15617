"""`load-kmods` in a real start: the simulated host lost /dev/nvidia-uvm (and an IMEX
channel node); the hook recreates them from /proc/devices before discovery, and the container
gets them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.fixtures.containers import GpuRig

pytestmark = [pytest.mark.e2e, pytest.mark.root]


def test_hook_recreates_a_missing_uvm_node(gpu_rig: GpuRig) -> None:
    dev = Path(gpu_rig.sim.path) / "dev"
    uvm, major = dev / "nvidia-uvm", dict(gpu_rig.sim.majors)["nvidia-uvm"]
    channel = dev / "nvidia-caps-imex-channels" / "channel7"
    uvm.unlink()
    try:
        out = gpu_rig.containers.sh(
            "ls /dev/nvidia-uvm /dev/nvidia-caps-imex-channels/channel7",
            env=("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute",
                 "NVIDIA_IMEX_CHANNELS=7")).stdout
        assert out.split() == ["/dev/nvidia-caps-imex-channels/channel7", "/dev/nvidia-uvm"]
        st = os.stat(uvm)
        assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == major
        assert os.minor(st.st_rdev) == 0 and st.st_mode & 0o777 == 0o666
        assert channel.exists()
    finally:
        if not uvm.exists():
            os.mknod(uvm, stat.S_IFCHR | 0o666, os.makedev(major, 0))
        if channel.exists():
            channel.unlink()
