"""The simulated driver as a WSL2 guest (`nvhook sim create --wsl`): /dev/dxg (c 492:0, a
major no host driver has) and the Windows driver store under /usr/lib/wsl: libcuda.so.1.1,
libnvidia-ml.so.1, libnvidia-ptxjitcompiler.so.1, nvcubins.bin and nvidia-smi in
drivers/nv_dispi.inf_amd64_<hash>/, libdxcore.so in lib/ (copies of the sim's own builds,
with their SONAMEs). /dev/dxg makes nvhook use its WSL backend for this root."""

from __future__ import annotations

import shutil
from pathlib import Path

from nvhook.dev.sim import catalog
from nvhook.dev.sim.devices import make_node

STORE = "/usr/lib/wsl/drivers/nv_dispi.inf_amd64_5c8f2a1e0b7d4e93"
DXG = (492, 0)


def make_wsl(root: Path, version: str, real_nodes: bool) -> str:
    """Write the WSL side; returns the driver store's path in the driver root."""
    libs = root / catalog.LIB_DIR.lstrip("/")
    store = root / STORE.lstrip("/")
    store.mkdir(parents=True, exist_ok=True)
    for source, name in ((f"libcuda.so.{version}", "libcuda.so.1.1"),
                         (f"libnvidia-ml.so.{version}", "libnvidia-ml.so.1"),
                         (f"libnvidia-ptxjitcompiler.so.{version}",
                          "libnvidia-ptxjitcompiler.so.1")):
        shutil.copyfile(libs / source, store / name)
    (store / "nvcubins.bin").write_bytes(b"NVSIM cubins\n")
    shutil.copyfile(root / "usr/bin/nvidia-smi", store / "nvidia-smi")
    (store / "nvidia-smi").chmod(0o755)
    lib = root / "usr/lib/wsl/lib"
    lib.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(libs / f"libnvidia-glsi.so.{version}", lib / "libdxcore.so")
    make_node(root / "dev/dxg", *DXG, real_nodes)
    return STORE
