"""Records describing the host driver: what `driver.discover_driver` returns. Pure data.

All paths in these records are *host* paths, absolute, already joined with the driver root
(so `/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15`), plus the path the
file has *in* the driver root (`container_path`), which is where it lands in the container
for binaries, firmware, IPC and device nodes. Libraries land in the container's lib dir
(flattened) and so only keep their basename.
"""

from __future__ import annotations

from nvmount.capabilities import UNGATED, DriverCapability
from nvmount.choices import Choice, members
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import ClassVar


class FileKind(Choice):
    __slots__ = ()
    LIBRARY: ClassVar[FileKind]
    LIBRARY32: ClassVar[FileKind]
    BINARY: ClassVar[FileKind]
    FIRMWARE: ClassVar[FileKind]
    IPC: ClassVar[FileKind]
    CONFIG: ClassVar[FileKind]
    DIRECTORY: ClassVar[FileKind]


members(FileKind, LIBRARY="library", LIBRARY32="library32", BINARY="binary",
        FIRMWARE="firmware", IPC="ipc", CONFIG="config", DIRECTORY="directory")


@record
class DriverFile:
    """A driver file the engine may bind-mount into a container."""

    kind: FileKind
    host_path: str  # absolute host path (driver root + container_path), real file
    container_path: str  # path relative to the driver root, absolute form ("/usr/bin/nvidia-smi")
    capabilities: DriverCapability  # mounted when the request has ANY of these (0 = always)
    soname: str = ""  # libraries: DT_SONAME ("libcuda.so.1"), "" when unknown


@record
class DeviceNode:
    """A character device node on the host (under the driver root)."""

    host_path: str
    container_path: str  # e.g. "/dev/nvidia0"
    major: int
    minor: int
    capabilities: DriverCapability = UNGATED  # any request gets it


@record
class MigDevice:
    """A MIG device of a GPU, with its access files and capability nodes."""

    index: int  # index among its parent's MIG devices (NVML enumeration order)
    uuid: str
    gi: int
    ci: int
    profile: str  # e.g. "1g.10gb" ("" when unknown)
    gi_access: str  # proc path "/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access"
    ci_access: str  # proc path ".../gi1/ci0/access"
    gi_cap: DeviceNode | None = None  # /dev/nvidia-caps/nvidia-capN for gi access
    ci_cap: DeviceNode | None = None
    gpu_index: int = -1  # NVML index of the parent GPU


@record
class Gpu:
    """A GPU as NVML and the driver root describe it."""

    index: int
    minor: int
    uuid: str
    bus_id: str  # "00000000:07:00.0" (NVML form)
    model: str
    brand: str
    architecture: str  # compute capability "8.0"
    node: DeviceNode  # /dev/nvidia<minor>
    proc_dir: str  # host path of /proc/driver/nvidia/gpus/<bus-id> ("" when absent)
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    dri_nodes: tuple[DeviceNode, ...] = ()  # /dev/dri/card*, renderD* of this GPU (sysfs)
    dri_links: tuple[tuple[str, str], ...] = ()  # udev's /dev/dri/by-path links to them


@record
class DriverInventory:
    """Everything the engine may expose, for every GPU and every capability."""

    root: str  # driver root ("/" on a normal host)
    driver_version: str  # NVRM version "550.54.15"
    cuda_version: str  # "12.4"
    gpus: tuple[Gpu, ...]
    libraries: tuple[DriverFile, ...]
    libraries32: tuple[DriverFile, ...]
    binaries: tuple[DriverFile, ...]
    firmware: tuple[DriverFile, ...]
    ipc: tuple[DriverFile, ...]
    control_nodes: tuple[DeviceNode, ...]  # nvidiactl, nvidia-uvm, nvidia-uvm-tools, modeset
    proc_driver_dir: str  # host path of <root>/proc/driver/nvidia
    caps_major: int | None = None  # "nvidia-caps" in /proc/devices
    imex_major: int | None = None  # "nvidia-caps-imex-channels"
    mig_config_cap: DeviceNode | None = None
    mig_monitor_cap: DeviceNode | None = None
    # mig-minors lines: (proc-relative cap name e.g. "gpu0/gi1/access", minor)
    mig_minors: tuple[tuple[str, int], ...] = ()
    imex_channels: tuple[DeviceNode, ...] = ()  # channel nodes present on the host
    warnings: tuple[str, ...] = ()
    # graphics and display files beyond libnvc's lists (`nvmount.discover.graphics`): ICD and
    # vendor JSON files, nvoptix.bin, Xorg modules (kind CONFIG, at their container paths)
    # and the EGL platform / Vulkan producer libraries (kind LIBRARY)
    graphics: tuple[DriverFile, ...] = ()
    # feature-gated device families (`nvmount.discover.gated`): (family, node or file)
    gated_nodes: tuple[tuple[str, DeviceNode], ...] = ()
    gated_files: tuple[tuple[str, DriverFile], ...] = ()
    links: tuple[tuple[str, str], ...] = ()  # CSV `sym` entries: (path, the host's link text)
