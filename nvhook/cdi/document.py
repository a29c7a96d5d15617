"""A CDI spec document, whoever wrote it: read (JSON, or YAML with PyYAML) and type-checked
field by field where it is read, as the CDI library (tags.cncf.io/container-device-interface
v1.1.0) decodes and validates it. Pure but for reading the file.

- `parse_document` decodes bytes: JSON with `json`, anything else with PyYAML's C loader
  (`CSafeLoader`, the pure-Python `SafeLoader` where libyaml is missing). PyYAML is imported
  only here, only for a YAML spec: never on the hook's path.
- `check_spec` checks every field the CDI schema defines, with the Go decoder's types (a
  string is a string, `major` an integer, `fileMode`/`uid`/`gid`/`additionalGids` uint32,
  `timeout` an int), refuses unknown fields (the library decodes strictly: it is how Podman 4
  refuses `additionalGids`), and applies the library's own rules: a known `cdiVersion` no
  lower than what the spec uses (`minimal_version`), a valid kind, device names and hook
  stages, env entries with `=`, device types and permissions, at least one device, unique
  names, no device with empty edits. Any problem is a `CdiError` of one line naming the file
  and the field (`/etc/cdi/x.yaml: devices[2].containerEdits.deviceNodes[0].major: not an
  integer`).
- A document is bounded: 16 MiB of text, and at most `MAX_VALUES` values walked (YAML aliases
  cannot make a small file a huge document).
"""

from __future__ import annotations

import json
import re

from nvhook.errors import CdiError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# The cdiVersions of the specs-go package at CDI v1.1.0 (the newest the schema knows).
VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0",
            "1.1.0")
NEWEST = VERSIONS[-1]
MAX_SPEC_BYTES = 16 * 1024 * 1024
MAX_VALUES = 1_000_000
HOOK_STAGES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart",
               "poststop")
_UINT32 = 1 << 32
_VENDOR = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def parse_document(data: bytes, where: str) -> Any:
    """The decoded document (JSON when it starts with `{`, else YAML)."""
    if len(data) > MAX_SPEC_BYTES:
        raise CdiError(f"{where}: larger than {MAX_SPEC_BYTES >> 20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CdiError(f"{where}: not UTF-8 text (byte {err.start})") from err
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as err:
            raise CdiError(f"{where}: not valid JSON: {str(err)[:200]}") from err
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # a safe loader
    except (yaml.YAMLError, RecursionError, ValueError) as err:
        first = " ".join(str(err).split())[:200]
        raise CdiError(f"{where}: not valid YAML: {first}") from err


class _Walk:
    """Where we are in the document, and how much of it was walked."""

    __slots__ = ("values", "where")

    def __init__(self, where: str) -> None:
        self.where, self.values = where, 0

    def fail(self, path: str, problem: str) -> CdiError:
        return CdiError(f"{self.where}: {path}: {problem}")

    def count(self, path: str, n: int = 1) -> None:
        self.values += n
        if self.values > MAX_VALUES:
            raise self.fail(path, f"more than {MAX_VALUES} values (the spec is too large)")

    def obj(self, value: Any, path: str, fields: dict[str, Callable[[Any, str], None]],
            required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"not an object ({_kind(value)})")
        self.count(path, len(value))
        for key in required:
            if value.get(key) is None:
                raise self.fail(path, f"no {key!r}")
        for key, item in value.items():
            check = fields.get(key) if isinstance(key, str) else None
            if check is None:
                raise self.fail(path, f"unknown field {str(key)[:80]!r}")
            if item is not None:  # Go: a null leaves the zero value
                check(item, f"{path}.{key}")
        return value

    def array(self, value: Any, path: str, item: Callable[[Any, str], None]) -> None:
        if not isinstance(value, list):
            raise self.fail(path, f"not an array ({_kind(value)})")
        self.count(path, len(value))
        for i, entry in enumerate(value):
            item(entry, f"{path}[{i}]")

    def string(self, value: Any, path: str) -> None:
        if not isinstance(value, str):
            raise self.fail(path, f"not a string ({_kind(value)})")
        if "\0" in value:
            raise self.fail(path, "contains a NUL byte")

    def strings(self, value: Any, path: str) -> None:
        self.array(value, path, self.string)

    def integer(self, value: Any, path: str, low: int = -(1 << 63), high: int = 1 << 63) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"not an integer ({_kind(value)})")
        if not low <= value < high:
            raise self.fail(path, f"{value} is out of range")

    def uint32(self, value: Any, path: str) -> None:
        self.integer(value, path, 0, _UINT32)

    def boolean(self, value: Any, path: str) -> None:
        if not isinstance(value, bool):
            raise self.fail(path, f"not a boolean ({_kind(value)})")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def check_spec(doc: Any, where: str) -> dict[str, Any]:
    """`doc` if it is a valid CDI spec (see the module docstring), else CdiError."""
    w = _Walk(where)
    w.obj(doc, "spec", {"cdiVersion": w.string, "kind": w.string,
                        "annotations": lambda v, p: _annotations(w, v, p),
                        "devices": lambda v, p: w.array(v, p, lambda d, q: _device(w, d, q)),
                        "containerEdits": lambda v, p: _edits(w, v, p)},
          required=("cdiVersion", "kind", "devices"))
    _check_kind(w, doc["kind"])
    devices = doc["devices"] or []
    if not devices:
        raise w.fail("devices", "no devices (a spec must have at least one)")
    seen: set[str] = set()
    for i, device in enumerate(devices):
        if device["name"] in seen:
            raise w.fail(f"devices[{i}].name", f"{device['name']!r} is not unique")
        seen.add(device["name"])
    version = doc["cdiVersion"]
    if version.removeprefix("v") not in VERSIONS:
        raise w.fail("cdiVersion", f"unknown version {version[:40]!r} (known: "
                     f"{', '.join(VERSIONS)})")
    needed = minimal_version(doc)
    if version_key(needed) > version_key(version.removeprefix("v")):
        raise w.fail("cdiVersion", f"{version} is lower than {needed}, the version of the "
                     "fields and names the spec uses")
    return doc  # type: ignore[no-any-return]


