"""The plan of a CDI spec's hook (`nvhook cdi hook apply`), from its arguments alone. Pure.

What a runtime cannot do from a spec, for the devices the container was granted, as the
legacy plan has it (`nvmount.plan.mounts`, same labels, targets and order):

    procfs view         tmpfs on /proc/driver/nvidia, params (ModifyDeviceFiles: 0), version,
                        registry, a read-only bind of each granted GPU's gpus/<bus-id>
    application profile graphics: tmpfs + 10-container.conf with the granted GPUs' bits
    links               the driver's links (SONAME, libcuda.so ...), the granted GPUs' DRM links
    MIG access files    read-only binds of each granted MIG device's gi/ci access file
    ld.so.cache         the spec's folders and entries; the image's CUDA forward-compat dir
                        first when its libcuda is newer than the driver (as the legacy hook)

No device rule: the runtime allows the spec's nodes itself, and the hook never grants more.
"""

from __future__ import annotations

import posixpath

from nvmount.api import (
    APP_PROFILE_DIR,
    APP_PROFILE_FILE,
    APP_PROFILE_MODE,
    MASK_BITS,
    PROC_DRIVER,
    RO_PROC,
    UNGATED,
    Bind,
    MountPlan,
    Symlink,
    Tmpfs,
    WriteFile,
    app_profile_bytes,
    gpu_mask,
    rewrite_params,
)
from nvmount.fs.paths import SourceKind

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.cdi.spec_hook_args import HookInputs
    from nvmount.api import ContainerLayout, PlanEntry, ProcFile

# labels of the entries a read-only target may skip (EngineOptions.optional)
OPTIONAL = frozenset(("driver link", "dri link", "application profiles"))


def hook_plan(inputs: HookInputs, granted: tuple[str, ...], proc_files: tuple[ProcFile, ...],
              layout: ContainerLayout) -> tuple[MountPlan, list[str]]:
    """(the plan, warnings) for the `granted` device keys of `inputs`."""
    devices = [inputs.devices[k] for k in granted]
    warnings: list[str] = []
    entries: list[PlanEntry] = []
    if inputs.proc_dir:
        entries += _procfs(inputs, proc_files, [p for d in devices for p in d.proc_dirs])
    if inputs.app_profile:
        entries += _app_profile([d.nodes[0][2] for d in devices if d.nodes], warnings)
    entries += [Symlink(path, text, "driver link") for text, path in inputs.links]
    entries += [Symlink(path, text, "dri link") for d in devices for text, path in d.links]
    entries += [Bind(f, _in_proc(inputs.proc_dir, f), SourceKind.FILE, RO_PROC, "mig access")
                for d in devices for f in d.files]
    folders = inputs.folders
    compat = _compat_dirs(inputs, layout)
    plan = MountPlan(
        entries=_unique(entries), device_rules=(), ldconfig_dirs=(*compat, *folders),
        libs_dir=folders[0] if folders else layout.libs_dir,
        libs32_dir=folders[1] if len(folders) > 1 else layout.libs32_dir,
        bins_dir=layout.bins_dir, capabilities=UNGATED, gpus=(), mig_devices=(),
        driver_version=inputs.driver_version, driver_root=inputs.driver_root,
        ldcache_entries=inputs.ldcache)
    return plan, warnings


def _procfs(inputs: HookInputs, files: tuple[ProcFile, ...],
            gpu_dirs: list[str]) -> list[PlanEntry]:
    entries: list[PlanEntry] = [Tmpfs(PROC_DRIVER, 0o555, RO_PROC, "procfs view")]
    for f in files:
        data = rewrite_params(f.data) if f.name == "params" else f.data
        entries.append(WriteFile(f"{PROC_DRIVER}/{f.name}", data, f.mode, "procfs file"))
    for source in dict.fromkeys(gpu_dirs):
        target = f"{PROC_DRIVER}/gpus/{posixpath.basename(source.rstrip('/'))}"
        entries.append(Bind(source, target, SourceKind.DIRECTORY, RO_PROC, "procfs gpu"))
    return entries


def _app_profile(minors: list[int], warnings: list[str]) -> list[PlanEntry]:
    entries: list[PlanEntry] = [Tmpfs(APP_PROFILE_DIR, APP_PROFILE_MODE, RO_PROC,
                                      "application profiles")]
    mask, dropped = gpu_mask(list(dict.fromkeys(minors)))
    for minor in dropped:
        warnings.append(f"application profile: GPU minor {minor} (>= {MASK_BITS}) is not "
                        "listed in EGLVisibleDGPUDevices")
    if mask:
        entries.append(WriteFile(APP_PROFILE_FILE, app_profile_bytes(mask), APP_PROFILE_MODE,
                                 "application profile"))
    return entries


def _in_proc(proc_dir: str, host_path: str) -> str:
    """The container path of a host file under the driver's /proc/driver/nvidia."""
    return PROC_DRIVER + host_path[len(proc_dir.rstrip("/")):]


def _compat_dirs(inputs: HookInputs, layout: ContainerLayout) -> tuple[str, ...]:
    if inputs.compat_mode == "disabled" or not inputs.folders:
        return ()
    from nvmount.api import newer_compat_dirs

    return newer_compat_dirs(inputs.driver_version, layout.cuda_compat_libs)


def _unique(entries: list[PlanEntry]) -> tuple[PlanEntry, ...]:
    """The first entry per target (a GPU's proc dir granted through it and a MIG device)."""
    seen: set[str] = set()
    out = []
    for e in entries:
        if e.target not in seen:
            seen.add(e.target)
            out.append(e)
    return tuple(out)
