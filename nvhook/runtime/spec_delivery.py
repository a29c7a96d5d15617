"""Spec delivery: a GPU container configured by the wrapper's `create` alone, before runc runs.

Stage: the wrapper's create (after the decision, `nvhook.runtime.create`). The engine's dry run
plans the container on its rootfs (same inventory cache, selection, requirement checks and
errors as the hook); the plan is then delivered without a hook process:

    plan entry                           delivered by
    driver files, IPC sockets, firmware  `mounts` (runc binds them)  nvhook.runtime.spec_entries
    device nodes and their rules         `linux.devices`, `linux.resources.devices`
    SONAME, driver and graphics links    written into the rootfs     nvhook.runtime.rootfs
    the ld.so.cache                      written into the rootfs     nvhook.runtime.rootfs
    the application profile (graphics)   a file in the bundle, bound read-only over
                                         /etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf
    the /proc/driver/nvidia view         the prestart hook, only with `[nvhook] narrow-procfs`
                                         (runc refuses mounts under /proc)
    CUDA memory limits (NVML)            the prestart hook, only with `[nvhook]
                                         cuda-memory-limits` and both variables set

Any prestart hook of NVIDIA's or nvhook's already in the spec (Docker's `--gpus` adds one) is
removed, as NVIDIA's jit-cdi removes it; nvhook's own hook comes back only when something is
left for it: the procfs view (`narrow-procfs = true`, or the simulated driver's procfs, which
only a hook can mount), links under a mount of the spec (/dev), or an ld.so.cache that needs
ldconfig (`nvhook.runtime.rootfs`). The hook then computes the same plan and applies only what
the spec and the rootfs do not already have (`nvhook.hook.spec_mode`).

Without `narrow-procfs` the container sees /proc/driver/nvidia as the kernel shows it: every GPU
of the node (bus ids, models) and the driver's `params`, as in NVIDIA's CDI and jit-cdi modes
(docs/runtimes.md has the trade-off). No NVIDIA driver on the host: the hook delivers
everything (legacy), with a warning.
"""

from __future__ import annotations

import os
import posixpath

from nvhook.errors import WrapperError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

    from nvhook.config.model import HookConfig
    from nvhook.hook.request import ContainerRequest
    from nvhook.launch.runtime_log import RuntimeLog
    from nvhook.runtime.bundle import BundleFile
    from nvmount.api import MountPlan, PhaseTimer

PROFILE_FILE = "nvhook-application-profile.conf"  # in the bundle directory
PROC = "/proc"


def deliver_spec(doc: dict[str, Any], request: ContainerRequest, bundle: BundleFile,
                 rootfs: str, config: HookConfig, log: RuntimeLog,
                 timer: PhaseTimer) -> tuple[str, ...] | None:
    """Deliver the container's plan into `doc` and its rootfs; what is left for the prestart
    hook (empty: no hook), or None when no driver is found (the hook delivers everything)."""
    from nvhook.hook.mount import engine_options, engine_request
    from nvmount.api import Libc, plan_only

    plan = plan_only(engine_request(request), rootfs, engine_options(config), Libc(),
                     timer=timer)
    if plan is None:
        log.warning("spec delivery: no NVIDIA driver found; the prestart hook delivers "
                    "everything")
        return None
    with timer.phase("mounts"):
        before = mount_destinations(doc)
        _add_entries(doc, plan, log)
        profile = _add_profile(doc, plan, bundle)
    with timer.phase("rootfs"):
        from nvhook.runtime.rootfs import write_rootfs

        work = write_rootfs(plan, rootfs, before, _owner(doc), ldcache_mode=config.nvhook.ldcache,
                            ldconfig_required=config.nvhook.ldconfig_required, log=log)
    log.info(f"spec delivery: {work.links} links, ld.so.cache {work.ldcache}"
             + (", application profile" if profile else ""))
    left = list(work.left)
    if any(_under_proc(e.target) for e in plan.entries) and (
            config.nvhook.narrow_procfs or config.nvhook.sim_procfs):
        left.append("the /proc/driver/nvidia view")
    if config.nvhook.cuda_memory_limits and plan.gpus and _asks_memory_limits(doc):
        left.append("the CUDA memory limits")  # NVML, on the container's cgroup: at start
    return tuple(left)


