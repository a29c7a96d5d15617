"""Edits of a bundle's config.json document (a decoded JSON object). No I/O.

- the prestart hook: added once, after the existing prestart hooks, unless a hook named
  `nvidia-container-runtime-hook`, `nvidia-container-toolkit` or `nvhook-hook` (NVIDIA's rule,
  hook-spec 3.4, plus nvhook's own name) is already there; the entry always carries an explicit
  `env` (runc otherwise hands the hook its own environment: CVE-2025-23266) and an absolute
  path;
- spec mode: bind mounts appended to `mounts`, device nodes to `linux.devices`, allow rules to
  `linux.resources.devices` (`nvhook.runtime.spec_entries` builds them). An identical entry already
  present is not added twice; a different device at the same path is an error.

The functions edit the document they are given. Every object on the way must have the JSON
type the OCI spec gives it, and must be spelled exactly (Go matches `"Hooks"` like `"hooks"`,
so a differently cased key would leave two copies): anything else is a `WrapperError`.
"""

from __future__ import annotations

import os

from nvhook.config.basics import CONFIG_PATH_ENV as CONFIG_ENV
from nvhook.errors import WrapperError
from nvhook.runtime.modes import DELIVERY_ENV

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

HOOK_NAMES = frozenset(("nvidia-container-runtime-hook", "nvidia-container-toolkit",
                        "nvhook-hook"))
HOOK_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _child(obj: dict[str, Any], name: str, kind: type, where: str) -> Any:
    """obj[name], created empty when absent; checked for type and exact spelling."""
    for key in obj:
        if key != name and key.lower() == name.lower():
            raise WrapperError(f"edit OCI spec: {where}.{key}: spell it {name!r} (a second "
                               f"spelling would leave runc two {name} fields)")
    value = obj.setdefault(name, kind())
    if not isinstance(value, kind):
        raise WrapperError(f"edit OCI spec: {where}.{name} is not a JSON "
                           f"{'array' if kind is list else 'object'}")
    return value


def prestart_hooks(doc: dict[str, Any]) -> list[Any]:
    """The document's hooks.prestart list (created when absent)."""
    hooks = _child(doc, "hooks", dict, "config.json")
    return _child(hooks, "prestart", list, "hooks")  # type: ignore[no-any-return]


def existing_gpu_hook(doc: dict[str, Any]) -> str | None:
    """The path of a prestart hook that already gives GPUs (NVIDIA's or nvhook's)."""
    hooks = doc.get("hooks")
    prestart = hooks.get("prestart") if isinstance(hooks, dict) else None
    for hook in prestart if isinstance(prestart, list) else ():
        path = hook.get("path") if isinstance(hook, dict) else None
        if isinstance(path, str) and os.path.basename(path) in HOOK_NAMES:
            return path
    return None


def hook_entry(path: str, config_path: str | None, delivery: str = "") -> dict[str, Any]:
    """Our prestart hook entry: absolute path, NVIDIA's args, an explicit env (with the
    delivery the wrapper chose, `nvhook.runtime.modes.DELIVERY_ENV`)."""
    if not path.startswith("/"):
        raise WrapperError(f"prestart hook path {path!r} is not absolute "
                           "(set nvidia-container-runtime-hook.path to an absolute path)")
    env = [HOOK_PATH_ENV]
    if config_path:
        env.append(f"{CONFIG_ENV}={config_path}")
    if delivery:
        env.append(f"{DELIVERY_ENV}={delivery}")
    return {"path": path, "args": [os.path.basename(path), "prestart"], "env": env}


def remove_gpu_hooks(doc: dict[str, Any]) -> list[str]:
    """Remove every prestart hook named like NVIDIA's or nvhook's; their paths."""
    hooks = doc.get("hooks")
    prestart = hooks.get("prestart") if isinstance(hooks, dict) else None
    if not isinstance(prestart, list):
        return []
    gone = [h for h in prestart if isinstance(h, dict) and isinstance(h.get("path"), str)
            and os.path.basename(h["path"]) in HOOK_NAMES]
    prestart[:] = [h for h in prestart if not any(h is g for g in gone)]
    return [g["path"] for g in gone]


def add_prestart_hook(doc: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Append `entry` unless a GPU hook is there already; whether it was added."""
    if existing_gpu_hook(doc) is not None:
        return False
    prestart_hooks(doc).append(entry)
    return True


def add_mounts(doc: dict[str, Any], mounts: list[dict[str, Any]]) -> int:
    """Append bind mounts not already present; how many were added."""
    present = _child(doc, "mounts", list, "config.json")
    added = 0
    for mount in mounts:
        if mount not in present:
            present.append(mount)
            added += 1
    return added


def add_devices(doc: dict[str, Any], devices: list[dict[str, Any]],
                rules: list[dict[str, Any]]) -> tuple[int, int]:
    """Append device nodes and allow rules not already present; (nodes, rules) added."""
    linux = _child(doc, "linux", dict, "config.json")
    present = _child(linux, "devices", list, "linux")
    by_path = {d.get("path"): d for d in present if isinstance(d, dict)}
    nodes = 0
    for device in devices:
        other = by_path.get(device["path"])
        if other is None:
            present.append(device)
            by_path[device["path"]] = device
            nodes += 1
        elif (other.get("type"), other.get("major"), other.get("minor")) != (
                "c", device["major"], device["minor"]):
            raise WrapperError(
                f"edit OCI spec: linux.devices already has {device['path']} as "
                f"{other.get('type')} {other.get('major')}:{other.get('minor')}, not the GPU "
                f"driver's c {device['major']}:{device['minor']} (remove that device)")
    resources = _child(linux, "resources", dict, "linux")
    allowed = _child(resources, "devices", list, "linux.resources")
    added = 0
    for rule in rules:
        if rule not in allowed:
            allowed.append(rule)
            added += 1
    return nodes, added
