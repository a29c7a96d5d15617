"""Configure one container: the whole engine pipeline, rolled back on any failure.

Stage: orchestration. `configure_container` runs, in this order:

    inventory (NVML, driver root)  -> selection -> requirements   (nothing changed yet)
    -> open container (pidfd, ns/mnt, owner, cgroup, layout) -> plan (pure)
    -> clone sources (host side) -> enter the mount ns -> apply -> leave
    -> device cgroup -> ldconfig

Every effect is journaled: on a failure anywhere, the cgroup change is undone and the mount
namespace is re-entered to detach our mounts and remove what we created; the error names
the step. The device cgroup goes before ldconfig (as in libnvidia-container, where the rules
are added with each mount) so that the one effect that cannot be undone - ldconfig rewriting
the image's ld.so.cache - is the last: when ldconfig fails and `ldconfig_required` is set,
everything else is still undone; otherwise an ldconfig failure is a warning.

`plan_only` is the dry run: inventory, selection, requirements and the plan, reading the
rootfs through an O_PATH fd on its host path; it needs no pid and no privileges and returns
None when no driver is found.

The effectful half (apply, cgroup, ldconfig, rollback) is `nvmount.effects.Run`; the
records at the boundary (`EngineRequest`, `EngineOptions`, `EngineResult`) are in
`nvmount.requests`. This module only orders the stages: the work is in the stage
packages (discover, plan, container, apply, cgroup, ldcache).

Capabilities: each phase runs with its stage's capabilities effective (`privileges.stage`);
`EngineOptions.limit_privileges` also cuts the permitted set first (the hook sets it). No
threads are started. Timings per phase go to a `PhaseTimer` and, with `timing_log`, to a
JSON line per container (see `nvmount.timing`).
"""

from __future__ import annotations

import os

from nvmount.errors import DriverError, NvmlError
from nvmount.faults import Faults
from nvmount.fds import Cleanup
from nvmount.log import DEBUG, WARNING, get_logger
from nvmount.plan.types import MountPlan, PlanOptions
from nvmount.requests import Effects, EngineOptions, EngineRequest, EngineResult
from nvmount.timing import PhaseTimer

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable

    from nvmount._libc import Libc
    from nvmount.container.open import ContainerHandle
    from nvmount.discover.inventory import DriverInventory
    from nvmount.fs.rootfs import Root
    from nvmount.plan.selection import Selection
    from nvmount.plan.types import ContainerLayout

log = get_logger(__name__)

NVML_NO_DRIVER = (9, 12)  # NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND


# -- the phases that change nothing ----------------------------------------------------------
def discover(options: EngineOptions, faults: Faults, *,
             mig_minors: bool = True) -> DriverInventory:
    """The host driver's inventory (see `discover_cached`)."""
    return discover_cached(options, faults, mig_minors=mig_minors)[0]


