"""The JSON kinds of the config.json fields a runtime wrapper edits (stage 1, beside `oci`;
pure). `nvhook.hook.oci` reads only what the hook uses and checks each field where it reads it;
the runtime wrapper edits the whole document in place (a hook entry, CDI edits, spec mode's
mounts and devices), so before any edit the fields it touches are checked here: an object
where an array belongs (`linux.devices: {}`), a list where an object belongs (`hooks: []`), a
string as a mount entry - each is one line naming the field, never an internal error.

    process: object          process.env: array of strings
    mounts: array of objects
    linux: object            linux.devices: array of objects
    linux.resources: object  linux.resources.devices: array of objects
    hooks: object of arrays of objects (every stage)
    annotations: object

Keys are matched exactly, as the wrapper writes them. A null field is absent (Go's decoding):
it is removed, so that an edit creates it afresh.
"""

from __future__ import annotations

from nvhook.hook.oci import json_kind

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

# (path, kind): "*" is every member of an object or array
EDITED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("process",), "object"), (("process", "env"), "array"), (("process", "env", "*"), "string"),
    (("mounts",), "array"), (("mounts", "*"), "object"),
    (("linux",), "object"), (("linux", "devices"), "array"), (("linux", "devices", "*"), "object"),
    (("linux", "resources"), "object"), (("linux", "resources", "devices"), "array"),
    (("linux", "resources", "devices", "*"), "object"),
    (("hooks",), "object"), (("hooks", "*"), "array"), (("hooks", "*", "*"), "object"),
    (("annotations",), "object"),
)


def edited_fields_error(doc: dict[str, Any]) -> str | None:
    """Why `doc` cannot be edited as the OCI schema says ("linux.devices is an object, not an
    array"), or None (see the module docstring)."""
    for path, kind in EDITED:
        for name, parent, key in members(doc, path):
            value = parent[key]
            if value is None and isinstance(parent, dict):
                del parent[key]
            elif json_kind(value) != kind:
                return f"{name} is {_a(json_kind(value))}, not {_a(kind)}"
    return None


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def members(doc: Any, path: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
    """(dotted name, parent, key) of every value at `path` that exists."""
    nodes: list[tuple[str, Any]] = [("", doc)]
    found: list[tuple[str, Any, Any]] = []
    for part in path:
        found = []
        for where, node in nodes:
            if isinstance(node, dict):
                keys: list[Any] = list(node) if part == "*" else [part] if part in node else []
            else:
                keys = list(range(len(node))) if isinstance(node, list) and part == "*" else []
            for key in keys:
                name = f"{where}[{key}]" if isinstance(key, int) else (
                    f"{where}.{key}" if where else key)
                found.append((name, node, key))
        nodes = [(name, parent[key]) for name, parent, key in found]
    return found
