"""The simulated driver's graphics and display side: the ICD and vendor JSON files,
nvoptix.bin, the Xorg configuration and modules, the EGL platform and Vulkan producer
libraries, and per GPU its DRM nodes (/dev/dri/card<i>, renderD<128+i>, major 226) with the
sysfs entries that tie them to the GPU's PCI bus id (<root>/sys/bus/pci/devices/<bus>/drm).
The Xorg modules are copies of a stub library (X loads them by path); the EGL platform and
Vulkan producer libraries are built with the others (catalog group "graphics-extra")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nvhook.dev.sim import catalog
from nvhook.dev.sim.devices import make_node
from nvhook.dev.sim.records import SimGpu

DRM_MAJOR = 226
ICD_FILES = {
    "/usr/share/glvnd/egl_vendor.d/10_nvidia.json":
        {"file_format_version": "1.0.0", "ICD": {"library_path": "libEGL_nvidia.so.0"}},
    "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json":
        {"file_format_version": "1.0.0", "ICD": {"library_path": "libnvidia-egl-gbm.so.1"}},
    "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json":
        {"file_format_version": "1.0.0", "ICD": {"library_path": "libnvidia-egl-wayland.so.1"}},
    "/etc/vulkan/icd.d/nvidia_icd.json":
        {"file_format_version": "1.0.0", "ICD": {"library_path": "libGLX_nvidia.so.0",
                                                 "api_version": "1.3.277"}},
    "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json":
        {"file_format_version": "1.0.0", "layer": {"name": "VK_LAYER_NV_optimus",
                                                   "library_path": "libGLX_nvidia.so.0"}},
}
TEXT_FILES = {
    "/etc/OpenCL/vendors/nvidia.icd": "libnvidia-opencl.so.1\n",
    "/usr/share/nvidia/nvoptix.bin": "NVSIM optix data\n",
    "/usr/share/X11/xorg.conf.d/10-nvidia.conf":
        'Section "OutputClass"\n    Identifier "nvidia"\n    Driver "nvidia"\nEndSection\n',
}
XORG = ("/usr/lib/xorg/modules/drivers/nvidia_drv.so",
        "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.{v}")


def write_graphics(root: Path, version: str) -> list[str]:
    """Write the files of the module docstring; their driver-root paths."""
    written = []
    for rel, doc in ICD_FILES.items():
        _write(root, rel, json.dumps(doc, indent=2) + "\n")
        written.append(rel)
    for rel, text in TEXT_FILES.items():
        _write(root, rel, text)
        written.append(rel)
    stub = root / catalog.LIB_DIR.lstrip("/") / f"libnvidia-glsi.so.{version}"
    for rel in [rel.format(v=version) for rel in XORG]:  # not in a library dir
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stub, path)
        path.chmod(0o755)
        written.append(rel)
    return written


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_dri(root: Path, gpus: tuple[SimGpu, ...], real_nodes: bool) -> list[str]:
    """Per GPU: /dev/dri/card<i> and renderD<128+i>, and sysfs drm entries for its bus id."""
    made = []
    for gpu in gpus:
        drm = root / "sys/bus/pci/devices" / gpu.proc_bus_id.lower() / "drm"
        for name, minor in ((f"card{gpu.index}", gpu.index),
                            (f"renderD{128 + gpu.index}", 128 + gpu.index)):
            (drm / name).mkdir(parents=True, exist_ok=True)
            make_node(root / "dev/dri" / name, DRM_MAJOR, minor, real_nodes)
            kind = "card" if name.startswith("card") else "render"
            link = root / "dev/dri/by-path" / f"pci-{gpu.proc_bus_id.lower()}-{kind}"
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(f"../{name}")
            made.append(f"/dev/dri/{name}")
    return made