def discover_cached(options: EngineOptions, faults: Faults, *, mig_minors: bool = True,
                    fresh: bool = False) -> tuple[DriverInventory, str]:
    """(inventory, cache status): from the inventory cache while the driver is unchanged
    ("hit"; `options.cache_dir`, not while faults are armed), else discovered (NVML runs
    here; `nvml init` is a fault point) and the cache rewritten ("refreshed"); "off" without
    a cache. `fresh` (nvhook info) always discovers and says whether the cache was "current".

    `mig_minors`: read the MIG minors file (~4300 lines on a real driver); only a request
    with mig-config or mig-monitor uses it (`needs_mig_minors`). With `options.csv_spec_dir`
    the inventory is what the Tegra CSV files say (no NVML, no cache)."""
    missing = missing_root(options.root)
    if missing is not None:
        raise DriverError(missing)
    if options.csv_spec_dir:
        from nvmount.discover.csv_backend import csv_inventory
        from nvmount.discover.driver_root import DriverRoot

        return csv_inventory(DriverRoot(options.root), options.csv_spec_dir), "off"
    if is_wsl(options.root):  # a WSL2 guest: the driver store behind /dev/dxg
        from nvmount.discover.driver_root import DriverRoot
        from nvmount.discover.wsl_backend import wsl_inventory

        return wsl_inventory(DriverRoot(options.root)), "off"
    from nvmount.discover import options as discovery

    opts = discovery.DiscoveryOptions(no_persistenced=options.no_persistenced,
                                   no_fabricmanager=options.no_fabricmanager,
                                   no_gsp_firmware=options.no_gsp_firmware,
                                   mps_pipe_dir=options.mps_pipe_dir, mig_minors=mig_minors,
                                   sys_root=options.sys_root,
                                   nvml_timeout=options.nvml_timeout)
    path_env = discovery.binary_search_path()

    def run() -> DriverInventory:
        try:
            faults("nvml init")
        except OSError as err:
            raise DriverError(f"nvml init: {err.strerror}") from err
        from nvmount.discover.driver import discover_driver

        return discover_driver(options.root, options.ldcache, options.proc_root,
                                      path_env=path_env, options=opts)

    if not options.cache_dir or faults.armed or os.geteuid() != 0:
        return run(), "off"
    from nvmount.discover import cache

    key = discovery.discovery_key(options.root, options.ldcache, options.proc_root, opts,
                                  path_env)
    watch = discovery.watched_paths(options.root, opts, path_env)
    if fresh:
        return cache.refresh(options.cache_dir, key, options.proc_root, watch, run)
    found, hit = cache.cached_inventory(options.cache_dir, key, options.proc_root, watch, run)
    return found, "hit" if hit else "refreshed"


def missing_root(root: str) -> str | None:
    """The error, with its fix, when the driver root is not a directory (None: it is)."""
    if os.path.isdir(root):
        return None
    return (f"no NVIDIA driver: the driver root {root} does not exist or is not a directory "
            "(install the NVIDIA driver, or set nvidia-container-cli.root to the directory "
            "it is installed in)")


def is_wsl(root: str) -> bool:
    """A driver root with the /dev/dxg character device is a WSL2 guest."""
    import stat

    try:
        return stat.S_ISCHR(os.stat(os.path.join(root, "dev/dxg")).st_mode)
    except OSError:
        return False


def needs_mig_minors(request: EngineRequest) -> bool:
    """Whether the plan will read `inventory.mig_minors`: only for mig-config/mig-monitor
    (`plan_devices._plan_mig_all`); a MIG device uses its own access files and caps."""
    return bool(request.mig_config or request.mig_monitor)


def select_and_check(inventory: DriverInventory, request: EngineRequest) -> Selection:
    """Device selection and NVIDIA_REQUIRE_* checks; raises before anything is changed. A CSV
    inventory (Tegra) has no GPUs to select and no versions to check: everything it lists."""
    from nvmount.plan.selection import Selection, select_devices

    if not inventory.proc_driver_dir and not inventory.gpus:
        return Selection()
    selection = select_devices(inventory.gpus, request.devices, mig_config=request.mig_config,
                               mig_monitor=request.mig_monitor)
    if request.requirements:
        from nvmount.plan.requirements import check_requirements, requirement_facts

        check_requirements(request.requirements, requirement_facts(inventory, selection))
    return selection


def make_plan(inventory: DriverInventory, selection: Selection, request: EngineRequest,
              layout_source: ContainerHandle | Root, options: EngineOptions) -> MountPlan:
    from nvmount.plan.mounts import plan_mounts

    layout = getattr(layout_source, "layout", None)
    if layout is None:
        from nvmount.container.layout import detect_layout
        from nvmount.fs.rootfs import Root

        assert isinstance(layout_source, Root)
        layout = detect_layout(layout_source)
    from nvmount.discover.procfiles import read_proc_files

    plan_options = PlanOptions(
        compat_mode=options.compat_mode, imex_channels=request.imex_channels,
        features=request.features,
        no_cgroups=options.no_cgroups,
        proc_files=read_proc_files(inventory.proc_driver_dir) if inventory.proc_driver_dir else ())
    plan = plan_mounts(inventory, selection, request.capabilities, layout, plan_options)
    _warn_missing_uvm(inventory, request, options)
    for warning in plan.warnings:  # discovery's own ("missing library ...") are routine
        log.log(DEBUG if warning in inventory.warnings else WARNING, "%s",
                warning)
    return plan


