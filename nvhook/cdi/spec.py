"""A CDI spec as the projection of the engine's legacy plans. Pure.

    the plan with no device (every supported capability)
        bind mounts of driver files      -> containerEdits.mounts (ro,nosuid,nodev,bind)
        control device nodes             -> containerEdits.deviceNodes
        links, ld.so.cache, procfs view,
        application profile              -> the one hook, `nvhook cdi hook apply` (its args)
    the plan of one device (GPU `0`, MIG `0:1`; `all` = every GPU and MIG device, as the
    legacy `all`)
        its nodes beyond the common ones -> devices[name].containerEdits.deviceNodes
        its grant                        -> devices[name].containerEdits.env
                                            NVHOOK_CDI_DEVICE_<KEY>=<KEY>
        its proc dir, MIG access files,
        DRM links, node numbers          -> the hook's table (--device*=KEY=...)

The container paths are the plan's: a spec gives a container what the legacy hook gives an
image of the driver root's own layout (`nvhook.cdi.generate.spec_layout`). Runtimes create
the nodes and allow them in the device cgroup themselves; the hook adds no rule. The stamp
(`nvhook.cdi.stamp`) is the hook's env `NVHOOK_CDI_STAMP` (cdiVersion 0.5.0, the newest
Podman 4.3 reads, has no annotations), or a spec annotation when there is no hook.
"""

from __future__ import annotations

import os

from nvhook.cdi.document import minimal_version, version_key
from nvhook.cdi.spec_hook_args import DeviceEntry, HookInputs, grant_env, render
from nvhook.errors import CdiError
from nvmount.api import RUNTIME_MOUNTS, Bind, MountFlag, MountPlan, Symlink
from nvmount.fs.paths import SourceKind

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

    NodeModes = dict[str, tuple[int, int, int]]  # host path -> (mode, uid, gid)

KIND = "nvidia.com/gpu"
STAMP_ENV = "NVHOOK_CDI_STAMP"
STAMP_ANNOTATION = "cdi.nvhook.io/stamp"
HOOK_STAGE = "createRuntime"
STRATEGIES = ("index", "uuid", "type-index")
GATED_NAMES = ("gds", "mofed", "nvswitch", "gdrcopy")  # devices of the gated families
_OPTIONS = ((MountFlag.RDONLY, "ro"), (MountFlag.NOSUID, "nosuid"), (MountFlag.NODEV, "nodev"),
            (MountFlag.NOEXEC, "noexec"))


class Device:
    """One CDI device: its names, its key in the hook's table ("" for a gated family) and the
    plan of its selection."""

    __slots__ = ("key", "names", "plan")

    def __init__(self, names: tuple[str, ...], plan: MountPlan, key: str = "") -> None:
        self.names, self.plan, self.key = names, plan, key


def nodes(plan: MountPlan) -> list[Bind]:
    return [e for e in plan.entries if isinstance(e, Bind) and e.kind == SourceKind.DEVICE
            and e.rdev is not None]


def device_node(node: Bind, modes: NodeModes) -> dict[str, Any]:
    """A deviceNode: path, hostPath (when it differs), c, numbers, the host node's mode (and
    its owner when not the default), rw."""
    assert node.rdev is not None
    entry: dict[str, Any] = {"path": node.target}
    if node.source != node.target:
        entry["hostPath"] = node.source
    entry.update(type="c", major=node.rdev[0], minor=node.rdev[1])
    mode, uid, gid = modes.get(node.source, (0o666, 0, 0))
    entry["fileMode"] = mode & 0o777
    entry.update({k: v for k, v in (("uid", uid), ("gid", gid)) if v})
    entry["permissions"] = "rw"
    return entry


def mount(bind: Bind) -> dict[str, Any]:
    words = [w for flag, w in _OPTIONS if flag in bind.flags]
    return {"hostPath": bind.source, "containerPath": bind.target, "options": [*words, "bind"]}


def hook(path: str, args: list[str], stamp: str) -> dict[str, Any]:
    return {"hookName": HOOK_STAGE, "path": path,
            "args": [os.path.basename(path), "cdi", "hook", "apply", *args],
            "env": [f"{STAMP_ENV}={stamp}"]}


def device_entry(device: Device, common: MountPlan) -> DeviceEntry:
    """The hook's table entry of a GPU or MIG device: its nodes (the GPU's first), its proc
    dir and MIG access files, its links beyond the common plan's."""
    taken = {n.target for n in nodes(common)}
    found = [(n.source, n.rdev[0], n.rdev[1]) for n in nodes(device.plan)
             if n.target not in taken and n.rdev is not None]
    if any("," in path for path, _, _ in found):
        raise CdiError(f"cdi generate: device {device.key}: a node path with ',' cannot be "
                       "named in the hook's arguments")
    entry = DeviceEntry(tuple(found))
    binds = [e for e in device.plan.entries if isinstance(e, Bind)]
    entry.proc_dirs = tuple(b.source for b in binds if b.what == "procfs gpu")
    entry.files = tuple(b.source for b in binds if b.what == "mig access")
    links = {e.target for e in common.entries if isinstance(e, Symlink)}
    entry.links = tuple((e.link, e.target) for e in device.plan.entries
                        if isinstance(e, Symlink) and e.target not in links)
    if ":" not in device.key and len(device.plan.gpus) == 1:  # a full GPU (not MIG)
        entry.uuid = device.plan.gpus[0]
    return entry


