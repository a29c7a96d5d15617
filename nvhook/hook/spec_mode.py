"""Spec mode, the hook's side: what the container's own `config.json` makes the runtime do.

Stage: between the spec (`nvhook.hook.oci`) and the engine; pure. With `[nvhook] runtime-mode =
"spec"` the runtime wrapper has written the plan's driver-file binds into `mounts`, its device
nodes into `linux.devices` and its rules into `linux.resources.devices`
(`nvhook.runtime.spec_entries`).
The hook computes the same plan and leaves out what the spec already delivers
(`nvmount.plan.split.hook_share`), reading it here from the spec it loaded anyway:

- bind mounts: every `mounts` (source, destination) pair (normalised);
- device nodes: `linux.devices` entries of type "c" with integer major and minor;
- rules: `linux.resources.devices` exact `c M:m` allow rules granting r and w, in order, minus
  those a later deny rule covers (wildcard allows count for nothing: the hook then writes its
  own exact rule, which is harmless).

Malformed entries are skipped, never an error: a skipped entry only makes the hook do that part
itself (runc validates the spec on its own). Anything in the spec that matches the plan was
going to be mounted or allowed by the runtime anyway, so dropping it from the hook's share
changes nothing, whoever wrote it.
"""

from __future__ import annotations

import posixpath

from nvhook.hook.oci import Spec, field
from nvmount.api import Delivered

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any


def delivered_by_spec(spec: Spec) -> Delivered:
    """The mounts, device nodes and device rules `spec` makes the runtime deliver."""
    linux = spec.linux if isinstance(spec.linux, dict) else {}
    resources = field(linux, "resources")
    return Delivered(
        mounts=frozenset((posixpath.normpath(s), posixpath.normpath(d))
                         for s, d in spec.mounts if s.startswith("/") and d.startswith("/")),
        devices=frozenset(_devices(field(linux, "devices"))),
        rules=frozenset(_allowed(field(resources, "devices")
                                 if isinstance(resources, dict) else None)),
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _devices(items: Any) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict) or field(item, "type") != "c":
            continue
        path, major, minor = field(item, "path"), _int(field(item, "major")), \
            _int(field(item, "minor"))
        if isinstance(path, str) and path.startswith("/") and major is not None \
                and minor is not None:
            out.append((posixpath.normpath(path), major, minor))
    return out


def _allowed(rules: Any) -> set[tuple[int, int]]:
    """Exact `c M:m` rw allows, in order; a deny removes every allow it covers."""
    allowed: set[tuple[int, int]] = set()
    for rule in rules if isinstance(rules, list) else ():
        if not isinstance(rule, dict):
            continue
        kind = field(rule, "type") or "a"
        major, minor = _int(field(rule, "major")), _int(field(rule, "minor"))
        access = field(rule, "access")
        access = access if isinstance(access, str) else "rwm"
        if field(rule, "allow") is True:
            if kind == "c" and major is not None and minor is not None and major >= 0 \
                    and minor >= 0 and "r" in access and "w" in access:
                allowed.add((major, minor))
        elif kind in ("a", "c") and ("r" in access or "w" in access):
            allowed = {(ma, mi) for ma, mi in allowed
                       if not ((major in (None, -1, ma)) and (minor in (None, -1, mi)))}
    return allowed
