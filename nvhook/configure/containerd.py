"""containerd: a drop-in file with the `nvidia` runtime (config versions 2 and 3). Pure.

The main config.toml is read, never written: its `version` (absent: 1) picks the CRI plugin
(`io.containerd.grpc.v1.cri` for 2, `io.containerd.cri.v1.runtime` for 3); the runtime table
is copied from its default runtime (`default_runtime_name`, unless that is an nvidia one),
else `runc`, else `crun` - so options like `SystemdCgroup` carry over - and then:

    version = 2
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
    runtime_type = "io.containerd.runc.v2"            # always set (a drop-in without it fails)
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/local/bin/nvidia-container-runtime"

plus `default_runtime_name = "nvidia"` with --set-as-default. An existing drop-in keeps its
other content; its `version` must match the main file's. containerd reads a drop-in only when
the main file's `imports` names it (a glob counts): `imports_drop_in` tells.
"""

from __future__ import annotations

import copy
import fnmatch
import os
from typing import Any

from nvhook.errors import ConfigureError

CRI_PLUGINS = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
DISABLED_NAMES = {2: ("io.containerd.grpc.v1.cri", "cri"),
                  3: ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri")}
RUNC_V2 = "io.containerd.runc.v2"


def config_version(main: dict[str, Any] | None, default: int) -> int:
    """The main file's `version` (absent: 1; no file: `default`), checked."""
    if main is None:
        return default
    version = main.get("version", 1)
    if version not in (2, 3):
        raise ConfigureError(
            f"containerd config version {version!r} is not supported (versions 2 and 3 are; "
            "migrate with `containerd config migrate`)")
    return int(version)


def _path(doc: dict[str, Any], *keys: str) -> Any:
    node: Any = doc
    for k in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(k)
    return node


def cri_disabled(main: dict[str, Any] | None, version: int) -> bool:
    disabled = (main or {}).get("disabled_plugins", [])
    return isinstance(disabled, list) and any(d in DISABLED_NAMES[version] for d in disabled)


def base_runtime(main: dict[str, Any] | None, version: int) -> dict[str, Any]:
    """The runtime table to copy: the default runtime's (not nvidia*), else runc, else crun."""
    containerd = _path(main or {}, "plugins", CRI_PLUGINS[version], "containerd") or {}
    runtimes = containerd.get("runtimes") if isinstance(containerd, dict) else None
    runtimes = runtimes if isinstance(runtimes, dict) else {}
    default = containerd.get("default_runtime_name", "runc") if isinstance(
        containerd, dict) else "runc"
    for name in (default, "runc", "crun"):
        table = runtimes.get(name)
        if isinstance(name, str) and not name.startswith("nvidia") and isinstance(table, dict):
            return copy.deepcopy(table)
    return {"runtime_type": RUNC_V2}


def runtime_table(main: dict[str, Any] | None, version: int, path: str) -> dict[str, Any]:
    table = base_runtime(main, version)
    table.setdefault("runtime_type", RUNC_V2)
    options = table.setdefault("options", {})
    if not isinstance(options, dict):
        raise ConfigureError("the copied runtime's `options` is not a table")
    options["BinaryName"] = path
    return table


def configure(main: dict[str, Any] | None, drop_in: dict[str, Any] | None, version: int,
              name: str, path: str, *, set_default: bool, where: str,
              enable_cdi: bool = False) -> dict[str, Any]:
    """The drop-in document: `drop_in` (or nothing) with the runtime `name` set (and, with
    `enable_cdi`, the CRI plugin's `enable_cdi = true`)."""
    out = copy.deepcopy(drop_in) if drop_in else {}
    if out.get("version", version) != version:
        raise ConfigureError(f"refuse to edit {where}: it has version {out.get('version')!r} "
                             f"but the main config is version {version} (remove it)")
    out["version"] = version
    node = out
    for k in ("plugins", CRI_PLUGINS[version], "containerd"):
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigureError(f"refuse to edit {where}: {k} is not a table")
    runtimes = node.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise ConfigureError(f"refuse to edit {where}: runtimes is not a table")
    runtimes[name] = runtime_table(main, version, path)
    if set_default:
        node["default_runtime_name"] = name
    if enable_cdi:
        out["plugins"][CRI_PLUGINS[version]]["enable_cdi"] = True
    return out


def imports_drop_in(main: dict[str, Any] | None, main_path: str, drop_in: str) -> bool:
    """Whether the main config's `imports` (paths or globs, relative to its dir) name it."""
    imports = (main or {}).get("imports", [])
    base = os.path.dirname(main_path)
    target = os.path.normpath(drop_in)
    for pattern in imports if isinstance(imports, list) else ():
        if not isinstance(pattern, str):
            continue
        full = os.path.normpath(os.path.join(base, pattern))  # filepath.Glob: "*" stops at "/"
        if all(fnmatch.fnmatchcase(t, p) for t, p in zip(
                target.split("/"), full.split("/"))) and \
                target.count("/") == full.count("/"):
            return True
    return False