def _asks_memory_limits(doc: dict[str, Any]) -> bool:
    """Whether the container sets a GPU memory request and limit (the hook reads them)."""
    from nvhook.hook.memlimits import LIMITS, REQUESTS, env_of

    names = {str(e).partition("=")[0] for e in env_of(doc)}
    return bool(names & set(REQUESTS)) and bool(names & set(LIMITS))


def mount_destinations(doc: dict[str, Any]) -> frozenset[str]:
    """The normalised destinations of the spec's mounts."""
    mounts = doc.get("mounts")
    return frozenset(posixpath.normpath(m["destination"]) for m in (
        mounts if isinstance(mounts, list) else ()) if isinstance(m, dict)
        and isinstance(m.get("destination"), str) and m["destination"].startswith("/"))


def _under_proc(path: str) -> bool:
    return path == PROC or path.startswith(PROC + "/")


def _add_entries(doc: dict[str, Any], plan: MountPlan, log: RuntimeLog) -> None:
    """The runtime's share of the plan: mounts, device nodes and rules."""
    from nvhook.runtime.edit import add_devices, add_mounts
    from nvhook.runtime.spec_entries import device_nodes, spec_entries

    modes: dict[str, int] = {}
    for node in device_nodes(plan):
        try:
            modes[node.source] = os.stat(node.source).st_mode
        except OSError as err:
            raise WrapperError(f"spec delivery: stat device node {node.source}: "
                               f"{err.strerror}") from err
    entries = spec_entries(plan, modes)
    nodes, rules = add_devices(doc, entries.devices, entries.rules)
    mounts = add_mounts(doc, entries.mounts)
    log.info(f"spec delivery: added {mounts} mounts, {nodes} device nodes and {rules} device "
             "rules to the spec")


def _add_profile(doc: dict[str, Any], plan: MountPlan, bundle: BundleFile) -> bool:
    """Graphics: the application profile as a file in the bundle, bound read-only."""
    from nvhook.runtime.edit import add_mounts
    from nvmount.api import WriteFile

    profile = next((e for e in plan.entries if isinstance(e, WriteFile)
                    and e.what == "application profile"), None)
    if profile is None:
        return False
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(PROFILE_FILE, flags, 0o444, dir_fd=bundle.dir_fd)
        try:
            os.write(fd, profile.data)
            os.fchmod(fd, 0o444)
        finally:
            os.close(fd)
    except OSError as err:
        raise WrapperError(f"spec delivery: write {PROFILE_FILE} in the bundle "
                           f"{posixpath.dirname(bundle.path)}: {err.strerror}") from err
    source = posixpath.join(posixpath.dirname(bundle.path), PROFILE_FILE)
    add_mounts(doc, [{"destination": profile.target, "type": "bind", "source": source,
                      "options": ["bind", "ro", "nosuid", "nodev", "noexec"]}])
    return True


def _owner(doc: dict[str, Any]) -> tuple[int, int]:
    """The host uid and gid of the container's root (its user namespace maps 0 to them)."""
    linux = doc.get("linux")
    linux = linux if isinstance(linux, dict) else {}
    return _host_id(linux.get("uidMappings")), _host_id(linux.get("gidMappings"))


def _host_id(mappings: Any) -> int:
    for m in mappings if isinstance(mappings, list) else ():
        if not isinstance(m, dict):
            continue
        inside, host, size = (m.get(k) for k in ("containerID", "hostID", "size"))
        if isinstance(inside, int) and isinstance(host, int) and isinstance(size, int) \
                and not isinstance(inside, bool) and inside <= 0 < inside + size:
            return host - inside
    return 0
