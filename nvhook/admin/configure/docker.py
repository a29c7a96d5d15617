"""Docker's daemon.json: the `nvidia` runtime entry (hook-spec 4.1). Pure.

    {"runtimes": {"nvidia": {"args": [], "path": "/usr/local/bin/nvidia-container-runtime"}},
     "default-runtime": "nvidia"}                      # only with --set-as-default

Everything else in the file is kept, in its order (NVIDIA's rewrite sorts the keys); an
existing entry of the same name keeps its other keys and its `args`. The file must be a JSON
object, and `runtimes` an object; docker has no drop-in directory for daemon.json.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from nvhook.errors import ConfigureError


def decode(text: str, path: str) -> dict[str, Any]:
    """daemon.json as an object ("" -> {}); duplicate keys are refused (dockerd keeps one)."""
    if not text.strip():
        return {}

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise ValueError(f"duplicate key {k!r}")
            out[k] = v
        return out

    try:
        doc = json.loads(text, object_pairs_hook=pairs)
    except ValueError as err:
        raise ConfigureError(f"refuse to edit {path}: not valid JSON: {err} (fix the file "
                             "first; nothing was written)") from err
    if not isinstance(doc, dict):
        raise ConfigureError(f"refuse to edit {path}: not a JSON object (nothing was written)")
    return doc


def configure(doc: dict[str, Any], name: str, path: str, *, set_default: bool,
              where: str, enable_cdi: bool = False) -> dict[str, Any]:
    """A copy of `doc` with runtime `name` -> `path` (and the default runtime; with
    `enable_cdi`, `"features": {"cdi": true}`, other features kept)."""
    out = copy.deepcopy(doc)
    runtimes = out.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise ConfigureError(f"refuse to edit {where}: \"runtimes\" is not an object")
    entry = runtimes.setdefault(name, {})
    if not isinstance(entry, dict):
        raise ConfigureError(f"refuse to edit {where}: \"runtimes\".{name!r} is not an object")
    entry.setdefault("args", [])
    entry["path"] = path
    if set_default:
        out["default-runtime"] = name
    if enable_cdi:
        features = out.setdefault("features", {})
        if not isinstance(features, dict):
            raise ConfigureError(f"refuse to edit {where}: \"features\" is not an object")
        features["cdi"] = True
    return out


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=4, ensure_ascii=False) + "\n"
