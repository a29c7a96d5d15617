"""`nvidia-ctk config`: print or edit config.toml as NVIDIA 1.20's command does, with nvhook's
schema (`nvhook.config.model`: NVIDIA's keys and `[nvhook]`).

    nvidia-ctk config [--config-file|--config|-c PATH] [--set KEY[=VALUE] ...]
                      [--in-place|-i | --output|-o PATH]
    nvidia-ctk config default|create-default|generate-default [--output|-o PATH]

`--set`: `key` alone is `key=true` for a boolean; lists are colon- (or comma-) separated;
`features.X=nil` removes the feature; the last `--set` of a key wins. The file (default
/etc/nvidia-container-runtime/config.toml; missing: nvhook's default file) is edited line by
line, keeping its comments and order: the key's line is replaced (a commented-out `#key = ...`
line becomes the active one, as NVIDIA's output shows), or added to its table, or its table
added at the end. The result is parsed back and must differ from the input in that key only;
when it cannot be done that way (the key set by a dotted key elsewhere, an inline table) the
whole document is written again (comments lost, as NVIDIA always does). An unknown key is an
error naming it; `nvhook config check` runs on the result before it is written in place.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from nvhook.compat.urfave import BOOL, SLICE, CliError, Flag, parse_bool, parse_command

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.compat.nvctk.context import Context

DEFAULT_PATH = "/etc/nvidia-container-runtime/config.toml"
FLAGS = (
    Flag("config-file", aliases=("config", "c"), default=DEFAULT_PATH,
         help="Specify the config file to modify."),
    Flag("set", SLICE, help="Set a config value using the pattern 'key[=value]'"),
    Flag("set-list-separator", default=":", help="the separator of list values"),
    Flag("in-place", BOOL, aliases=("i",), help="Modify the config file in-place"),
    Flag("output", aliases=("o",), help="Specify the output file to write to"),
)
DEFAULT_FLAGS = (Flag("output", aliases=("o",), help="Specify the output file to write to"),)
DEFAULT_NAMES = ("default", "create-default", "generate-default")
_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")


def main(argv: list[str], ctx: Context) -> int:
    from nvhook.compat.nvctk.context import COMMANDS, PROG

    if argv and argv[0] in DEFAULT_NAMES:
        p = parse_command(argv[1:], DEFAULT_FLAGS, command=f"{PROG} config default",
                          summary="Generate the default NVIDIA Container Toolkit configuration "
                          "file (nvhook's)", environ=ctx.environ)
        if p is not None:
            from nvhook.config.default import default_text

            _output(default_text(), p.string("output"))
        return 0
    p = parse_command(argv, FLAGS, command=f"{PROG} config", summary=COMMANDS["config"],
                      environ=ctx.environ)
    if p is None:
        return 0
    if p.args:
        raise CliError(f"{PROG} config: unexpected argument {p.args[0]!r} (commands: default)")
    if not p.string("set-list-separator"):
        raise CliError("set-list-separator must be set")
    path = p.string("config-file")
    text = _read(path)
    for item in p.strings("set"):
        key, value = set_value(item, p.string("set-list-separator"))
        text = set_key(text, key, value)
    out = path if p.boolean("in-place") else p.string("output")
    if out:
        _check(text, out)
    _output(text, out)
    return 0


def _read(path: str) -> str:
    """The file's text; nvhook's default file when it does not exist (as NVIDIA's)."""
    from nvhook.admin.configure.files import read_text

    text = read_text(path)
    if text is None:
        from nvhook.config.default import default_text

        return default_text()
    return text


def _output(text: str, path: str) -> None:
    if not path:
        sys.stdout.write(text)
        return
    from nvhook.admin.configure.files import write_atomic

    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o755, exist_ok=True)
    write_atomic(path, text)


def _check(text: str, path: str) -> None:
    """Refuse to write a file with errors `nvhook config check` would report."""
    from nvhook.config.check import check_document

    errors = [m for level, _, m in check_document(_loads(text), path) if level == "error"]
    if errors:
        raise CliError(f"not writing {path}: {errors[0]}")


