"""CDI device requests in the runtime wrapper (hook-spec 3.4): fully qualified names in
NVIDIA_VISIBLE_DEVICES (`nvidia.com/gpu=0`) and the `cdi.k8s.io/` annotations of the device
plugin's CDI strategy, resolved from the spec files in the CDI spec dirs and applied to
config.json as a CDI runtime would (the CDI library's rules):

- env entries are appended (one with the same name is replaced);
- device nodes go to `linux.devices` (replacing one at the same path) with an allow rule in
  `linux.resources.devices` (the node's `permissions`, else `rwm`);
- mounts are appended (replacing one at the same destination);
- hooks are appended to their stage;
- a spec's own containerEdits are applied once, whichever of its devices are requested;
- NVIDIA_VISIBLE_DEVICES becomes `void`, so a legacy hook configured elsewhere adds nothing.

Spec dirs later in the list win, as in the CDI library; a name no spec provides fails the
create naming it. Pure but for reading the spec files.
"""

from __future__ import annotations

from nvhook.errors import WrapperError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every GPU create ~3 ms
if TYPE_CHECKING:
    from typing import Any

VISIBLE = "NVIDIA_VISIBLE_DEVICES"


def requested(env: list[str], annotations: dict[str, Any], prefixes: tuple[str, ...],
              qualified: Any) -> list[str]:
    """The CDI device names a container asks for: NVIDIA_VISIBLE_DEVICES entries that are
    qualified names, and the values of annotations whose key starts with a prefix."""
    names: list[str] = []
    for entry in env:
        key, _, value = entry.partition("=")
        if key == VISIBLE:
            names = [v.strip() for v in value.split(",") if qualified(v.strip())]
    for key, value in sorted(annotations.items()):
        if isinstance(value, str) and any(key.startswith(p) for p in prefixes):
            names += [v.strip() for v in value.split(",") if v.strip()]
    return list(dict.fromkeys(names))


def load_registry(dirs: tuple[str, ...]) -> dict[str, tuple[str, dict[str, Any],
                                                            dict[str, Any]]]:
    """{qualified name: (spec path, spec, device)}; a later dir's spec wins."""
    from nvhook.cdi.check import read_spec, spec_files

    registry: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}
    for directory in dirs:
        for path in spec_files((directory,)):
            spec = read_spec(path)
            for device in spec["devices"]:
                if isinstance(device, dict) and isinstance(device.get("name"), str):
                    registry[f"{spec.get('kind')}={device['name']}"] = (path, spec, device)
    return registry


def apply_devices(doc: dict[str, Any], names: list[str], dirs: tuple[str, ...]) -> list[str]:
    """Apply the edits of `names` to the OCI document; the spec files used."""
    registry = load_registry(dirs)
    missing = [n for n in names if n not in registry]
    if missing:
        raise WrapperError(f"unresolvable CDI devices {', '.join(missing)} (in "
                           f"{', '.join(dirs)}; see `nvhook cdi list`, or generate the spec: "
                           "nvhook cdi generate --output /etc/cdi/nvidia.yaml)")
    used: list[str] = []
    for name in names:
        path, spec, device = registry[name]
        if path not in used:
            used.append(path)
            apply_edits(doc, spec.get("containerEdits") or {})
        apply_edits(doc, device.get("containerEdits") or {})
    _void_visible(doc)
    return used


def apply_edits(doc: dict[str, Any], edits: dict[str, Any]) -> None:
    process = doc.setdefault("process", {})
    env = process.setdefault("env", [])
    for entry in edits.get("env") or ():
        key = entry.partition("=")[0]
        env[:] = [e for e in env if e.partition("=")[0] != key] + [entry]
    linux = doc.setdefault("linux", {})
    devices = linux.setdefault("devices", [])
    rules = linux.setdefault("resources", {}).setdefault("devices", [])
    for node in edits.get("deviceNodes") or ():
        major, minor = _numbers(node)
        entry = {"path": node["path"], "type": node.get("type", "c"), "major": major,
                 "minor": minor,
                 "fileMode": node.get("fileMode", 0o666), "uid": 0, "gid": 0}
        devices[:] = [d for d in devices if d.get("path") != node["path"]] + [entry]
        rules.append({"allow": True, "type": entry["type"], "major": entry["major"],
                      "minor": entry["minor"], "access": node.get("permissions") or "rwm"})
    mounts = doc.setdefault("mounts", [])
    for m in edits.get("mounts") or ():
        entry = {"destination": m["containerPath"], "type": m.get("type", "bind"),
                 "source": m["hostPath"], "options": list(m.get("options") or ())}
        mounts[:] = [x for x in mounts if x.get("destination") != entry["destination"]]
        mounts.append(entry)
    hooks = doc.setdefault("hooks", {})
    for h in edits.get("hooks") or ():
        stage = hooks.setdefault(h["hookName"], [])
        stage.append({k: v for k, v in (("path", h["path"]), ("args", h.get("args")),
                                        ("env", h.get("env")), ("timeout", h.get("timeout")))
                      if v is not None})


def _numbers(node: dict[str, Any]) -> tuple[int, int]:
    """The node's major and minor: given, else those of its host node (as CDI does)."""
    if isinstance(node.get("major"), int) and isinstance(node.get("minor"), int):
        return node["major"], node["minor"]
    import os

    host = node.get("hostPath") or node["path"]
    try:
        st = os.stat(host)
    except OSError as err:
        raise WrapperError(f"CDI device node {host}: {err.strerror} (regenerate the spec: "
                           "nvhook cdi check --refresh)") from err
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def _void_visible(doc: dict[str, Any]) -> None:
    env = doc.get("process", {}).get("env", [])
    env[:] = [f"{VISIBLE}=void" if e.partition("=")[0] == VISIBLE else e for e in env]
