"""CRI-O: a drop-in in /etc/crio/crio.conf.d with the `nvidia` runtime (hook-spec 4.1). Pure.

    [crio.runtime.runtimes.nvidia]
    runtime_path = "/usr/local/bin/nvidia-container-runtime"
    runtime_type = "oci"

The table is copied first from the main config's default runtime (`crio.runtime.default_runtime`,
unless an nvidia one), else `runc`, else `crun`; `--set-as-default` adds
`[crio.runtime] default_runtime = "nvidia"`. CRI-O reads every file in crio.conf.d (no import
line needed; /etc/crio/conf.d is not read). An existing drop-in keeps its other content.
"""

from __future__ import annotations

import copy
from typing import Any

from nvhook.errors import ConfigureError


def _runtimes(doc: dict[str, Any] | None) -> dict[str, Any]:
    node: Any = doc or {}
    for k in ("crio", "runtime", "runtimes"):
        node = node.get(k) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def base_runtime(main: dict[str, Any] | None) -> dict[str, Any]:
    runtime = ((main or {}).get("crio") or {}).get("runtime") or {}
    default = runtime.get("default_runtime", "runc") if isinstance(runtime, dict) else "runc"
    runtimes = _runtimes(main)
    for name in (default, "runc", "crun"):
        table = runtimes.get(name)
        if isinstance(name, str) and not name.startswith("nvidia") and isinstance(table, dict):
            return copy.deepcopy(table)
    return {}


def configure(main: dict[str, Any] | None, drop_in: dict[str, Any] | None, name: str,
              path: str, *, set_default: bool, where: str) -> dict[str, Any]:
    out = copy.deepcopy(drop_in) if drop_in else {}
    node = out
    for k in ("crio", "runtime"):
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigureError(f"refuse to edit {where}: {k} is not a table")
    runtimes = node.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise ConfigureError(f"refuse to edit {where}: crio.runtime.runtimes is not a table")
    table = base_runtime(main)
    table["runtime_path"] = path
    table["runtime_type"] = "oci"
    runtimes[name] = table
    if set_default:
        node["default_runtime"] = name
    return out
