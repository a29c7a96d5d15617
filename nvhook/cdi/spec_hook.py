"""`nvhook cdi hook apply ARGS`: the one hook of a generated CDI spec, run by the OCI runtime at
`createRuntime` with the container's state on stdin (as a prestart hook is).

Everything it needs is in its arguments (`nvhook.cdi.spec_hook_args`): no config file, no NVML, no
discovery. One process per container applies, in one pass of the same fd-safe engine as the
legacy hook (`nvmount.api.configure_with_plan`), what a runtime cannot do from a spec: the
procfs view, the application profile, the links, the MIG access files and the ld.so.cache
(`nvhook.cdi.spec_hook_plan`); with `--memory-limits`, NVML's CUDA memory limits of the granted
full GPUs (`nvhook.hook.memlimits`).

The devices it works for are granted by the request, never by the spec it runs on:

1. requested: the device keys the CDI resolution applied (each device's edits put
   `NVHOOK_CDI_DEVICE_<KEY>=<KEY>` in the container's environment); keys the hook's own
   arguments do not know are ignored;
2. allowed: of those, the devices whose every node config.json's device cgroup rules
   already allow read-write (a node added without its rule grants nothing);
3. present: each node of a granted device must still exist on the host with its number,
   else the spec is stale and the container is refused (`nvhook cdi check --refresh`).

The hook adds no cgroup rule. A link or the application profile whose target is read-only
is skipped with a warning, never a failed container.
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import CdiError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

    from nvhook.cdi.spec_hook_args import HookInputs
    from nvhook.flags import GlobalOptions

HOOKS = ("apply",)


def main_hook(name: str, args: list[str], opts: GlobalOptions) -> int:
    if name not in HOOKS:
        raise CdiError(f"nvhook cdi hook: unknown hook {name[:60]!r} (the spec's hook is "
                         "`apply`; regenerate an older spec: nvhook cdi check --refresh)")
    from nvhook.cdi.spec_hook_args import parse
    from nvhook.hook.locate import container_rootfs, load_bundle_spec
    from nvhook.hook.oci import load_state

    inputs = parse(args)
    state = load_state(opts.stdin if opts.stdin is not None else 0)
    spec = load_bundle_spec(state, opts.cwd)
    linux = spec.linux if isinstance(spec.linux, dict) else {}
    resources = linux.get("resources")
    rules = resources.get("devices") if isinstance(resources, dict) else None
    granted, dropped = granted_devices(inputs, spec.env, rules)
    for key in dropped:
        sys.stderr.write(f"nvhook cdi hook apply: device {key} requested but its nodes are "
                         "not allowed by the container's device cgroup: not granted\n")
    check_present(inputs, granted)
    rootfs, note = container_rootfs(state, spec, opts.cwd)
    if note:
        sys.stderr.write(f"nvhook cdi hook apply: {note}\n")
    effects = apply(inputs, granted, state.pid, rootfs)
    if inputs.memory_limits:  # `[nvhook] cuda-memory-limits` when the spec was made
        from nvhook.hook.memlimits import apply as apply_limits

        uuids = [inputs.devices[k].uuid for k in granted if inputs.devices[k].uuid]
        apply_limits(spec.env, state.pid, inputs.driver_root, uuids)
    if opts.debug:
        a = effects.applied
        sys.stderr.write(f"nvhook cdi hook apply: devices {', '.join(granted) or '-'}: "
                         f"{a.mounts} mounts, {a.files} files, {a.symlinks} links, "
                         f"ld.so.cache {effects.ldcache or '-'}\n")
    return 0


def requested_keys(inputs: HookInputs, env: tuple[str, ...] | list[str]) -> list[str]:
    """The device keys the container's environment names (NVHOOK_CDI_DEVICE_*), known to the
    hook, in the order of the hook's arguments."""
    from nvhook.cdi.spec_hook_args import GRANT_PREFIX

    values: dict[str, str] = {}
    for entry in env:
        name, sep, value = entry.partition("=")
        if sep and name.startswith(GRANT_PREFIX):
            values[name] = value  # the last one of a name wins, as for any variable
    named = set(values.values())
    return [key for key in inputs.devices if key in named]


