"""CDI device requests in the runtime wrapper (hook-spec 3.4): the names the request's policy
let through (`nvhook.hook.request.cdi_request`), resolved from the spec files of the CDI spec dirs
and applied to config.json as a CDI runtime would (the CDI library's rules, v1.1.0):

- env entries are set (one with the same name is replaced);
- device nodes go to `linux.devices` (replacing one at the same path; type and numbers from
  the host node when the spec leaves them out; owned by the container's user when the spec
  names no owner) with an allow rule in `linux.resources.devices` (`permissions`, else rwm);
- mounts replace one at the same destination, then are ordered parents first;
- hooks are appended to their stage; additionalGids to `process.user.additionalGids`;
- a spec's own containerEdits are applied once, whichever of its devices are requested;
- NVIDIA_VISIBLE_DEVICES becomes `void`, so a legacy hook configured elsewhere adds nothing.

Every spec is read with the real parsers and type-checked (`nvhook.cdi.document`); a spec
dir later in the list wins. A spec whose device nodes are gone from this host is refused,
never used. An unknown name fails the create with the real cause: the specs that could not
be read, or the names that do exist. Every config.json field on the way is type-checked.
"""

from __future__ import annotations

import os

from nvhook.errors import CdiError, WrapperError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every GPU create ~3 ms
if TYPE_CHECKING:
    from typing import Any

    Registry = dict[str, tuple[str, dict[str, Any], dict[str, Any]]]

VISIBLE = "NVIDIA_VISIBLE_DEVICES"


def load_registry(dirs: tuple[str, ...], cache_dir: str = "") -> tuple[Registry, list[str]]:
    """({qualified name: (spec path, spec, device)}, the specs that could not be read); specs
    come from the root-only cache in `cache_dir` while their files are unchanged."""
    from nvhook.cdi.check import read_spec_cached, spec_files

    registry: Registry = {}
    broken: list[str] = []
    for directory in dirs:
        for path in spec_files((directory,), kind=None):
            try:
                spec = read_spec_cached(path, cache_dir)
            except CdiError as err:
                broken.append(str(err))
                continue
            for device in spec["devices"]:
                registry[f"{spec['kind']}={device['name']}"] = (path, spec, device)
    return registry, broken


def apply_devices(doc: dict[str, Any], names: tuple[str, ...] | list[str],
                  dirs: tuple[str, ...], cache_dir: str = "") -> list[str]:
    """Apply the edits of `names` to the OCI document; the spec files used."""
    registry, broken = load_registry(dirs, cache_dir)
    missing = [n for n in names if n not in registry]
    if missing:
        raise WrapperError(_unresolvable(missing, registry, broken, dirs))
    used: list[str] = []
    for name in names:
        path, spec, device = registry[name]
        _check_present(name, path, spec, device)
        if path not in used:
            used.append(path)
            apply_edits(doc, spec.get("containerEdits") or {}, f"{path}: containerEdits")
        apply_edits(doc, device["containerEdits"], f"{path}: device {name}")
    _void_visible(doc)
    return used


def _unresolvable(missing: list[str], registry: Registry, broken: list[str],
                  dirs: tuple[str, ...]) -> str:
    text = f"unresolvable CDI devices {', '.join(missing)}"
    if broken:
        return f"{text}: {broken[0]}" + (f" (and {len(broken) - 1} more unreadable specs)"
                                         if len(broken) > 1 else "")
    kinds = {m.partition("=")[0] for m in missing}
    known = [n for n in registry if n.partition("=")[0] in kinds]
    if known:
        shown = ", ".join(known[:6]) + (", ..." if len(known) > 6 else "")
        return f"{text}: not in the specs of {', '.join(dirs)} (they have {shown})"
    return (f"{text}: no spec in {', '.join(dirs)} provides {', '.join(sorted(kinds))} "
            "(generate one: nvhook cdi generate --output /etc/cdi/nvidia.yaml)")


def _check_present(name: str, path: str, spec: dict[str, Any], device: dict[str, Any]) -> None:
    from nvhook.cdi.check import node_problem

    common = (spec.get("containerEdits") or {}).get("deviceNodes") or []
    nodes = [*common, *(device["containerEdits"].get("deviceNodes") or [])]
    for node in nodes:
        why = node_problem(node)
        if why:
            raise WrapperError(f"CDI device {name} ({path}): {why} (the spec is stale: "
                               "nvhook cdi check --refresh, or regenerate it with the tool "
                               "that wrote it)")


