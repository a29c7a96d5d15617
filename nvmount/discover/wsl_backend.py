"""The WSL2 discovery backend: a driver root with /dev/dxg is a WSL2 guest, where the GPUs are
reached through /dev/dxg (D3DKMT), not /dev/nvidia*, and the driver is the Windows driver
store mounted under /usr/lib/wsl (libnvc-spec §1, WSL; NVIDIA's `lib-wsl.go`).

    /dev/dxg                                  the one device node (all GPUs)
    /usr/lib/wsl/drivers/nv*/<every file>     the driver store: bound at the same path
    /usr/lib/wsl/lib/libdxcore.so             bound at the same path (whatever the caps)
    /usr/bin/nvidia-smi -> <store>/nvidia-smi  a link (the store's nvidia-smi)

Libraries are entered in the container's ld.so.cache under their SONAMEs (the store and
/usr/lib/wsl/lib are cache directories), so `libcuda.so.1` resolves to the store's
`libcuda.so.1.1`. No NVML, no procfs view, no firmware: the result has the inventory's shape,
with a report of what was found and skipped (`warnings`). Bounded: 8 stores, 512 files each.
"""

from __future__ import annotations

import os
import stat

from nvmount.capabilities import DriverCapability as Cap
from nvmount.discover.inventory import DeviceNode, DriverFile, DriverInventory, FileKind

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover.driver_root import DriverRoot

DXG = "/dev/dxg"
WSL_LIB = "/usr/lib/wsl/lib"
DRIVERS = "/usr/lib/wsl/drivers"
MAX_STORES = 8
MAX_FILES = 512


def wsl_inventory(root: DriverRoot) -> DriverInventory:
    """The inventory of the WSL2 driver under `root` (see the module docstring)."""
    report: list[str] = []
    st = os.stat(root.host(DXG))
    nodes = (DeviceNode(root.host(DXG), DXG, os.major(st.st_rdev), os.minor(st.st_rdev)),)
    files: list[DriverFile] = []
    links: list[tuple[str, str]] = []
    stores = _stores(root)
    if not stores:
        report.append(f"skipped: no NVIDIA driver store in {DRIVERS}")
    for store in stores:
        for name in _files(root, store):
            files.append(_file(root, f"{store}/{name}"))
            if name == "nvidia-smi":
                links.append(("/usr/bin/nvidia-smi", f"{store}/nvidia-smi"))
    dxcore = f"{WSL_LIB}/libdxcore.so"
    if os.path.isfile(root.host(root.resolve(dxcore).path)):
        files.append(_file(root, dxcore))
    else:
        report.append(f"skipped: {dxcore} is missing")
    report.insert(0, f"wsl: {DXG}, {len(files)} files from {', '.join(stores) or '-'}")
    return DriverInventory(root=root.root, driver_version="", cuda_version="", gpus=(),
                           libraries=(), libraries32=(), binaries=(), firmware=(), ipc=(),
                           control_nodes=nodes, proc_driver_dir="", warnings=tuple(report),
                           graphics=tuple(files), links=tuple(links))


def _stores(root: DriverRoot) -> list[str]:
    hit = root.resolve(DRIVERS)
    try:
        with os.scandir(root.host(hit.path)) as entries:
            names = sorted(e.name for _, e in zip(range(4096), entries)
                           if e.name.startswith("nv") and e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    return [f"{DRIVERS}/{n}" for n in names[:MAX_STORES]]


def _files(root: DriverRoot, store: str) -> list[str]:
    host = root.host(root.resolve(store).path)
    try:
        with os.scandir(host) as entries:
            return sorted(e.name for _, e in zip(range(MAX_FILES), entries)
                          if stat.S_ISREG(e.stat(follow_symlinks=False).st_mode))
    except OSError:
        return []


def _file(root: DriverRoot, path: str) -> DriverFile:
    from nvmount.discover.elf import ElfFormatError, read_elf

    host = root.host(root.resolve(path).path)
    soname = ""
    if ".so" in os.path.basename(path):
        try:
            soname = read_elf(host).soname or ""
        except (OSError, ElfFormatError):
            soname = ""
    return DriverFile(FileKind.CONFIG, host, path, Cap.all(), soname)
