"""A reader for the simple TOML that config.toml files are, without importing tomllib.

Stage: the runtime wrapper's fast path (every `runc` call of a container goes through it, so
importing `tomllib` - `re`, `string`, `datetime` - would cost several ms each time). Pure.

`parse_simple(text)` returns the document for the subset it understands, or None for anything
else, and the caller then uses `tomllib` (which also produces the errors). The subset: comment
and blank lines, `[table.headers]`, `key = value` and `dotted.key = value` with bare or
escape-free double-quoted keys, values: basic strings (escapes `\\"`, `\\\\` only), literal
strings, `true`/`false`, decimal integers, and one-line arrays of those. Everything else
(multi-line strings or arrays, inline tables, floats, dates, other escapes, array tables,
CR characters, control characters, a redefined key or table) gives None. So whenever a
document is returned it is exactly what `tomllib.loads` returns (a property test checks it).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_WS = " \t"
_INT64 = 1 << 63


class _Unsupported(Exception):
    """Outside the subset: let tomllib decide."""


def parse_simple(text: str) -> dict[str, Any] | None:
    """The TOML document in `text`, or None when it is outside the simple subset."""
    if "\r" in text or text.startswith("\ufeff"):
        return None
    reader = _Reader()
    try:
        for raw in text.split("\n"):
            reader.line(raw.strip(_WS))
    except (_Unsupported, IndexError, ValueError):
        return None
    return reader.doc


class _Reader:
    """The document so far, the current table, and how each table came to be."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {}
        self.path: tuple[str, ...] = ()
        self.headers: set[tuple[str, ...]] = {()}  # tables given a [header] (and the root)
        self.dotted: set[tuple[str, ...]] = set()  # tables made by dotted keys

    def line(self, line: str) -> None:
        if not line or line[0] == "#":
            _check_comment(line)
        elif line[0] == "[":
            if line.startswith("[["):
                raise _Unsupported
            path, rest = _key_path(line, 1, "]")
            assert isinstance(rest, str)
            _end(rest)
            prefixes = {path[:j] for j in range(1, len(path) + 1)}
            if path in self.headers or prefixes & self.dotted:
                raise _Unsupported
            self.headers.add(path)
            self.path = path
            _table(self.doc, path)
        else:
            self.assign(line)

    def assign(self, line: str) -> None:
        key, rest = _key_path(line, 0, "=")
        value, end = _value(line, rest)
        _end(line[end:])
        node = _table(self.doc, self.path)
        for j in range(1, len(key)):
            here = self.path + key[:j]
            if key[j - 1] in node and here not in self.dotted:
                raise _Unsupported  # a table made by a header or another way
            self.dotted.add(here)
            node = _table(node, key[j - 1:j])
        if key[-1] in node:
            raise _Unsupported
        node[key[-1]] = value


def _check_comment(text: str) -> None:
    """Comments and strings: no control character but tab (TOML 1.0)."""
    if any((c < " " and c != "\t") or c == "\x7f" for c in text):
        raise _Unsupported


def _end(rest: str) -> None:
    """Only whitespace and a comment may follow a value or header."""
    rest = rest.lstrip(_WS)
    if rest and rest[0] != "#":
        raise _Unsupported
    _check_comment(rest)


def _key_path(line: str, i: int, stop: str) -> tuple[tuple[str, ...], int | str]:
    """Dotted key from position i up to `stop` (surrounded by optional whitespace)."""
    parts: list[str] = []
    while True:
        while line[i] in _WS:
            i += 1
        if line[i] == '"':
            end = line.index('"', i + 1)
            key = line[i + 1:end]
            if "\\" in key:
                raise _Unsupported
            _check_comment(key)
            i = end + 1
        else:
            start = i
            while i < len(line) and line[i] in _BARE:
                i += 1
            key = line[start:i]
            if not key:
                raise _Unsupported
        parts.append(key)
        while i < len(line) and line[i] in _WS:
            i += 1
        if line[i] == ".":
            i += 1
            continue
        if line[i] != stop:
            raise _Unsupported
        return tuple(parts), (line[i + 1:] if stop == "]" else i + 1)


def _value(line: str, i: int | str) -> tuple[Any, int]:
    assert isinstance(i, int)
    while line[i] in _WS:
        i += 1
    if line[i] == "[":
        return _array(line, i + 1)
    return _scalar(line, i)


def _array(line: str, i: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    while True:
        while line[i] in _WS:
            i += 1
        if line[i] == "]":
            return items, i + 1
        if line[i] == "[":
            raise _Unsupported
        item, i = _scalar(line, i)
        items.append(item)
        while line[i] in _WS:
            i += 1
        if line[i] == ",":
            i += 1
        elif line[i] != "]":
            raise _Unsupported


def _scalar(line: str, i: int) -> tuple[Any, int]:
    ch = line[i]
    if ch in "\"'":
        if line.startswith(ch * 3, i):
            raise _Unsupported
        end = line.index(ch, i + 1)
        text = line[i + 1:end]
        if ch == '"' and "\\" in text:
            return _escaped(line, i + 1)
        _check_comment(text)
        return text, end + 1
    for word, value in (("true", True), ("false", False)):
        if line.startswith(word, i):
            return value, _word_end(line, i + len(word))
    start = i
    if line[i] in "+-":
        i += 1
    digits = i
    while i < len(line) and line[i].isdigit() and line[i].isascii():
        i += 1
    if i == digits or (line[digits] == "0" and i - digits > 1):
        raise _Unsupported
    number = int(line[start:i])
    if not -_INT64 <= number < _INT64:
        raise _Unsupported
    return number, _word_end(line, i)


def _word_end(line: str, i: int) -> int:
    if i < len(line) and line[i] not in _WS + ",]#":
        raise _Unsupported
    return i


def _escaped(line: str, i: int) -> tuple[str, int]:
    """A basic string with only \\" and \\\\ escapes, from after its opening quote."""
    out: list[str] = []
    while True:
        ch = line[i]
        if ch == '"':
            text = "".join(out)
            _check_comment(text)
            return text, i + 1
        if ch == "\\":
            nxt = line[i + 1]
            if nxt not in '"\\':
                raise _Unsupported
            out.append(nxt)
            i += 2
            continue
        out.append(ch)
        i += 1


def _table(doc: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """The table at `path` below `doc`, created as needed; a non-table on the way: unsupported."""
    node = doc
    for key in path:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise _Unsupported
        node = child
    return node