def _child(obj: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = obj.get(name)
    if value is None:
        value = obj[name] = kind()
    if not isinstance(value, kind):
        raise WrapperError(f"apply CDI edits: config.json {where}.{name} is not a JSON "
                           f"{'array' if kind is list else 'object'}")
    return value


def apply_edits(doc: dict[str, Any], edits: dict[str, Any], source: str) -> None:
    """Apply one containerEdits (validated) to the document."""
    process = _child(doc, "process", dict, "")
    env = _child(process, "env", list, "process")
    for entry in edits.get("env") or ():
        key = entry.partition("=")[0]
        env[:] = [e for e in env if not (isinstance(e, str) and e.partition("=")[0] == key)]
        env.append(entry)
    for node in edits.get("deviceNodes") or ():
        _add_node(doc, process, node, source)
    mounts = _child(doc, "mounts", list, "")
    added = {m["containerPath"]: {"destination": m["containerPath"],
                                  "type": m.get("type") or "bind", "source": m["hostPath"],
                                  "options": list(m.get("options") or ())}
             for m in edits.get("mounts") or ()}  # one per destination, the last one wins
    if added:
        mounts[:] = [x for x in mounts if not (isinstance(x, dict) and isinstance(
            x.get("destination"), str) and x["destination"] in added)]
        mounts += added.values()
        mounts.sort(key=_depth)  # stable: parents first, as the CDI library orders them
    hooks = _child(doc, "hooks", dict, "")
    for h in edits.get("hooks") or ():
        stage = _child(hooks, h["hookName"], list, "hooks")
        stage.append({k: v for k, v in (("path", h["path"]), ("args", h.get("args")),
                                        ("env", h.get("env")), ("timeout", h.get("timeout")))
                      if v is not None})
    if edits.get("additionalGids"):
        user = _child(process, "user", dict, "process")
        gids = _child(user, "additionalGids", list, "process.user")
        gids += [g for g in edits["additionalGids"] if g not in gids]


def _depth(mount: Any) -> int:
    dest = mount.get("destination") if isinstance(mount, dict) else None
    return len([p for p in os.path.normpath(dest).split("/") if p]) if isinstance(
        dest, str) else 0


def _add_node(doc: dict[str, Any], process: dict[str, Any], node: dict[str, Any],
              source: str) -> None:
    kind, major, minor = _fill(node, source)
    entry: dict[str, Any] = {"path": node["path"], "type": kind, "major": major,
                             "minor": minor}
    if node.get("fileMode") is not None:
        entry["fileMode"] = node["fileMode"]
    found = process.get("user")
    user: dict[str, Any] = found if isinstance(found, dict) else {}
    for key in ("uid", "gid"):
        value = node.get(key)
        if value is None and isinstance(user.get(key), int) and user[key] > 0:
            value = user[key]  # the CDI library: the container's user owns it
        if value is not None:
            entry[key] = value
    linux = _child(doc, "linux", dict, "")
    devices = _child(linux, "devices", list, "linux")
    devices[:] = [d for d in devices if not (isinstance(d, dict) and d.get("path") ==
                                             node["path"])] + [entry]
    if kind != "p":
        rules = _child(_child(linux, "resources", dict, "linux"), "devices", list,
                       "linux.resources")
        rules.append({"allow": True, "type": kind, "major": major, "minor": minor,
                      "access": node.get("permissions") or "rwm"})


def _fill(node: dict[str, Any], source: str) -> tuple[str, int, int]:
    """(type, major, minor): the spec's, else the host node's (CDI's fillMissingInfo)."""
    import stat

    kind = node.get("type") or ""
    major, minor = node.get("major") or 0, node.get("minor") or 0
    if kind and (major or kind == "p"):
        return kind, major, minor
    host = node.get("hostPath") or node["path"]
    try:
        st = os.stat(host)
    except OSError as err:
        raise WrapperError(f"{source}: device node {host}: {err.strerror} (regenerate the "
                           "spec: nvhook cdi check --refresh)") from err
    found = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else \
        "p" if stat.S_ISFIFO(st.st_mode) else ""
    if not found or (kind and kind != found):
        raise WrapperError(f"{source}: device node {host}: not a {kind or 'device'} node")
    if not major and found != "p":
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return found, major, minor


def _void_visible(doc: dict[str, Any]) -> None:
    env = doc["process"]["env"]
    env[:] = [f"{VISIBLE}=void" if isinstance(e, str) and e.partition("=")[0] == VISIBLE
              else e for e in env]
