"""The engine's one door: nvhook uses the engine through this module, so that the stages can
move and change inside nvmount without a caller noticing.

| verb | what it does |
|---|---|
| `discover(options, faults)` | the host driver's inventory (`discover_cached`: and its cache) |
| `plan_only(request, rootfs, options, libc)` | the dry run: a rootfs's plan, nothing changed |
| `configure_container(request, pid, rootfs, options, libc)` | discover, plan, apply, cgroup |
| `configure_with_plan(make_plan, pid, rootfs, options, libc)` | apply a plan made elsewhere |

Besides the verbs it hands out the records callers build and read (`EngineRequest`,
`EngineOptions`, `EngineResult`, the inventory, the plan and its entry types) and the pieces
the drop-ins of NVIDIA's commands are built from (`nvidia-container-cli`, `nvidia-cdi-hook`:
the apply steps and journal, the cgroup lookup, the ld.so.cache writer). Outside nvmount, only
this module, `nvmount.errors`, `nvmount.fs` (the fd-safe in-root and trusted-path layer),
`nvmount.log` (the one logger) and the utility modules `records`, `bounds`, `jsonio` and
`cachefile` are imported (`tests/unit/test_architecture.py` checks it; see
docs/architecture.md for why those four).

Cost: importing this module loads no other module. A name is loaded from its home the first
time it is asked for (`__getattr__`, PEP 562) and kept here, so the hook's path loads exactly
the stage modules it uses; the type checker reads the imports under `TYPE_CHECKING` instead.
`_HOMES` and those imports list the same names (`tests/unit/test_api.py` checks both).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    import nvmount._libc
    import nvmount.apply.mounts
    from nvmount._compat import orig_argv as orig_argv
    from nvmount._libc import Libc as Libc
    from nvmount.apply import host_nodes as host_nodes
    from nvmount.apply import simproc as simproc
    from nvmount.apply.journal import Journal as Journal
    from nvmount.apply.namespace import entered as entered
    from nvmount.apply.steps import apply_plan as apply_plan
    from nvmount.capabilities import KNOWN_CAPABILITIES as KNOWN_CAPABILITIES
    from nvmount.capabilities import UNGATED as UNGATED
    from nvmount.capabilities import DriverCapability as DriverCapability
    from nvmount.container.cgroup import CgroupTarget as CgroupTarget
    from nvmount.container.cgroup import parse_mountinfo as parse_mountinfo
    from nvmount.container.cgroup import process_cgroups as process_cgroups
    from nvmount.container.layout import DEBIAN_DIRS as DEBIAN_DIRS
    from nvmount.container.layout import choose_layout as choose_layout
    from nvmount.container.open import map_to_host as map_to_host
    from nvmount.container.open import open_container as open_container
    from nvmount.container.open import parse_id_map as parse_id_map
    from nvmount.discover._nvml import open_nvml as open_nvml
    from nvmount.discover.devices import read_char_majors as read_char_majors
    from nvmount.discover.devices import read_mig_minors as read_mig_minors
    from nvmount.discover.driver import discover_driver as discover_driver
    from nvmount.discover.driver import nvml_path as nvml_path
    from nvmount.discover.elf import ElfFormatError as ElfFormatError
    from nvmount.discover.elf import parse_elf as parse_elf
    from nvmount.discover.inventory import DriverInventory as DriverInventory
    from nvmount.discover.inventory import Gpu as Gpu
    from nvmount.discover.ldcache import MACHINE_ARCHES as MACHINE_ARCHES
    from nvmount.discover.options import DiscoveryOptions as DiscoveryOptions
    from nvmount.discover.procfiles import ProcFile as ProcFile
    from nvmount.discover.procfiles import read_proc_files as read_proc_files
    from nvmount.faults import Faults as Faults
    from nvmount.ldcache.image import entries_for as entries_for
    from nvmount.ldcache.ldconfig import run_ldconfig as run_ldconfig
    from nvmount.ldcache.setting import resolve_ldconfig as resolve_ldconfig
    from nvmount.ldcache.write import Fallback as Fallback
    from nvmount.ldcache.write import update_ldcache as update_ldcache
    from nvmount.ldcache.write import write_entries as write_entries
    from nvmount.pipeline import configure_container as configure_container
    from nvmount.pipeline import configure_with_plan as configure_with_plan
    from nvmount.pipeline import discover as discover
    from nvmount.pipeline import discover_cached as discover_cached
    from nvmount.pipeline import is_wsl as is_wsl
    from nvmount.pipeline import make_plan as make_plan
    from nvmount.pipeline import missing_root as missing_root
    from nvmount.pipeline import plan_only as plan_only
    from nvmount.pipeline import select_and_check as select_and_check
    from nvmount.pipeline import write_timing as write_timing
    from nvmount.plan import requirements as requirements
    from nvmount.plan.app_profile import APP_PROFILE_DIR as APP_PROFILE_DIR
    from nvmount.plan.app_profile import APP_PROFILE_FILE as APP_PROFILE_FILE
    from nvmount.plan.app_profile import APP_PROFILE_MODE as APP_PROFILE_MODE
    from nvmount.plan.app_profile import MASK_BITS as MASK_BITS
    from nvmount.plan.app_profile import app_profile_bytes as app_profile_bytes
    from nvmount.plan.app_profile import gpu_mask as gpu_mask
    from nvmount.plan.mounts import newer_compat_dirs as newer_compat_dirs
    from nvmount.plan.procfs import PROC_DRIVER as PROC_DRIVER
    from nvmount.plan.procfs import PROC_FILES as PROC_FILES
    from nvmount.plan.procfs import rewrite_params as rewrite_params
    from nvmount.plan.selection import Selection as Selection
    from nvmount.plan.selection import select_devices as select_devices
    from nvmount.plan.split import RUNTIME_MOUNTS as RUNTIME_MOUNTS
    from nvmount.plan.split import Delivered as Delivered
    from nvmount.plan.split import runtime_share as runtime_share
    from nvmount.plan.types import RO_PROC as RO_PROC
    from nvmount.plan.types import Bind as Bind
    from nvmount.plan.types import CompatMode as CompatMode
    from nvmount.plan.types import ContainerLayout as ContainerLayout
    from nvmount.plan.types import MountFlag as MountFlag
    from nvmount.plan.types import MountPlan as MountPlan
    from nvmount.plan.types import PlanEntry as PlanEntry
    from nvmount.plan.types import Symlink as Symlink
    from nvmount.plan.types import Tmpfs as Tmpfs
    from nvmount.plan.types import WriteFile as WriteFile
    from nvmount.requests import Effects as Effects
    from nvmount.requests import EngineOptions as EngineOptions
    from nvmount.requests import EngineRequest as EngineRequest
    from nvmount.requests import EngineResult as EngineResult
    from nvmount.timing import PhaseTimer as PhaseTimer
    from nvmount.timing import append_record as append_record

    libc = nvmount._libc  # modules handed out whole, under a name that says which
    apply_mounts = nvmount.apply.mounts

_VERBS = ("configure_container", "configure_with_plan", "discover", "discover_cached", "is_wsl",
          "make_plan", "missing_root", "plan_only", "select_and_check", "write_timing")
# name -> its home ("module" when the name is the module's own, "module:name" otherwise; a
# module handed out whole is "module:")
_HOMES: dict[str, str] = {
    **dict.fromkeys(_VERBS, "nvmount.pipeline"),
    **dict.fromkeys(("EngineRequest", "EngineOptions", "EngineResult", "Effects"),
                    "nvmount.requests"),
    # the host handles every verb takes
    "Libc": "nvmount._libc", "Faults": "nvmount.faults", "PhaseTimer": "nvmount.timing",
    "append_record": "nvmount.timing", "orig_argv": "nvmount._compat",
    **dict.fromkeys(("DriverCapability", "KNOWN_CAPABILITIES", "UNGATED"),
                    "nvmount.capabilities"),
    # discover: the inventory and what it reads
    "DriverInventory": "nvmount.discover.inventory", "Gpu": "nvmount.discover.inventory",
    "DiscoveryOptions": "nvmount.discover.options", "discover_driver": "nvmount.discover.driver",
    "read_char_majors": "nvmount.discover.devices", "read_mig_minors": "nvmount.discover.devices",
    "ElfFormatError": "nvmount.discover.elf", "parse_elf": "nvmount.discover.elf",
    "MACHINE_ARCHES": "nvmount.discover.ldcache", "ProcFile": "nvmount.discover.procfiles",
    "read_proc_files": "nvmount.discover.procfiles",
    # NVML itself (apply-cuda-memory-limits: the limits are set, nothing is discovered)
    "nvml_path": "nvmount.discover.driver", "open_nvml": "nvmount.discover._nvml",
    # plan: the plan's records, the runtime's share, the procfs view's files
    **dict.fromkeys(("MountPlan", "PlanEntry", "Bind", "Symlink", "Tmpfs", "WriteFile",
                     "MountFlag", "RO_PROC", "CompatMode", "ContainerLayout"),
                    "nvmount.plan.types"),
    "Selection": "nvmount.plan.selection", "select_devices": "nvmount.plan.selection",
    "Delivered": "nvmount.plan.split", "RUNTIME_MOUNTS": "nvmount.plan.split",
    "runtime_share": "nvmount.plan.split", "newer_compat_dirs": "nvmount.plan.mounts",
    **dict.fromkeys(("PROC_DRIVER", "PROC_FILES", "rewrite_params"), "nvmount.plan.procfs"),
    **dict.fromkeys(("APP_PROFILE_DIR", "APP_PROFILE_FILE", "APP_PROFILE_MODE", "MASK_BITS",
                     "app_profile_bytes", "gpu_mask"), "nvmount.plan.app_profile"),
    "requirements": "nvmount.plan.requirements:",
    # container: open it, its device cgroup, its layout
    "open_container": "nvmount.container.open", "map_to_host": "nvmount.container.open",
    "parse_id_map": "nvmount.container.open",
    **dict.fromkeys(("CgroupTarget", "parse_mountinfo", "process_cgroups"),
                    "nvmount.container.cgroup"),
    "choose_layout": "nvmount.container.layout", "DEBIAN_DIRS": "nvmount.container.layout",
    # apply and ldcache: the steps the CDI hooks' drop-in runs one by one
    "apply_plan": "nvmount.apply.steps", "Journal": "nvmount.apply.journal",
    "entered": "nvmount.apply.namespace", "apply_mounts": "nvmount.apply.mounts:",
    "simproc": "nvmount.apply.simproc:", "host_nodes": "nvmount.apply.host_nodes:",
    "libc": "nvmount._libc:",
    "entries_for": "nvmount.ldcache.image", "run_ldconfig": "nvmount.ldcache.ldconfig",
    "resolve_ldconfig": "nvmount.ldcache.setting",
    **dict.fromkeys(("Fallback", "update_ldcache", "write_entries"), "nvmount.ldcache.write"),
}


def __getattr__(name: str) -> object:
    """`from nvmount.api import NAME`: load NAME from its home once, then keep it here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, colon, attr = home.partition(":")
    __import__(module)
    found = sys.modules[module]
    value = getattr(found, attr or name) if not colon or attr else found
    globals()[name] = value
    return value
