"""containerd's `imports`: which files it loads, in which order, and the line that makes it load
the drop-in. Pure (file access comes in as functions).

containerd loads the main file, then the files its `imports` name, breadth first, each once.
A relative path without `*` is relative to the importing file's directory. A glob is expanded
with Go's `filepath.Glob` (sorted): containerd 1.x (config versions 1 and 2) takes a relative glob
relative to its working directory (`/` under systemd), 2.x (version 3) relative to the importing
file's directory.

`add_import` edits the main file's text, never re-serialises it: comments, order and layout
stay; the one change is a new top-level `imports = ["<dir>/*.toml"]` line (after `version`,
else before the first setting) or the pattern appended to an existing `imports` array. The
result must parse to exactly the old document plus that pattern, or nothing is written.
"""

from __future__ import annotations

import copy
import fnmatch
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from nvhook.errors import ConfigureError

MAX_FILES = 64
CWD = "/"  # containerd 1.x resolves relative globs against its working directory (systemd: /)
_HEADER = re.compile(r"^[ \t]*\[", re.M)
_IMPORTS = re.compile(r"^[ \t]*imports[ \t]*=[ \t]*", re.M)
_VERSION = re.compile(r"^[ \t]*version[ \t]*=[^\n]*\n?", re.M)


def import_pattern(drop_in: str, main: str) -> str:
    """The pattern nvhook adds: every .toml file in the drop-in's directory, or the drop-in
    itself when that directory holds the main file too (a glob would import the main file)."""
    where = os.path.dirname(os.path.abspath(drop_in))
    if where == os.path.dirname(os.path.abspath(main)):
        return os.path.abspath(drop_in)
    return os.path.join(where, "*.toml")


def _absolute(parent: str, pattern: str, version: int) -> str:
    if os.path.isabs(pattern):
        return os.path.normpath(pattern)
    if "*" in pattern and version < 3:
        return os.path.normpath(os.path.join(CWD, pattern))
    return os.path.normpath(os.path.join(os.path.dirname(parent), pattern))


def _patterns(doc: dict[str, Any] | None) -> list[str]:
    imports = (doc or {}).get("imports", [])
    return [p for p in imports if isinstance(p, str)] if isinstance(imports, list) else []


def matches(path: str, pattern: str) -> bool:
    """Go's filepath.Match on absolute paths: `*` never crosses a `/`."""
    parts, pats = path.split("/"), pattern.split("/")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(a, b)
                                           for a, b in zip(parts, pats))


def covers(doc: dict[str, Any] | None, path: str, version: int, target: str) -> bool:
    """Whether the `imports` of `doc` (the file at `path`) name the file `target`."""
    target = os.path.normpath(os.path.abspath(target))
    return any(matches(target, _absolute(path, p, version)) for p in _patterns(doc))


def load_order(main_path: str, main: dict[str, Any] | None, version: int,
               read: Callable[[str], dict[str, Any] | None],
               glob: Callable[[str], list[str]]) -> list[tuple[str, dict[str, Any]]]:
    """(path, document) of every file containerd loads, main file first (at most 64)."""
    if main is None:
        return []
    order: list[tuple[str, dict[str, Any]]] = [(main_path, main)]
    seen = {os.path.normpath(main_path)}
    queue = [(main_path, main)]
    while queue and len(order) < MAX_FILES:
        parent, doc = queue.pop(0)
        for pattern in _patterns(doc):
            full = _absolute(parent, pattern, version)
            for path in sorted(glob(full)) if "*" in full else [full]:
                child = read(path) if path not in seen else None
                seen.add(path)
                if child is not None and len(order) < MAX_FILES:
                    order.append((path, child))
                    queue.append((path, child))
    return order


def created_main(entry: str, version: int) -> str:
    """The main file nvhook writes where there is none (containerd's defaults + the import)."""
    return f'version = {version}\nimports = ["{entry}"]\n'


def add_import(text: str | None, doc: dict[str, Any] | None, entry: str,
               version: int, where: str) -> str:
    """`text` (the main file, parsed as `doc`) with `entry` added to its `imports`."""
    if text is None:
        return created_main(entry, version)
    expected = copy.deepcopy(doc or {})
    expected["imports"] = [*_patterns(doc), entry] if "imports" in expected else [entry]
    header = _HEADER.search(text)
    top = text[:header.start()] if header else text
    found = _IMPORTS.search(top)
    if found:
        new = _append_to_array(text, found.end(), entry)
    else:
        new = _insert_line(text, top, f"imports = [{_quote(entry)}]\n")
    if new is None or _parse(new) != expected:
        raise ConfigureError(
            f"cannot add {entry!r} to the imports of {where} without changing anything else "
            f"(add it by hand: imports = [..., {_quote(entry)}]); nothing was written")
    return new


def _quote(entry: str) -> str:
    import json

    return json.dumps(entry, ensure_ascii=False)


def _insert_line(text: str, top: str, line: str) -> str:
    version = _VERSION.search(top)
    if version:
        at = version.end()
        prefix = "" if text[:at].endswith("\n") else "\n"
        return text[:at] + prefix + line + text[at:]
    at = 0
    for match in re.finditer(r"[^\n]*\n?", text):
        stripped = match.group().strip()
        if stripped and not stripped.startswith("#"):
            at = match.start()
            break
        at = match.end()
    if at == len(text) and text and not text.endswith("\n"):
        return text + "\n" + line
    return text[:at] + line + text[at:]


def _append_to_array(text: str, start: int, entry: str) -> str | None:
    if start >= len(text) or text[start] != "[":
        return None
    end, last = _array_end(text, start)
    if end is None:
        return None
    sep = {"[": "", ",": " "}.get(text[last], ", ")
    return text[:last + 1] + sep + _quote(entry) + text[last + 1:]


def _array_end(text: str, start: int) -> tuple[int | None, int]:
    """(index of the `]` closing the array at `start`, index of its last token's end char)."""
    depth, i, last = 0, start, start
    while i < len(text):
        c = text[i]
        if c == "#":
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        if c in "\"'":
            close = _string_end(text, i)
            if close is None:
                return None, last
            i, last = close + 1, close
            continue
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i, last
        if not c.isspace():
            last = i
        i += 1
    return None, last


def _string_end(text: str, i: int) -> int | None:
    quote = text[i]
    triple = text.startswith(quote * 3, i)
    j = i + (3 if triple else 1)
    while j < len(text):
        if quote == '"' and text[j] == "\\":
            j += 2
            continue
        if triple and text.startswith(quote * 3, j):
            return j + 2
        if not triple and text[j] == quote:
            return j
        if not triple and text[j] == "\n":
            return None
        j += 1
    return None


def _parse(text: str) -> dict[str, Any] | None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python < 3.11: tomli, a dependency there
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