def _check_kind(w: _Walk, kind: str) -> None:
    vendor, slash, cls = kind.partition("/")
    if not slash or not _VENDOR.fullmatch(vendor) or not _VENDOR.fullmatch(cls) or "/" in cls:
        raise w.fail("kind", f"{kind[:100]!r} is not vendor/class (e.g. nvidia.com/gpu)")


def _annotations(w: _Walk, value: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise w.fail(path, f"not an object ({_kind(value)})")
    w.count(path, len(value))
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise w.fail(path, f"key {str(key)[:80]!r} is not a non-empty string")
        w.string(item, f"{path}.{key}")


def _device(w: _Walk, value: Any, path: str) -> None:
    w.obj(value, path, {"name": w.string, "annotations": lambda v, p: _annotations(w, v, p),
                        "containerEdits": lambda v, p: _edits(w, v, p)},
          required=("name", "containerEdits"))
    name = value["name"]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise w.fail(f"{path}.name", f"{str(name)[:100]!r} is not a valid device name "
                     "(letters, digits, '_', '-', '.', ':'; starts and ends with a letter or "
                     "digit)")
    edits = value["containerEdits"] or {}
    if not any(edits.get(k) for k in ("env", "deviceNodes", "hooks", "mounts", "intelRdt",
                                       "additionalGids", "netDevices")):
        raise w.fail(f"{path}.containerEdits", "empty (a device must edit something)")


def _edits(w: _Walk, value: Any, path: str) -> None:
    w.obj(value, path, {
        "env": lambda v, p: w.array(v, p, lambda e, q: _env(w, e, q)),
        "deviceNodes": lambda v, p: w.array(v, p, lambda n, q: _node(w, n, q)),
        "hooks": lambda v, p: w.array(v, p, lambda h, q: _hook(w, h, q)),
        "mounts": lambda v, p: w.array(v, p, lambda m, q: _mount(w, m, q)),
        "intelRdt": lambda v, p: _rdt(w, v, p),
        "additionalGids": lambda v, p: w.array(v, p, w.uint32),
        "netDevices": lambda v, p: w.array(v, p, lambda n, q: _net(w, n, q))})


def _net(w: _Walk, value: Any, path: str) -> None:
    w.obj(value, path, {"hostInterfaceName": w.string, "name": w.string},
          required=("hostInterfaceName", "name"))


def _env(w: _Walk, value: Any, path: str) -> None:
    w.string(value, path)
    if value.find("=") <= 0:
        raise w.fail(path, f"{value[:100]!r} is not NAME=VALUE")


def _node(w: _Walk, value: Any, path: str) -> None:
    w.obj(value, path, {"path": w.string, "hostPath": w.string, "type": w.string,
                        "major": w.integer, "minor": w.integer, "fileMode": w.uint32,
                        "permissions": w.string, "uid": w.uint32, "gid": w.uint32},
          required=("path",))
    if not value["path"]:
        raise w.fail(f"{path}.path", "empty")
    if (value.get("type") or "") not in ("", "b", "c", "u", "p"):
        raise w.fail(f"{path}.type", f"{value['type'][:20]!r} is not b, c, u or p")
    if set(value.get("permissions") or "") - set("rwm"):
        raise w.fail(f"{path}.permissions", f"{value['permissions'][:20]!r} is not r, w, m")


def _hook(w: _Walk, value: Any, path: str) -> None:
    w.obj(value, path, {"hookName": w.string, "path": w.string, "args": w.strings,
                        "env": lambda v, p: w.array(v, p, lambda e, q: _env(w, e, q)),
                        "timeout": w.integer}, required=("hookName", "path"))
    if value["hookName"] not in HOOK_STAGES:
        raise w.fail(f"{path}.hookName", f"{value['hookName'][:40]!r} is not a hook stage "
                     f"({', '.join(HOOK_STAGES)})")
    if not value["path"]:
        raise w.fail(f"{path}.path", "empty")


def _mount(w: _Walk, value: Any, path: str) -> None:
    w.obj(value, path, {"hostPath": w.string, "containerPath": w.string, "options": w.strings,
                        "type": w.string}, required=("hostPath", "containerPath"))
    for key in ("hostPath", "containerPath"):
        if not value[key]:
            raise w.fail(f"{path}.{key}", "empty")


def _rdt(w: _Walk, value: Any, path: str) -> None:
    w.obj(value, path, {"closID": w.string, "l3CacheSchema": w.string, "memBwSchema": w.string,
                        "schemata": w.strings, "enableMonitoring": w.boolean})
    clos = value.get("closID") or ""
    if clos != "/" and (len(clos) >= 4096 or clos in (".", "..") or "/" in clos
                        or "\n" in clos):
        raise w.fail(f"{path}.closID", "not a valid file name")


def _all_edits(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [d.get("containerEdits") or {} for d in doc.get("devices") or ()] + [
        doc.get("containerEdits") or {}]


def minimal_version(doc: dict[str, Any]) -> str:
    """The lowest cdiVersion with every feature `doc` uses (the CDI library's rules, v1.1.0):
    netDevices, intelRdt schemata/monitoring 1.1.0; intelRdt, additionalGids 0.7.0;
    annotations, a class with a dot 0.6.0; a name starting with a digit, a node's hostPath
    0.5.0; a mount's type 0.4.0; else 0.3.0."""
    edits = _all_edits(doc)
    rdts = [e["intelRdt"] for e in edits if e.get("intelRdt") is not None]
    if any(e.get("netDevices") for e in edits) or any(
            r.get("schemata") is not None or r.get("enableMonitoring") for r in rdts):
        return "1.1.0"
    if rdts or any(e.get("additionalGids") for e in edits):
        return "0.7.0"
    devices = doc.get("devices") or ()
    cls = str(doc.get("kind", "")).partition("/")[2]
    if doc.get("annotations") or any(d.get("annotations") for d in devices) or "." in cls:
        return "0.6.0"
    if any(str(d.get("name", ""))[:1].isdigit() for d in devices) or any(
            n.get("hostPath") for e in edits for n in e.get("deviceNodes") or ()):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts") or ()):
        return "0.4.0"
    return "0.3.0"