def granted_devices(inputs: HookInputs, env: tuple[str, ...] | list[str],
                    rules: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(granted keys, requested keys whose nodes the cgroup rules do not allow)."""
    granted: list[str] = []
    dropped: list[str] = []
    for key in requested_keys(inputs, env):
        nodes = inputs.devices[key].nodes
        ok = all(rule_allows(rules, major, minor) for _, major, minor in nodes)
        (granted if ok else dropped).append(key)
    return tuple(granted), tuple(dropped)


def rule_allows(rules: Any, major: int, minor: int) -> bool:
    """Whether `linux.resources.devices` (in order, the last matching rule wins, a rule
    without type/major/minor matches all) allows `c major:minor` read and write. Entries of
    the wrong type match nothing; no rules allow nothing."""
    allowed = False
    for rule in rules if isinstance(rules, list) else ():
        if not isinstance(rule, dict) or not isinstance(rule.get("allow"), bool):
            continue
        kind = rule.get("type") or "a"
        access = rule.get("access") or "rwm"
        if kind not in ("a", "c") or not isinstance(access, str):
            continue
        if not (_matches(rule.get("major"), major) and _matches(rule.get("minor"), minor)):
            continue
        if rule["allow"] and "r" in access and "w" in access:
            allowed = True
        elif not rule["allow"] and ("r" in access or "w" in access):
            allowed = False
    return allowed


def _matches(value: Any, number: int) -> bool:
    if value is None:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and value in (-1, number)


def check_present(inputs: HookInputs, granted: tuple[str, ...]) -> None:
    """CdiError when a granted device's node is gone from the host or has another number."""
    for key in granted:
        for path, major, minor in inputs.devices[key].nodes:
            why = node_mismatch(path, major, minor)
            if why:
                raise CdiError(f"cdi hook: device {key}: {path} ({major}:{minor}): {why} on "
                               f"this host (the CDI spec is stale: nvhook cdi check --refresh)")


def node_mismatch(path: str, major: int, minor: int) -> str:
    """Why host `path` is not the character device major:minor ("" when it is)."""
    import stat

    try:
        st = os.stat(path)
    except OSError as err:
        return (err.strerror or str(err)).lower()
    if not stat.S_ISCHR(st.st_mode):
        return "not a character device"
    found = (os.major(st.st_rdev), os.minor(st.st_rdev))
    return "" if found == (major, minor) else f"now {found[0]}:{found[1]}"


def apply(inputs: HookInputs, granted: tuple[str, ...], pid: int, rootfs: str) -> Any:
    """Run the hook's plan on the container (the engine's effects)."""
    from nvhook.cdi.spec_hook_plan import OPTIONAL, hook_plan
    from nvmount.api import EngineOptions, Libc, configure_with_plan
    from nvmount.log import get_logger

    proc_files: tuple[Any, ...] = ()
    if inputs.proc_dir:
        from nvmount.api import read_proc_files

        proc_files = read_proc_files(inputs.proc_dir)
    options = EngineOptions(root=inputs.driver_root, ldconfig=inputs.ldconfig,
                            ldconfig_required=inputs.ldconfig_required, no_cgroups=True,
                            ldcache_mode=inputs.ldcache_mode, limit_privileges=True,
                            sim_procfs=inputs.sim_procfs, optional=OPTIONAL)
    log = get_logger(__name__)

    def make(layout: Any) -> Any:
        plan, warnings = hook_plan(inputs, granted, proc_files, layout)
        for warning in warnings:
            log.warning("%s", warning)
        return plan

    return configure_with_plan(make, pid, rootfs, options, Libc())