def _loads(text: str) -> dict[str, Any]:
    from nvhook.config.toml_read import loads as toml_loads

    try:
        return toml_loads(text)
    except ValueError as err:
        raise CliError(f"unable to create config: not valid TOML: {err}") from err


def set_value(item: str, separator: str) -> tuple[str, object]:
    """(key, value or None to remove) of one `--set`, typed by nvhook's schema (pure)."""
    from nvhook.config.model import _SCHEMA

    key, eq, raw = item.partition("=")
    kinds = {k: kind for k, _, _, kind in _SCHEMA}
    kind = kinds.get(key)
    if kind is None:
        known = {part for k in kinds for part in k.split(".")}
        bad = next((part for part in key.split(".") if part not in known), key)
        raise CliError(f"invalid --set option {item}: invalid config option: undefined "
                       f'field: "{bad}"')
    if kind == "boolean":
        if not eq:
            return key, True
        if raw == "nil" and key.startswith("features."):
            return key, None
        try:
            return key, parse_bool(raw, key)
        except CliError as err:
            raise CliError(f"invalid --set option {item}: invalid format: {err}") from err
    if not eq:
        raise CliError(f"invalid --set option {item}: invalid format: expected key=value; "
                       f"got {item}")
    if kind == "string":
        return key, raw
    for sep in (separator, ","):
        if sep in raw:
            return key, raw.split(sep)
    return key, [raw]


def set_key(text: str, key: str, value: object) -> str:
    """`text` with `key` set to `value` (None: removed), comments kept where possible."""
    before = _loads(text)
    edited = _edit_lines(text, key, value)
    try:
        if edited is not None and _only_changed(before, _loads(edited), key, value):
            return edited
    except CliError:
        pass  # the line edit broke the document: written again as a whole below
    from nvhook.admin.configure.tomlw import render

    doc = before
    *parents, leaf = key.split(".")
    for part in parents:
        node = doc.get(part)
        if not isinstance(node, dict):
            node = doc[part] = {}
        doc = node
    if value is None:
        doc.pop(leaf, None)
    else:
        doc[leaf] = value
    return render(before)


def _edit_lines(text: str, key: str, value: object) -> str | None:
    from nvhook.admin.configure.tomlw import value as toml_value

    table, _, leaf = key.rpartition(".")
    lines = text.split("\n")
    current, start, end, found, commented = "", 0 if not table else None, None, None, None
    pattern = re.compile(r"^(\s*)(#\s*)?" + re.escape(leaf) + r"\s*=")
    for i, line in enumerate(lines):
        header = _HEADER.match(line)
        if header:
            if current == table and start is not None and end is None:
                end = i
            current = header.group(1).strip().replace('"', "")
            start = i + 1 if current == table else start
            continue
        match = pattern.match(line) if current == table and start is not None else None
        if match and end is None:
            found = i if not match.group(2) else found
            commented = i if match.group(2) and commented is None else commented
    new = None if value is None else f"{leaf} = {toml_value(value)}"
    at = found if found is not None else commented
    if at is not None:
        if new is None:
            return "\n".join(lines[:at] + lines[at + 1:]) if found is not None else text
        return "\n".join([*lines[:at], new, *lines[at + 1:]])
    if new is None:
        return text
    if start is None:
        tail = "" if text.endswith("\n") else "\n"
        return f"{text}{tail}\n[{table}]\n{new}\n"
    stop = end if end is not None else len(lines)
    while stop > start and not lines[stop - 1].strip():
        stop -= 1
    return "\n".join([*lines[:stop], new, *lines[stop:]])


def _only_changed(before: dict[str, Any], after: dict[str, Any], key: str,
                  value: object) -> bool:
    """`after` is `before` with `key` set to `value` (None: absent), nothing else."""
    import copy

    expected = copy.deepcopy(before)
    node = expected
    *parents, leaf = key.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            return False
        node = child
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return _prune(expected) == _prune(after)


def _prune(doc: dict[str, Any]) -> dict[str, Any]:
    """Without empty tables (an added and removed feature leaves `[features]`)."""
    out = {}
    for k, v in doc.items():
        if isinstance(v, dict):
            v = _prune(v)
            if not v:
                continue
        out[k] = v
    return out
