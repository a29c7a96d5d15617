"""Plan the graphics and display files (`nvmount.discover.graphics`) and their links. Pure.

Files of kind CONFIG (ICD and vendor JSON files, nvoptix.bin, Xorg configuration and modules)
are bound read-only at their container paths when the request has a capability of their gate;
the extra libraries (kind LIBRARY) are planned with the driver's other libraries
(`plan.mounts`). The links NVIDIA's toolkit creates next to them (v1.17,
`graphicsDriverLibraries.Hooks`):

    <libs>/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1   (GBM loads it from there)
    <xorg extensions>/libglxserver_nvidia.so -> libglxserver_nvidia.so.<version>
    <libs>/libnvidia-vulkan-producer.so -> libnvidia-vulkan-producer.so.<version>
"""

from __future__ import annotations

import posixpath

from nvmount.capabilities import DriverCapability
from nvmount.discover.inventory import FileKind
from nvmount.fs.paths import SourceKind
from nvmount.plan.types import RO_LIB, Bind, Symlink

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover.inventory import DriverInventory

GRAPHICS = DriverCapability.GRAPHICS | DriverCapability.DISPLAY


def plan_graphics_files(inventory: DriverInventory,
                        capabilities: DriverCapability) -> list[Bind]:
    """The CONFIG files whose gate the request meets, at their container paths."""
    return [Bind(f.host_path, f.container_path,
                 SourceKind.DIRECTORY if f.kind == FileKind.DIRECTORY else SourceKind.FILE,
                 RO_LIB, "graphics" if inventory.proc_driver_dir else "driver file",
                 gate=f.capabilities)
            for f in inventory.graphics
            if f.kind in (FileKind.CONFIG, FileKind.DIRECTORY) and f.capabilities & capabilities]


def plan_graphics_links(planned: list[Bind], capabilities: DriverCapability) -> list[Symlink]:
    """The links of the module docstring for the files `planned` (binds of this plan)."""
    if not capabilities & GRAPHICS:
        return []
    taken = {b.target for b in planned}
    links: list[Symlink] = []
    for bind in planned:
        directory, base = posixpath.split(bind.target)
        if base.startswith("libnvidia-allocator.so.") and bind.what == "library":
            links.append(Symlink(f"{directory}/gbm/nvidia-drm_gbm.so",
                                 "../libnvidia-allocator.so.1", "graphics link"))
        for stem in ("libglxserver_nvidia.so", "libnvidia-vulkan-producer.so"):
            if base.startswith(stem + ".") and f"{directory}/{stem}" not in taken:
                links.append(Symlink(f"{directory}/{stem}", base, "graphics link"))
    return links
