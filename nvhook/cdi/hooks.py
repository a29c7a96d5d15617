"""`nvhook cdi hook NAME [ARGS]`: the hooks a generated CDI spec names, run by the OCI runtime
at `createRuntime` with the container's state on stdin (as a prestart hook is).

Each is a run of the engine on the container in spec mode: the request is the GPUs whose
nodes the spec (config.json, after the CDI edits) creates, `delivered` is what the spec makes
the runtime do (the CDI mounts, nodes and rules), so the hook's share of the plan is what a
runtime cannot do from a spec; each hook applies its part of that share, fd-safe in the
container's mount namespace (`nvmount.engine.configure_container`):

    create-symlinks --link TEXT::PATH ...   the links (only those named, and only the plan's)
    update-ldcache --folder DIR ...         the container's ld.so.cache for the driver's libraries
    procfs                                  /proc/driver/nvidia narrowed to the container's GPUs
                                            (and the application profile), as the legacy hook
                                            does; with the simulated driver it provides it

A link or folder that the plan does not have is an error: the spec is stale (`nvhook cdi
check`). Nothing from the container is run or used as a mount source.
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import NvhookError, UsageError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable

    from nvhook.flags import GlobalOptions
    from nvmount.discover.inventory import DriverInventory
    from nvmount.plan.types import MountPlan

HOOKS = ("create-symlinks", "update-ldcache", "procfs")
MAX_ARGS = 8192


def parse_args(name: str, args: list[str]) -> list[str]:
    """The values of `--link` (create-symlinks) or `--folder` (update-ldcache)."""
    if name not in HOOKS:
        raise UsageError(f"nvhook cdi hook: unknown hook {name!r} (one of {', '.join(HOOKS)})")
    flag = {"create-symlinks": "--link", "update-ldcache": "--folder"}.get(name)
    if len(args) > MAX_ARGS:
        raise UsageError(f"nvhook cdi hook {name}: more than {MAX_ARGS} arguments")
    values: list[str] = []
    it = iter(args)
    for arg in it:
        if flag is not None and arg == flag:
            value = next(it, None)
        elif flag is not None and arg.startswith(flag + "="):
            value = arg[len(flag) + 1:]
        else:
            raise UsageError(f"nvhook cdi hook {name}: unexpected argument {arg[:100]!r}")
        if value is None or not value or "\0" in value:
            raise UsageError(f"nvhook cdi hook {name}: {flag} needs a value")
        values.append(value)
    return values


def part_for(name: str, values: list[str]) -> Callable[[MountPlan], MountPlan]:
    """The narrowing of the hook's plan to what hook `name` applies."""
    from nvmount.plan.types import Symlink
    from nvmount.records import replace

    def part(plan: MountPlan) -> MountPlan:
        if name == "create-symlinks":
            planned = {f"{e.link}::{e.target}": e for e in plan.entries
                       if isinstance(e, Symlink)}
            unknown = [v for v in values if v not in planned]
            if unknown:
                raise NvhookError(f"cdi hook create-symlinks: {unknown[0][:200]} is not a link "
                                  "of this driver (the CDI spec is stale: nvhook cdi check "
                                  "--refresh)")
            return replace(plan, entries=tuple(planned[v] for v in values), device_rules=(),
                           ldconfig_dirs=(), ldcache_entries=())
        if name == "update-ldcache":
            folders = tuple(dict.fromkeys(values))
            return replace(plan, entries=(), device_rules=(), ldconfig_dirs=folders,
                           ldcache_entries=tuple(e for e in plan.ldcache_entries
                                                 if os.path.dirname(e[1]) in folders))
        return replace(plan, entries=tuple(e for e in plan.entries
                                           if not isinstance(e, Symlink)),
                       ldconfig_dirs=(), ldcache_entries=())

    return part


def gpu_devices(inventory: DriverInventory, nodes: frozenset[tuple[str, int, int]]) -> tuple[
        str, ...]:
    """The GPUs (by index) and MIG devices (`G:I`) whose nodes the spec creates."""
    have = {(major, minor) for _, major, minor in nodes}
    devices = [str(g.index) for g in inventory.gpus
               if (g.node.major, g.node.minor) in have and not g.mig_enabled]
    for g in inventory.gpus:
        for m in g.mig_devices:
            caps = [c for c in (m.gi_cap, m.ci_cap) if c is not None]
            if caps and all((c.major, c.minor) in have for c in caps):
                devices.append(f"{g.index}:{m.index}")
    return tuple(devices)


def main_hook(name: str, args: list[str], opts: GlobalOptions) -> int:
    from nvhook.config.load import load_config
    from nvhook.delivery import delivered_by_spec
    from nvhook.engine import engine_options
    from nvhook.oci import load_spec, load_state
    from nvhook.prestart import container_ref
    from nvmount import engine
    from nvmount._libc import Libc
    from nvmount.engine_types import EngineRequest
    from nvmount.faults import Faults
    from nvmount.records import replace

    values = parse_args(name, args)
    config = load_config(opts.config_path, os.environ, cwd=opts.cwd)
    state = load_state(opts.stdin if opts.stdin is not None else 0)
    spec = load_spec(state.bundle, cwd=opts.cwd)
    ref = container_ref(state, spec, opts.cwd)
    delivered = delivered_by_spec(spec)
    options = engine_options(config, ref, limit_privileges=True, delivered=delivered)
    options = replace(options, sim_procfs=options.sim_procfs and name == "procfs")
    inventory, _ = engine.discover_cached(options, Faults())
    request = EngineRequest(devices=gpu_devices(inventory, delivered.devices),
                            capabilities=config.supported_driver_capabilities)
    result = engine.configure_container(request, ref.pid, ref.rootfs, options, Libc(),
                                        part=part_for(name, values))
    if opts.debug:
        a = result.applied
        sys.stderr.write(f"nvhook cdi hook {name}: {a.mounts} mounts, {a.files} files, "
                         f"{a.symlinks} links, ld.so.cache {result.ldcache or '-'}\n")
    return 0
