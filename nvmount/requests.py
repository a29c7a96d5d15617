"""Records at the engine's boundary: what a caller asks for, with which host settings, and
what `nvmount.pipeline.configure_container` did. Pure data (the hook builds the first two from
its request and config.toml, `nvhook.hook.mount`).
"""

from __future__ import annotations

from nvmount.capabilities import UNGATED, DriverCapability
from nvmount.plan.types import CompatMode
from nvmount.records import field, record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.apply.steps import ApplyResult
    from nvmount.discover.inventory import DriverInventory
    from nvmount.ldcache.ldconfig import LdconfigResult
    from nvmount.plan.split import Delivered
    from nvmount.plan.types import MountPlan


@record
class EngineRequest:
    """What the container asks for (the hook's `ContainerRequest`, in engine terms)."""

    devices: tuple[str, ...] = ()  # device ids (() = no GPU; driver files still exposed)
    capabilities: DriverCapability = UNGATED  # the requested capabilities (none by default)
    requirements: tuple[str, ...] = ()
    mig_config: str | None = None  # "all" or None
    mig_monitor: str | None = None
    imex_channels: tuple[int, ...] = ()
    features: tuple[str, ...] = ()  # gated device families (nvmount.discover.gated)


@record
class EngineOptions:
    """Host-side settings (from config.toml, see `nvhook.hook.mount.engine_options`)."""

    root: str = "/"  # driver root
    ldcache: str = "/etc/ld.so.cache"  # inside the driver root
    proc_root: str = "/proc"  # driver facts: /proc/devices, nvidia-caps (simulation: <sim>/proc)
    sys_root: str = "/sys"  # sysfs: DRM nodes by PCI bus id (simulation: <sim>/sys)
    load_kmods: bool = False  # create missing control/IMEX nodes, modprobe (apply.host_nodes)
    create_imex_channels: bool = True  # not features.disable-imex-channel-creation
    csv_spec_dir: str = ""  # Tegra CSV mode: the mount specs (discover.csv_backend); "" = NVML
    host_proc: str = "/proc"  # the real procfs: the container's /proc/<pid>
    ldconfig: str = "@/sbin/ldconfig"
    ldconfig_required: bool = False
    ldconfig_timeout: float = 10.0
    no_cgroups: bool = False
    compat_mode: CompatMode = CompatMode.LDCONFIG
    no_persistenced: bool = False
    no_fabricmanager: bool = False
    no_gsp_firmware: bool = False
    mps_pipe_dir: str = "/tmp/nvidia-mps"  # in the driver root; from the config, never the env
    timing_log: str = ""
    ldcache_mode: str = "write"  # "write": the hook updates ld.so.cache; "ldconfig": ldconfig
    cache_dir: str = ""  # root-only inventory cache ("" = discover every time)
    nvml_timeout: float = 30.0  # seconds for the NVML helper ([nvhook] nvml-timeout)
    container_id: str = ""  # for the timing record
    limit_privileges: bool = False  # cut the permitted capability set first (the hook does)
    sim_procfs: bool = False  # simulated driver: a tmpfs on /proc/driver first (apply.simproc)
    delivered: Delivered | None = None  # what the runtime does from the spec (plan.split)
    # labels (`what`) of entries whose target may be read-only: a symlink or tmpfs there that
    # fails with EROFS is skipped with a warning (CDI hooks: links, the application profile)
    optional: frozenset[str] = frozenset()


@record
class EngineResult:
    """What `configure_container` did: the plan, the inventory and the effects."""

    plan: MountPlan
    inventory: DriverInventory
    applied: ApplyResult
    cgroup: str  # what was done to the device cgroup, for the log
    ldconfig: LdconfigResult | None
    warnings: tuple[str, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    ldcache: str = ""  # what happened to the ld.so.cache ("ldconfig": see `ldconfig`)




@record
class Effects:
    """What the effectful half did (`nvmount.effects.Run.execute`)."""

    applied: ApplyResult
    cgroup: str
    ldconfig: LdconfigResult | None
    warnings: tuple[str, ...]
    ldcache: str = ""  # what happened to the ld.so.cache ("ldconfig": see `ldconfig`)
