"""Graphics and display: the files NVIDIA's toolkit mounts and links for them, the DRM nodes
of the selected GPUs, and their capability gates (`nvmount.discover.graphics`,
`nvmount.plan.graphics`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from nvhook.cdi.generate import _Layout, _planner, host_layout
from nvhook.config.load import load_config
from nvhook.dev.sim import SimRoot, SimSpec
from nvhook.hook.mount import engine_options
from nvmount.capabilities import DriverCapability as Cap
from nvmount.discover.driver_root import DriverRoot
from nvmount.discover.graphics import dri_nodes
from nvmount.faults import Faults
from nvmount.pipeline import discover_cached
from nvmount.plan.types import Bind, Symlink
from nvmount.records import replace
from tests.fixtures.sim import SimRootFactory

NVIDIA_PATHS = Path(__file__).resolve().parent.parent / "data" / "nvidia-cdi-paths.txt"


@pytest.fixture(scope="module")
def sim2(sim_root_factory: SimRootFactory) -> SimRoot:
    return sim_root_factory(SimSpec(gpus=2, ipc=True))


def _plan(sim: SimRoot, devices: tuple[str, ...], caps: Cap) -> Any:
    config = load_config(sim.config_path, {})
    config = replace(config, supported_driver_capabilities=caps)
    options = engine_options(config)
    inventory, _ = discover_cached(options, Faults())
    return _planner(inventory, _Layout(host_layout(inventory)), config, options)(devices)


def _paths(plan: Any) -> set[tuple[str, str]]:
    out = set()
    for e in plan.entries:
        if isinstance(e, Symlink):
            out.add(("link", e.target))
        elif isinstance(e, Bind):
            out.add(("node" if e.rdev is not None else "mount", e.target))
    return out


def test_every_path_nvidia_mounts_for_all_capabilities(sim2: SimRoot) -> None:
    """tests/data/nvidia-cdi-paths.txt: what `nvidia-ctk cdi generate` (1.17.8) mounts, links
    and creates for the same simulated driver root."""
    theirs = {tuple(line.split(" ", 1)) for line in NVIDIA_PATHS.read_text().splitlines()
              if line and not line.startswith("#")}
    theirs = {(k, p.replace("{v}", sim2.driver_version)) for k, p in theirs}
    ours = _paths(_plan(sim2, ("0", "1"), Cap.all()))
    v = sim2.driver_version
    deviations = {("mount", f"/usr/lib/x86_64-linux-gnu/{n}.so.{v}")  # docs/hook.md, deviations
                  for n in ("libGL", "libEGL", "libGLESv1_CM", "libGLESv2")}
    assert sorted(theirs - ours) == sorted(deviations)
    # and beyond NVIDIA's: the OpenCL vendor file and the GPUs' DRM nodes
    assert ("mount", "/etc/OpenCL/vendors/nvidia.icd") in ours
    assert {("node", "/dev/dri/card1"), ("node", "/dev/dri/renderD129")} <= ours


def test_capability_gates(sim2: SimRoot) -> None:
    compute = _paths(_plan(sim2, ("1",), Cap.COMPUTE | Cap.UTILITY))
    assert not any(p.startswith(("/dev/dri", "/usr/share/glvnd", "/etc/vulkan", "/usr/lib/xorg"))
                   for _, p in compute)
    assert ("mount", "/etc/OpenCL/vendors/nvidia.icd") in compute  # OpenCL is compute
    graphics = _paths(_plan(sim2, ("1",), Cap.GRAPHICS))
    assert {("mount", "/etc/vulkan/icd.d/nvidia_icd.json"),
            ("mount", "/usr/share/glvnd/egl_vendor.d/10_nvidia.json"),
            ("node", "/dev/dri/card1"), ("node", "/dev/dri/renderD129"),
            ("link", "/usr/lib/x86_64-linux-gnu/gbm/nvidia-drm_gbm.so")} <= graphics
    assert ("node", "/dev/dri/card0") not in graphics  # only the selected GPU's
    assert not any(p.startswith("/usr/lib/xorg") for _, p in graphics)  # Xorg: display
    display = _paths(_plan(sim2, ("0",), Cap.DISPLAY))
    assert ("mount", "/usr/lib/xorg/modules/drivers/nvidia_drv.so") in display
    assert ("link", "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so") in display


def test_non_glvnd_gl_libraries_stay_out(sim2: SimRoot) -> None:
    """Unlike NVIDIA's CDI spec: ldconfig would make libGL.so.1 point at them and replace the
    image's GLVND dispatcher (docs/hook.md, deviations)."""
    plan = _plan(sim2, ("0",), Cap.GRAPHICS)
    lib = f"/usr/lib/x86_64-linux-gnu/libGL.so.{sim2.driver_version}"
    assert ("mount", lib) not in _paths(plan)
    assert not any(isinstance(e, Symlink) and e.target.endswith("/libGL.so.1")
                   for e in plan.entries)


