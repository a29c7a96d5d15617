"""Records of a mount plan: what `plan.plan_mounts` returns and `apply.apply_plan` executes.

Entries are ordered; apply runs them in order, records each step and undoes them in reverse
on failure. Targets are container paths (absolute, resolved inside the rootfs by apply);
sources are host paths, opened on the host side before entering the container.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nvmount.capabilities import DriverCapability


class MountFlag(enum.Flag):
    NONE = 0
    RDONLY = enum.auto()
    NOSUID = enum.auto()
    NODEV = enum.auto()
    NOEXEC = enum.auto()

    def names(self) -> str:
        return ",".join(m.name.lower() for m in type(self) if m in self and m.name) or "rw"


RO_LIB = MountFlag.RDONLY | MountFlag.NODEV | MountFlag.NOSUID
RO_DEV = MountFlag.RDONLY | MountFlag.NOSUID | MountFlag.NOEXEC
RW_IPC = MountFlag.NODEV | MountFlag.NOSUID | MountFlag.NOEXEC
RO_PROC = MountFlag.RDONLY | MountFlag.NODEV | MountFlag.NOSUID | MountFlag.NOEXEC


class SourceKind(enum.Enum):
    FILE = "file"  # regular file (library, binary, firmware, proc file)
    DIRECTORY = "directory"  # proc gpu dir, MPS pipe dir, capabilities dir
    DEVICE = "device"  # character device; `rdev` must match
    SOCKET = "socket"  # IPC socket


@dataclass(frozen=True, slots=True)
class Tmpfs:
    """Mount a fresh tmpfs at `target` (procfs view, application profiles)."""

    target: str
    mode: int
    flags: MountFlag
    what: str  # short label for logs and errors: "procfs view"


@dataclass(frozen=True, slots=True)
class WriteFile:
    """Create `target` with `data`; only inside a tmpfs this plan mounted."""

    target: str
    data: bytes
    mode: int
    what: str


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind-mount host `source` at container `target` with `flags`."""

    source: str
    target: str
    kind: SourceKind
    flags: MountFlag
    what: str  # "library", "binary", "device", "ipc", "firmware", "procfs", "mig"
    rdev: tuple[int, int] | None = None  # (major, minor) the source must have


@dataclass(frozen=True, slots=True)
class Symlink:
    """Create the symlink `target` -> `link` in the container (kept if an entry exists)."""

    target: str
    link: str
    what: str  # "soname link", "dev link"


@dataclass(frozen=True, slots=True)
class DeviceRule:
    """Allow `c major:minor rw` in the container's device cgroup."""

    major: int
    minor: int
    access: str = "rw"
    what: str = ""  # the node path, for messages


PlanEntry = Tmpfs | WriteFile | Bind | Symlink


@dataclass(frozen=True, slots=True)
class MountPlan:
    entries: tuple[PlanEntry, ...]
    device_rules: tuple[DeviceRule, ...]
    ldconfig_dirs: tuple[str, ...]  # container dirs passed to ldconfig (compat dir first)
    libs_dir: str
    libs32_dir: str
    bins_dir: str
    capabilities: DriverCapability
    gpus: tuple[str, ...]  # uuids of the selected GPUs
    mig_devices: tuple[str, ...]  # uuids of the selected MIG devices
