"""Docker's daemon.json: the `nvidia` runtime entry (hook-spec 4.1). Pure.

    {"runtimes": {"nvidia": {"args": [], "path": "/usr/local/bin/nvidia-container-runtime"}},
     "default-runtime": "nvidia"}                      # only with --set-as-default

Everything else in the file is kept, in its order (NVIDIA's rewrite sorts the keys); an
existing entry of the same name keeps its other keys and its `args`. The file must be a JSON
object, and `runtimes` an object; docker has no drop-in directory for daemon.json.
"""

from __future__ import annotations

import copy
from typing import Any

from nvhook.errors import ConfigureError


def decode(text: str, path: str) -> dict[str, Any]:
    """daemon.json as an object ("" -> {}), strictly (`nvmount.jsonio.strict_loads`: a
    duplicate key, NaN or an oversized number is refused; dockerd would keep one value)."""
    if not text.strip():
        return {}
    from nvmount.jsonio import strict_loads

    try:
        doc = strict_loads(text)
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
    import json

    return json.dumps(doc, indent=4, ensure_ascii=False) + "\n"
