"""Bridge from the hook's decision to the mount engine (owned by the engine integrator).

`run_engine` is called by `nvhook.hook.prestart` for GPU containers. It maps `HookConfig` to
`nvmount.requests.EngineOptions` and `ContainerRequest` to `EngineRequest` (what NVIDIA's hook
turns into `nvidia-container-cli configure` flags, hook-spec §1.16), then:

- real run: `configure_container` for the container's pid and rootfs; returns None. Errors
  are `NvmountError`s (the CLI prints them as one line); everything is rolled back first.
- dry run (`dry_run=True`): changes nothing, needs no privileges; returns the plan as a
  JSON-ready dict, or None when no driver is found:

      {"driver": {"version": "550.54.15", "cuda_version": "12.4", "root": "/"},
       "devices": ["GPU-...", "MIG-..."],
       "entries": [{"op": "tmpfs", "target": "/proc/driver/nvidia", "flags": "ro,...",
                    "what": "procfs view", "mode": "0555"},
                   {"op": "file", "target": "/proc/driver/nvidia/params", "flags": "",
                    "what": "procfs file", "mode": "0444", "size": 1024},
                   {"op": "bind", "source": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                    "target": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                    "flags": "ro,nosuid,nodev", "what": "library"},
                   {"op": "symlink", "target": "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                    "link": "libcuda.so.550.54.15", "flags": "", "what": "soname link"}, ...],
       "device_rules": ["c 195:255 rw", "c 195:0 rw", ...],
       "ldconfig_dirs": ["/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"],
       "files_by_capability": {"utility": ["<host path>", ...], "compute": [...],
                               "always": ["<firmware, nvidiactl>", ...]},
       "warnings": ["..."]}

Spec mode: `delivered` (what the container's config.json makes the runtime do,
`nvhook.hook.spec_mode`) is left out of what the engine applies (`nvmount.plan.split`).

Options: `timer` (a `nvmount.timing.PhaseTimer` the hook started first thing, with its
`config` and `spec` phases) makes the timing record cover the whole hook; `environ` is where
the fault-injection variables are read (default `os.environ`; see `nvmount.faults`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from nvhook.config.model import HookConfig
    from nvhook.hook.request import ContainerRef, ContainerRequest
    from nvmount.api import Delivered, EngineOptions, EngineRequest, MountPlan, PhaseTimer

MAX_IMEX_CHANNEL = 1 << 20


def run_engine(
    request: ContainerRequest,
    container: ContainerRef,
    config: HookConfig,
    *,
    dry_run: bool,
    debug: bool,
    timer: PhaseTimer | None = None,
    environ: Mapping[str, str] | None = None,
    delivered: Delivered | None = None,
    env: Sequence[object] = (),
) -> dict[str, object] | None:
    """Configure the container for `request`; in dry-run, return the plan instead. `env` (the
    container's) is read only with `[nvhook] cuda-memory-limits`."""
    import os

    from nvmount.api import Faults, Libc, PhaseTimer, configure_container, plan_only, write_timing

    timer = timer or PhaseTimer()
    options = engine_options(config, container, limit_privileges=not dry_run,
                             delivered=delivered)
    ereq = engine_request(request)
    libc = Libc()
    if dry_run:
        plan = plan_only(ereq, container.rootfs, options, libc, timer=timer)
        write_timing(options, timer, container.pid, None, dry_run=True)
        return None if plan is None else plan_to_json(plan)
    faults = Faults.from_env(os.environ if environ is None else environ, debug=debug,
                             enabled=config.nvhook.test_faults)
    result = configure_container(ereq, container.pid, container.rootfs, options, libc,
                                 faults=faults, timer=timer)
    if config.nvhook.cuda_memory_limits and result.plan.gpus:
        from nvhook.hook.memlimits import apply

        apply(env, container.pid, result.inventory.root, result.plan.gpus)
    return None


def engine_request(request: ContainerRequest) -> EngineRequest:
    """ContainerRequest -> EngineRequest (the device ids as a tuple, end to end)."""
    from nvmount.api import EngineRequest

    return EngineRequest(
        devices=tuple(request.devices),
        capabilities=request.driver_capabilities,
        requirements=() if request.disable_require else tuple(request.requirements),
        mig_config=",".join(request.mig_config_devices) or None,
        mig_monitor=",".join(request.mig_monitor_devices) or None,
        imex_channels=tuple(imex_channel(v) for v in request.imex_channels),
        features=request.features,
    )


def imex_channel(value: str) -> int:
    """A channel number as libnvc accepts it: decimal and below 2^20."""
    from nvmount.bounds import parse_decimal, shorten
    from nvmount.errors import SelectionError

    channel = parse_decimal(value, max_digits=len(str(MAX_IMEX_CHANNEL)))
    if channel is None or channel >= MAX_IMEX_CHANNEL:
        raise SelectionError(f"unsupported IMEX channel value: {shorten(value)} (use a "
                             f"decimal channel number below {MAX_IMEX_CHANNEL} in "
                             "NVIDIA_IMEX_CHANNELS)")
    return channel


def compat_mode(config: HookConfig) -> str:
    """`modes.legacy.cuda-compat-mode` as the hook maps it (hook-spec §1.16)."""
    value = config.runtime.modes_legacy_cuda_compat_mode
    if value in ("ldconfig", "mount"):
        return value
    if value in ("disabled", "hook"):
        return "disabled"
    # other values: NVIDIA passes no flag with the opt-in (libnvc default: mount), else disabled
    return "mount" if config.features.allow_cuda_compat_libs_from_container else "disabled"


# plan entries a read-only target in the image may skip with a warning (EngineOptions.optional):
# the application profile and the graphics links; none of them is needed to run CUDA
OPTIONAL_ENTRIES = frozenset(("application profiles", "graphics link", "dri link"))


def engine_options(config: HookConfig, container: ContainerRef | None = None, *,
                   limit_privileges: bool = False, delivered: Delivered | None = None,
                   cli_flags: dict[str, str | bool] | None = None) -> EngineOptions:
    """HookConfig -> EngineOptions. `cli_flags` (root, ldcache, ldconfig, no_cgroups,
    compat_mode: nvidia-container-cli's flags) win over the config file."""
    import os

    from nvhook.hook.request import csv_mode
    from nvmount.api import CompatMode, EngineOptions

    cli, flags = config.cli, cli_flags or {}
    return EngineOptions(
        root=str(flags.get("root") or cli.root or "/"),
        ldcache=str(flags.get("ldcache") or cli.ldcache or "/etc/ld.so.cache"),
        proc_root=config.nvhook.proc_root or "/proc",
        sys_root=config.nvhook.sys_root or "/sys",
        load_kmods=config.cli.load_kmods,
        create_imex_channels=not config.features.disable_imex_channel_creation,
        ldconfig=str(flags.get("ldconfig") or cli.ldconfig or "@/sbin/ldconfig"),
        ldconfig_required=config.nvhook.ldconfig_required,
        no_cgroups=bool(flags.get("no_cgroups") or cli.no_cgroups),
        compat_mode=CompatMode(str(flags.get("compat_mode") or compat_mode(config))),
        timing_log=config.nvhook.timing_log,
        cache_dir=config.nvhook.cache_dir,
        nvml_timeout=config.nvhook.nvml_timeout,
        ldcache_mode=config.nvhook.ldcache,
        mps_pipe_dir=config.nvhook.mps_pipe_directory or "/tmp/nvidia-mps",
        container_id=os.path.basename(container.bundle.rstrip("/")) if container else "",
        limit_privileges=limit_privileges,
        sim_procfs=config.nvhook.sim_procfs,
        delivered=delivered,
        csv_spec_dir=config.runtime.modes_csv_mount_spec_path if csv_mode(config) else "",
        optional=OPTIONAL_ENTRIES,
    )


def plan_to_json(plan: MountPlan) -> dict[str, object]:
    """The dry-run document (shape in the module docstring and docs/architecture.md)."""
    from nvmount.api import Bind, Symlink, Tmpfs

    entries: list[dict[str, object]] = []
    by_cap: dict[str, list[str]] = {}
    for e in plan.entries:
        if isinstance(e, Bind):
            entries.append({"op": "bind", "source": e.source, "target": e.target,
                            "flags": e.flags.names(), "what": e.what})
            if e.what in _DRIVER_FILES:
                for name in e.gate.names() or ("always",):
                    by_cap.setdefault(name, []).append(e.source)
        elif isinstance(e, Tmpfs):
            entries.append({"op": "tmpfs", "target": e.target, "flags": e.flags.names(),
                            "what": e.what, "mode": f"{e.mode:04o}"})
        elif isinstance(e, Symlink):
            entries.append({"op": "symlink", "target": e.target, "link": e.link, "flags": "",
                            "what": e.what})
        else:
            entries.append({"op": "file", "target": e.target, "flags": "", "what": e.what,
                            "mode": f"{e.mode:04o}", "size": len(e.data)})
    return {
        "driver": {"version": plan.driver_version, "cuda_version": plan.cuda_version,
                   "root": plan.driver_root},
        "devices": [*plan.gpus, *plan.mig_devices],
        "entries": entries,
        "device_rules": [f"c {r.major}:{r.minor} {r.access}" for r in plan.device_rules],
        "ldconfig_dirs": list(plan.ldconfig_dirs),
        "files_by_capability": by_cap,
        "warnings": list(plan.warnings),
    }


_DRIVER_FILES = frozenset({"library", "library32", "binary", "firmware", "ipc", "device"})