def _warn_missing_uvm(inventory: DriverInventory, request: EngineRequest,
                      options: EngineOptions) -> None:
    """CUDA needs /dev/nvidia-uvm: its absence is a warning, never silent (libnvc skips it)."""
    from nvmount.capabilities import DriverCapability as Cap

    if inventory.proc_driver_dir and request.capabilities & (Cap.COMPUTE | Cap.VIDEO) and all(
            n.container_path != "/dev/nvidia-uvm" for n in inventory.control_nodes):
        hint = ("its major is not in /proc/devices: load the nvidia-uvm module" if
                options.load_kmods else "set nvidia-container-cli.load-kmods = true, or run "
                "nvidia-modprobe -u -c=0")
        log.warning("/dev/nvidia-uvm is missing in %s: CUDA fails in the container (%s)",
                    options.root, hint)


def hook_plan(plan: MountPlan, options: EngineOptions) -> MountPlan:
    """The part of `plan` the hook applies: without what the runtime delivers (spec mode)."""
    from nvmount.plan.split import hook_share

    share = hook_share(plan, options.delivered)
    if share is not plan:
        log.info("the runtime delivers %d of %d entries and %d of %d device rules from the "
                 "spec; the hook applies the rest", len(plan.entries) - len(share.entries),
                 len(plan.entries), len(plan.device_rules) - len(share.device_rules),
                 len(plan.device_rules))
    return share


def plan_only(request: EngineRequest, rootfs: str, options: EngineOptions, libc: Libc,
              *, timer: PhaseTimer | None = None) -> MountPlan | None:
    """The dry run: the plan for `rootfs` (a host path), or None when no driver is found."""
    timer = timer or PhaseTimer()
    from nvmount.container.dryrun import open_rootfs_readonly
    from nvmount.discover.presence import no_driver_reason

    with timer.phase("inventory"):
        missing = missing_root(options.root)
        if missing is None and not (options.csv_spec_dir or is_wsl(options.root)):
            reason = no_driver_reason(options.root, options.ldcache)
            missing = None if reason is None else f"no NVIDIA driver found: {reason}"
        if missing is not None:
            log.warning("%s", missing)
            return None
        try:
            inventory = discover(options, Faults(), mig_minors=needs_mig_minors(request))
        except NvmlError as err:
            if err.code not in NVML_NO_DRIVER:
                raise
            log.warning("no NVIDIA driver found: %s", err)
            return None
        selection = select_and_check(inventory, request)
    with timer.phase("plan"), open_rootfs_readonly(rootfs, libc) as root:
        return make_plan(inventory, selection, request, root, options)