def test_device_rules_for_dri_nodes(sim2: SimRoot) -> None:
    plan = _plan(sim2, ("1",), Cap.GRAPHICS)
    assert {(r.major, r.minor) for r in plan.device_rules} >= {(226, 1), (226, 129)}
    assert (226, 0) not in {(r.major, r.minor) for r in plan.device_rules}


@pytest.mark.root
def test_dri_nodes_need_sysfs_and_major_226(tmp_path: Path) -> None:
    bus = "0000:47:00.0"
    (tmp_path / "sys/bus/pci/devices" / bus / "drm/card3").mkdir(parents=True)
    (tmp_path / "sys/bus/pci/devices" / bus / "drm/renderD131").mkdir(parents=True)
    (tmp_path / "sys/bus/pci/devices" / bus / "drm/controlD64").mkdir(parents=True)
    (tmp_path / "dev/dri").mkdir(parents=True)
    os.mknod(tmp_path / "dev/dri/card3", stat.S_IFCHR | 0o666, os.makedev(226, 3))
    os.mknod(tmp_path / "dev/dri/renderD131", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # wrong
    nodes = dri_nodes(DriverRoot(str(tmp_path)), str(tmp_path / "sys"), "00000000:47:00.0")
    assert [(n.container_path, n.major, n.minor) for n in nodes] == [("/dev/dri/card3", 226, 3)]
    assert dri_nodes(DriverRoot(str(tmp_path)), str(tmp_path / "nosys"), "00000000:47:00.0") == ()


def test_x11_egl_platforms_and_nvidia_xconfig(sim_root_factory: SimRootFactory) -> None:
    """NVIDIA's #1980 (after 1.20.0): the EGL xcb/xlib platform libraries and nvidia-xconfig
    for graphics, none of them for compute."""
    sim = sim_root_factory(SimSpec(gpus=1), private=True)
    root = Path(sim.path)
    libs = root / "usr/lib/x86_64-linux-gnu"
    for name in ("libnvidia-egl-xcb.so.1.0.1", "libnvidia-egl-xlib.so.1.0.1"):
        (libs / name).write_bytes(b"\x7fELF")
    xconfig = root / "usr/bin/nvidia-xconfig"
    xconfig.write_bytes(b"#!/bin/sh\n")
    xconfig.chmod(0o755)
    ours = _paths(_plan(sim, ("0",), Cap.GRAPHICS | Cap.UTILITY))
    assert {("mount", "/usr/bin/nvidia-xconfig"),
            ("mount", "/usr/lib/x86_64-linux-gnu/libnvidia-egl-xcb.so.1.0.1"),
            ("mount", "/usr/lib/x86_64-linux-gnu/libnvidia-egl-xlib.so.1.0.1"),
            ("link", "/usr/lib/x86_64-linux-gnu/libnvidia-egl-xcb.so.1")} <= ours
    compute = _paths(_plan(sim, ("0",), Cap.COMPUTE | Cap.UTILITY))
    assert not any("nvidia-xconfig" in p or "egl-x" in p for _, p in compute)


def test_configs_from_usr_local_share_go_where_the_loaders_look(
        sim_root_factory: SimRootFactory) -> None:
    """NVIDIA's #1980: a vendor file installed under /usr/local/share (searched by no loader in
    the container) is mounted under /usr/share; /etc and /usr/share keep their paths; the
    OpenCL vendor file is found in any config directory and goes to /etc."""
    sim = sim_root_factory(SimSpec(gpus=1), private=True)
    root = Path(sim.path)
    for rel in ("glvnd/egl_vendor.d/10_nvidia.json", "X11/xorg.conf.d/10-nvidia.conf"):
        for d in ("etc", "usr/share", "usr/local/share"):
            if (root / d / rel).exists():
                (root / d / rel).unlink()
    local = root / "usr/local/share"
    for rel in ("glvnd/egl_vendor.d/10_nvidia.json", "OpenCL/vendors/nvidia.icd"):
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_text("{}\n")
    (root / "etc/OpenCL/vendors/nvidia.icd").unlink(missing_ok=True)
    (root / "etc/X11/xorg.conf.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/X11/xorg.conf.d/10-nvidia.conf").write_text("# x\n")
    ours = _paths(_plan(sim, ("0",), Cap.all()))
    assert ("mount", "/usr/share/glvnd/egl_vendor.d/10_nvidia.json") in ours
    assert ("mount", "/etc/X11/xorg.conf.d/10-nvidia.conf") in ours
    assert ("mount", "/etc/OpenCL/vendors/nvidia.icd") in ours
    assert not any(p.startswith("/usr/local/share") for _, p in ours)
