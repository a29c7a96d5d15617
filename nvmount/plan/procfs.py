"""Plan the procfs view and the application profile (libnvc-spec §1.8, §2.4, §2.5). Pure.

The procfs view hides the container's /proc/driver/nvidia behind a tmpfs holding copies of
the host's `params` (with `ModifyDeviceFiles: 0`, so the driver and NVML inside never create
or chmod /dev nodes), `version` and `registry`, plus a read-only bind of each selected GPU's
`gpus/<bus-id>` directory (discovery found it under the 8- or the 4-digit PCI domain; the
container gets the same name). Unlike NVIDIA, both tmpfs mounts are read-only once populated.
"""

from __future__ import annotations

import posixpath

from nvmount.capabilities import DriverCapability
from nvmount.discover.procfiles import ProcFile
from nvmount.errors import DriverError
from nvmount.fs.paths import SourceKind
from nvmount.plan.app_profile import (
    APP_PROFILE_DIR,
    APP_PROFILE_FILE,
    APP_PROFILE_MODE,
    MASK_BITS,
    app_profile_bytes,
)
from nvmount.plan.types import RO_PROC, Bind, PlanEntry, Tmpfs, WriteFile

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover.inventory import DriverInventory, Gpu

PROC_DRIVER = "/proc/driver/nvidia"
PROC_FILES = ("params", "version", "registry")
GRAPHICS_LIBS = DriverCapability.GRAPHICS | DriverCapability.DISPLAY

_MODIFY_ON = b"ModifyDeviceFiles: 1"
_MODIFY_OFF = b"ModifyDeviceFiles: 0"


def rewrite_params(data: bytes) -> bytes:
    """The first `ModifyDeviceFiles: 1` becomes `ModifyDeviceFiles: 0` (as NVIDIA does)."""
    return data.replace(_MODIFY_ON, _MODIFY_OFF, 1)


def plan_procfs(
    inventory: DriverInventory, gpus: tuple[Gpu, ...], files: tuple[ProcFile, ...]
) -> list[PlanEntry]:
    """Tmpfs at /proc/driver/nvidia, the three files, one bind per selected GPU."""
    entries: list[PlanEntry] = [Tmpfs(PROC_DRIVER, 0o555, RO_PROC, "procfs view")]
    by_name = {f.name: f for f in files}
    for name in PROC_FILES:
        f = by_name.get(name)
        if f is not None:
            data = rewrite_params(f.data) if name == "params" else f.data
            entries.append(WriteFile(f"{PROC_DRIVER}/{name}", data, f.mode, "procfs file"))
    for gpu in gpus:
        if not gpu.proc_dir:  # libnvc fails too (8- and 4-digit domain both missing)
            raise DriverError(
                f"mount procfs gpu {PROC_DRIVER}/gpus/{gpu.bus_id} of GPU {gpu.index} "
                f"({gpu.uuid}): not found in the driver root {inventory.root} (is the NVIDIA "
                "kernel module loaded? check nvidia-container-cli.root)")
        target = f"{PROC_DRIVER}/gpus/{posixpath.basename(gpu.proc_dir.rstrip('/'))}"
        entries.append(Bind(gpu.proc_dir, target, SourceKind.DIRECTORY, RO_PROC,
                            "procfs gpu"))
    return entries


def plan_app_profile(
    gpus: tuple[Gpu, ...], capabilities: DriverCapability, warnings: list[str]
) -> list[PlanEntry]:
    """Graphics/display: a tmpfs over the profiles dir and one profile with the GPUs' bits.

    The mask ORs `1 << minor` over the selected GPUs. Minors >= 64 do not fit the driver's
    64-bit mask: they are left out with a warning (NVIDIA shifts past 63: undefined).
    """
    if not capabilities & GRAPHICS_LIBS:
        return []
    entries: list[PlanEntry] = [
        Tmpfs(APP_PROFILE_DIR, APP_PROFILE_MODE, RO_PROC, "application profiles")
    ]
    mask = 0
    for gpu in gpus:
        if gpu.minor >= MASK_BITS:
            warnings.append(f"application profile: gpu {gpu.uuid} has minor {gpu.minor} "
                            f"(>= {MASK_BITS}); it is not listed in EGLVisibleDGPUDevices")
        else:
            mask |= 1 << gpu.minor
    if mask:
        entries.append(WriteFile(APP_PROFILE_FILE, app_profile_bytes(mask), APP_PROFILE_MODE,
                                 "application profile"))
    return entries