# -- configure -------------------------------------------------------------------------------
def configure_container(
    request: EngineRequest,
    pid: int,
    rootfs: str,
    options: EngineOptions,
    libc: Libc,
    *,
    faults: Faults | None = None,
    timer: PhaseTimer | None = None,
    part: Callable[[MountPlan], MountPlan] | None = None,
) -> EngineResult:
    """Configure the container whose init is `pid` (rootfs `rootfs`, as in the OCI spec).
    `part` narrows the hook's plan to what one step applies (CDI hooks: `nvhook.cdi.spec_hook`)."""
    from nvmount import privileges as P

    faults = faults or Faults()
    timer = timer or PhaseTimer()
    if options.limit_privileges:
        P.limit_permitted()
    from nvmount.ldcache.setting import resolve_ldconfig

    resolve_ldconfig(options.ldconfig)  # a refused setting fails before any change
    missing = missing_root(options.root)
    if missing is not None:  # one line, before load-kmods would warn about its /dev
        raise DriverError(missing)
    if options.load_kmods:
        with P.stage(P.Stage.KMODS):
            _host_nodes(options, request)
    with timer.phase("inventory"), P.stage(P.Stage.INIT):
        inventory = discover(options, faults, mig_minors=needs_mig_minors(request))
        selection = select_and_check(inventory, request)
    with Cleanup() as stack:
        # MOUNT, not CONTAINER: the layout is read through a private procfs clone (SYS_ADMIN)
        with timer.phase("container"), P.stage(P.Stage.MOUNT):
            handle = stack.enter_context(_open_container(pid, rootfs, options, libc))
        with timer.phase("plan"):
            plan = hook_plan(make_plan(inventory, selection, request, handle, options), options)
            plan = part(plan) if part is not None else plan
        from nvmount.effects import Run  # not the dry run's (the wrapper's create)

        effects = Run(handle, plan, options, libc, faults, timer, stack).execute()
    result = EngineResult(plan, inventory, effects.applied, effects.cgroup, effects.ldconfig,
                          (*plan.warnings, *effects.warnings), dict(timer.phases_ms),
                          effects.ldcache)
    write_timing(options, timer, pid, result)
    return result


def configure_with_plan(make_plan: Callable[[ContainerLayout], MountPlan], pid: int,
                        rootfs: str, options: EngineOptions, libc: Libc, *,
                        faults: Faults | None = None,
                        timer: PhaseTimer | None = None) -> Effects:
    """Apply a plan made without an inventory (a CDI spec's hook: `nvhook.cdi.spec_hook`) to the
    container, with the same effects, journal and rollback as `configure_container`;
    `make_plan` gets the container's layout (its CUDA compat libraries)."""
    from nvmount import privileges as P
    from nvmount.ldcache.setting import resolve_ldconfig

    faults = faults or Faults()
    timer = timer or PhaseTimer()
    if options.limit_privileges:
        P.limit_permitted()
    resolve_ldconfig(options.ldconfig)
    with Cleanup() as stack:
        with timer.phase("container"), P.stage(P.Stage.MOUNT):
            handle = stack.enter_context(_open_container(pid, rootfs, options, libc))
        with timer.phase("plan"):
            plan = make_plan(handle.layout)
        from nvmount.effects import Run

        return Run(handle, plan, options, libc, faults, timer, stack).execute()


def _host_nodes(options: EngineOptions, request: EngineRequest) -> None:
    """`load-kmods`: modules and missing host nodes before discovery (apply.host_nodes)."""
    from nvmount.apply import host_nodes

    host_nodes.load_modules(options.root, options.proc_root)
    host_nodes.ensure_nodes(options.root, options.proc_root, request.imex_channels,
                            create_imex=options.create_imex_channels)


def _open_container(pid: int, rootfs: str, options: EngineOptions,
                    libc: Libc) -> ContainerHandle:
    from nvmount.container.open import open_container

    return open_container(pid, rootfs, proc_root=options.host_proc,
                          no_cgroups=options.no_cgroups, libc=libc)


def write_timing(options: EngineOptions, timer: PhaseTimer, pid: int,
                 result: EngineResult | None, *, dry_run: bool = False) -> None:
    """Append the timing record when `timing_log` is set; a failure is only logged."""
    if not options.timing_log:
        return
    from nvmount.plan.types import Bind, Symlink, WriteFile
    from nvmount.timing import append_record

    fields: dict[str, object] = {"container": options.container_id, "pid": pid,
                                 "dry_run": dry_run}
    if result is not None:
        plan = result.plan
        fields.update(mounts=result.applied.mounts, binds=plan.count(Bind),
                      files=plan.count(WriteFile), symlinks=plan.count(Symlink),
                      device_rules=len(plan.device_rules), gpus=len(plan.gpus))
    from nvmount.errors import TrustError

    try:
        append_record(options.timing_log, timer.record(**fields))
    except OSError as err:
        log.warning("write timing record to %s: %s", options.timing_log, err.strerror)
    except TrustError as err:
        log.warning("%s: no timing record written", err)
