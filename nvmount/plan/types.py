"""Records of a mount plan: what `plan.plan_mounts` returns and `apply.apply_plan` executes.

Entries are ordered; apply runs them in order, records each step and undoes them in reverse
on failure. Targets are container paths (absolute, resolved inside the rootfs by apply);
sources are host paths, opened on the host side before entering the container.
"""

from __future__ import annotations

from nvmount.capabilities import UNGATED, DriverCapability
from nvmount.choices import Choice, FlagSet, members
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import ClassVar

    from nvmount.discover.procfiles import ProcFile
    from nvmount.fs.paths import SourceKind


_FLAG_WORDS = {"RDONLY": "ro", "NOSUID": "nosuid", "NODEV": "nodev", "NOEXEC": "noexec"}


class MountFlag(FlagSet):
    __slots__ = ()
    NONE: ClassVar[MountFlag]
    RDONLY: ClassVar[MountFlag]
    NOSUID: ClassVar[MountFlag]
    NODEV: ClassVar[MountFlag]
    NOEXEC: ClassVar[MountFlag]

    def names(self) -> str:
        """Mount-option style: "ro,nosuid,nodev" ("rw" when no flag is set)."""
        return _FLAG_TEXT[int(self)]


members(MountFlag, NONE=0, RDONLY=1, NOSUID=2, NODEV=4, NOEXEC=8)
# every combination's text, once (a step names its flags at each mount)
_FLAG_TEXT = tuple(",".join(_FLAG_WORDS[n] for n in MountFlag(bits).member_names()) or "rw"
                   for bits in range(16))

RO_LIB = MountFlag.RDONLY | MountFlag.NODEV | MountFlag.NOSUID
RO_DEV = MountFlag.RDONLY | MountFlag.NOSUID | MountFlag.NOEXEC
# IPC sockets and the MPS pipe dir are bound read-only (libnvc binds them rw): connect() and
# writing to a FIFO work on a read-only mount; creating or removing entries in the host
# directory does not. NVIDIA documents no need for the container to write there.
RO_IPC = MountFlag.RDONLY | MountFlag.NODEV | MountFlag.NOSUID | MountFlag.NOEXEC
RO_PROC = MountFlag.RDONLY | MountFlag.NODEV | MountFlag.NOSUID | MountFlag.NOEXEC


@record
class Tmpfs:
    """Mount a fresh tmpfs at `target` (procfs view, application profiles)."""

    target: str
    mode: int
    flags: MountFlag
    what: str  # short label for logs and errors: "procfs view"


@record
class WriteFile:
    """Create `target` with `data`; only inside a tmpfs this plan mounted."""

    target: str
    data: bytes
    mode: int
    what: str


@record
class Bind:
    """Bind-mount host `source` at container `target` with `flags`."""

    source: str
    target: str
    kind: SourceKind
    flags: MountFlag
    what: str  # "library", "binary", "device", "ipc", "firmware", "procfs", "mig"
    rdev: tuple[int, int] | None = None  # (major, minor) the source must have
    gate: DriverCapability = UNGATED  # capabilities that brought it in (UNGATED = any)


@record
class Symlink:
    """Create the symlink `target` -> `link` in the container (kept if an entry exists)."""

    target: str
    link: str
    what: str  # "soname link", "dev link"


@record
class DeviceRule:
    """Allow `c major:minor rw` in the container's device cgroup."""

    major: int
    minor: int
    access: str = "rw"
    what: str = ""  # the node path, for messages


if TYPE_CHECKING:  # mypy --python-version 3.9 rejects `A | B` as an alias value: Union
    from typing import Union

    PlanEntry = Union[Tmpfs, WriteFile, Bind, Symlink]
else:  # `type | type` is Python 3.10+; annotations are strings, so run time needs no union
    PlanEntry = (Tmpfs, WriteFile, Bind, Symlink)


@record
class MountPlan:
    """A container's ordered entries, device rules and ldconfig dirs, and their origin."""

    entries: tuple[PlanEntry, ...]
    device_rules: tuple[DeviceRule, ...]
    ldconfig_dirs: tuple[str, ...]  # container dirs passed to ldconfig (compat dir first)
    libs_dir: str
    libs32_dir: str
    bins_dir: str
    capabilities: DriverCapability
    gpus: tuple[str, ...]  # uuids of the selected GPUs
    mig_devices: tuple[str, ...]  # uuids of the selected MIG devices
    warnings: tuple[str, ...] = ()  # things skipped on purpose (logged by the engine)
    driver_version: str = ""  # of the inventory the plan was made from
    cuda_version: str = ""
    driver_root: str = ""
    # what ldconfig would put in the cache for the driver's libraries: (name as ldconfig keys
    # it, container path, 32-bit), first wins (`ldcache_entries`)
    ldcache_entries: tuple[tuple[str, str, bool], ...] = ()

    def count(self, kind: type[PlanEntry]) -> int:
        """How many entries of one kind (Bind, Tmpfs, WriteFile, Symlink) the plan holds."""
        return sum(1 for e in self.entries if isinstance(e, kind))


class CompatMode(Choice):
    """`nvidia-container-runtime.modes.legacy.cuda-compat-mode` (libnvc-spec §2.8)."""

    __slots__ = ()
    LDCONFIG: ClassVar[CompatMode]  # compat dir first in ldconfig's dirs when its libcuda is newer
    MOUNT: ClassVar[CompatMode]  # treated as LDCONFIG: image files are never mount sources
    DISABLED: ClassVar[CompatMode]


members(CompatMode, LDCONFIG="ldconfig", MOUNT="mount", DISABLED="disabled")


@record
class ContainerLayout:
    """Where files land in this rootfs (libnvc-spec §2.2), detected from the rootfs."""

    bins_dir: str  # "/usr/bin"
    libs_dir: str  # "/usr/lib/x86_64-linux-gnu" (Debian family) or "/usr/lib64"
    libs32_dir: str  # "/usr/lib/i386-linux-gnu" or "/usr/lib32" / "/usr/lib"
    cuda_compat_libs: tuple[str, ...] = ()  # container paths of /usr/local/cuda/compat/lib*.so.*


@record
class PlanOptions:
    """What the request asks beyond devices and capabilities, plus host facts read earlier."""

    compat_mode: CompatMode = CompatMode.LDCONFIG
    imex_channels: tuple[int, ...] = ()
    features: tuple[str, ...] = ()  # gated device families the request turns on
    no_cgroups: bool = False  # plan no device rules
    proc_files: tuple[ProcFile, ...] = ()  # host params/version/registry, in that order
