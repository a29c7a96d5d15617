"""The simulated driver as a Jetson (Tegra) root for the CSV backend (`nvhook sim create
--tegra`): /etc/nv_tegra_release, the L4T libraries, device nodes, a link and a directory in
the driver root, and the mount specification that lists them (with one missing entry and one
conflicting entry, which the report must name). The config selects mode = "csv"."""

from __future__ import annotations

import shutil
from pathlib import Path

from nvhook.dev.sim import catalog
from nvhook.dev.sim.devices import make_node

SPEC_DIR = "/etc/nvidia-container-runtime/host-files-for-container.d"
TEGRA_LIBS = "/usr/lib/aarch64-linux-gnu/tegra"
RELEASE = ("# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, "
           "DATE: Tue Aug  1 19:57:35 UTC 2023\n")
NODES = (("/dev/nvhost-ctrl", 488, 0), ("/dev/nvhost-ctrl-gpu", 488, 1), ("/dev/nvmap", 489, 0))
CSV = f"""# L4T mount specification (simulated)
dev, /dev/nvhost-ctrl
dev, /dev/nvhost-ctrl-gpu
dev, /dev/nvmap
lib, {TEGRA_LIBS}/libcuda.so.1.1
lib, {TEGRA_LIBS}/libnvrm_gpu.so
sym, {TEGRA_LIBS}/libcuda.so
dir, /usr/lib/aarch64-linux-gnu/tegra-egl
lib, {TEGRA_LIBS}/libnvmissing.so
dev, {TEGRA_LIBS}/libnvrm_gpu.so
"""


def make_tegra(root: Path, version: str, real_nodes: bool) -> str:
    """Write the Tegra side; returns the mount-spec directory (host path)."""
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/nv_tegra_release").write_text(RELEASE)
    libs = root / TEGRA_LIBS.lstrip("/")
    libs.mkdir(parents=True, exist_ok=True)
    stub = root / catalog.LIB_DIR.lstrip("/")
    shutil.copyfile(stub / f"libcuda.so.{version}", libs / "libcuda.so.1.1")
    shutil.copyfile(stub / f"libnvidia-glsi.so.{version}", libs / "libnvrm_gpu.so")
    (libs / "libcuda.so").symlink_to("libcuda.so.1.1")
    egl = root / "usr/lib/aarch64-linux-gnu/tegra-egl"
    egl.mkdir(parents=True, exist_ok=True)
    (egl / "nvidia.json").write_text('{"ICD": {"library_path": "libEGL_nvidia.so.0"}}\n')
    for rel, major, minor in NODES:
        make_node(root / rel.lstrip("/"), major, minor, real_nodes)
    spec_dir = root / SPEC_DIR.lstrip("/")
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "l4t.csv").write_text(CSV)
    return str(spec_dir)