def hook_inputs(base: HookInputs, common: MountPlan, devices: list[Device]) -> HookInputs:
    """`base` (the host settings) completed from the plans: links, folders, ld.so.cache
    entries, the application profile and the device table."""
    base.links = tuple((e.link, e.target) for e in common.entries if isinstance(e, Symlink))
    base.folders = tuple(dict.fromkeys(common.ldconfig_dirs))
    base.ldcache = common.ldcache_entries
    base.app_profile = any(getattr(e, "what", "") == "application profiles"
                           for e in common.entries)
    base.devices = {d.key: device_entry(d, common) for d in devices if d.key}
    return base


def device_edits(device: Device, common: MountPlan, modes: NodeModes) -> dict[str, Any]:
    """The device's nodes (and a gated family's files) beyond the common edits, its grant."""
    taken = {n.target for n in nodes(common)}
    edits: dict[str, Any] = {"deviceNodes": [device_node(n, modes) for n in nodes(device.plan)
                                             if n.target not in taken]}
    shared = {e.target for e in common.entries if isinstance(e, Bind)}
    mounts = [mount(e) for e in device.plan.entries if isinstance(e, Bind)
              and e.what == "gated" and e.target not in shared]
    if mounts:
        edits["mounts"] = mounts
    return edits


def build_spec(common: MountPlan, devices: list[Device], *, hook_path: str | None,
               inputs: HookInputs | None, modes: NodeModes, kind: str = KIND,
               all_device: bool = True, version: str = "") -> dict[str, Any]:
    """The spec: one entry per device name, `all` last; cdiVersion the lowest that fits, or
    `version` when given (CdiError when it cannot express the spec)."""
    entries = []
    everything: dict[str, dict[str, Any]] = {}
    grants: list[str] = []
    for device in devices:
        edits = device_edits(device, common, modes)
        if device.key and hook_path:
            edits["env"] = [grant_env(device.key)]
            grants.append(edits["env"][0])
        for node in edits["deviceNodes"] if device.key else ():  # `all`: every GPU and MIG
            everything.setdefault(node["path"], node)  # device, as the legacy `all`
        entries += [{"name": name, "containerEdits": edits} for name in device.names]
    shared = common_edits(common, hook_path, inputs, modes)
    if not any(d.key for d in devices):  # no GPU to name (WSL2, Tegra CSV): `all` is it
        everything = {n["path"]: n for n in shared.pop("deviceNodes", [])}
    if everything and all_device:
        edits = {"deviceNodes": list(everything.values())}
        edits.update({"env": grants} if grants else {})
        entries.append({"name": "all", "containerEdits": edits})
    spec: dict[str, Any] = {"cdiVersion": "", "kind": kind, "devices": entries,
                            "containerEdits": shared}
    spec["cdiVersion"] = choose_version(spec, version)
    return spec


def common_edits(plan: MountPlan, hook_path: str | None, inputs: HookInputs | None,
                 modes: NodeModes) -> dict[str, Any]:
    mounts = [mount(e) for e in plan.entries
              if isinstance(e, Bind) and e.what in RUNTIME_MOUNTS and e.kind != SourceKind.DEVICE]
    edits: dict[str, Any] = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],  # a legacy hook elsewhere adds nothing
        "deviceNodes": [device_node(n, modes) for n in nodes(plan)], "mounts": mounts,
        "hooks": [hook(hook_path, render(inputs), "")] if hook_path and inputs else []}
    return {k: v for k, v in edits.items() if v}


def choose_version(spec: dict[str, Any], forced: str) -> str:
    needed = minimal_version(spec)
    if not forced:
        return needed
    from nvhook.cdi.document import VERSIONS

    if forced not in VERSIONS:
        raise CdiError(f"cdi generate: --cdi-version {forced[:20]}: not a CDI version (one of "
                       f"{', '.join(VERSIONS[2:])})")
    if version_key(forced) < version_key(needed):
        raise CdiError(f"cdi generate: --cdi-version {forced}: this spec needs {needed} "
                       "(device names that start with a digit and hostPath need 0.5.0: use "
                       "--device-name-strategy type-index for 0.3.0/0.4.0)")
    return forced


def spec_stamp(spec: dict[str, Any]) -> str | None:
    """The stamp a spec carries (its hooks' NVHOOK_CDI_STAMP, else its annotation)."""
    edits = spec.get("containerEdits") or {}
    for h in edits.get("hooks") or ():
        for entry in h.get("env") or ():
            if isinstance(entry, str) and entry.startswith(STAMP_ENV + "="):
                return entry[len(STAMP_ENV) + 1:]
    value = (spec.get("annotations") or {}).get(STAMP_ANNOTATION)
    return value if isinstance(value, str) else None


def with_stamp(spec: dict[str, Any], value: str) -> dict[str, Any]:
    """`spec` with its stamp set to `value`: in its hooks' env, else (no hook) in its
    annotations when its cdiVersion has them (0.6.0+). In place; returned for chaining."""
    hooks = (spec.get("containerEdits") or {}).get("hooks") or []
    for h in hooks:
        h["env"] = [e for e in h.get("env", ()) if not e.startswith(STAMP_ENV + "=")]
        h["env"].append(f"{STAMP_ENV}={value}")
    if not hooks and version_key(spec["cdiVersion"]) >= version_key("0.6.0"):
        spec.setdefault("annotations", {})[STAMP_ANNOTATION] = value
    return spec


def named_paths(spec: dict[str, Any]) -> list[str]:
    """Every host path the spec names (mounts, device nodes)."""
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec.get("containerEdits", {})]
    paths = [m["hostPath"] for e in edits for m in e.get("mounts", ())]
    paths += [n.get("hostPath", n["path"]) for e in edits for n in e.get("deviceNodes", ())]
    return paths
