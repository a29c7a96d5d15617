"""The YAML nvhook's CDI specs use: block mappings and sequences, double-quoted strings
(JSON's escapes), integers, booleans and `[]`/`{}`. `dump` writes it; `load` reads what `dump`
writes (and JSON), not YAML at large. Pure."""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32


class YamlError(ValueError):
    """Text outside the subset (the message names the line)."""


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a YAML double-quoted scalar
    if value == [] or value == {}:
        return json.dumps(value)
    raise TypeError(f"yaml: cannot write {type(value).__name__}")


def _key(key: str) -> str:
    plain = key[:1].isalpha() and all(c.isalnum() or c in "_-." for c in key)
    return key if plain and key not in ("true", "false", "null", "yes", "no", "on", "off") \
        else json.dumps(key)


def dump(value: Any) -> str:
    """`value` (dicts, lists, str, int, bool) as block YAML, keys in the given order."""
    return "".join(_lines(value, 0)) or "{}\n"


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict) and value:
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{_key(str(key))}:\n")
                out += _lines(item, indent + (2 if isinstance(item, dict) else 0))
            else:
                out.append(f"{pad}{_key(str(key))}: {_scalar(item)}\n")
    elif isinstance(value, list) and value:
        for item in value:
            sub = _lines(item, indent + 2)
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}- {sub[0].lstrip()}")
                out += sub[1:]
            else:
                out.append(f"{pad}- {_scalar(item)}\n")
    else:
        out.append(f"{pad}{_scalar(value)}\n")
    return out


def load(text: str) -> Any:
    """A document `dump` wrote, or JSON."""
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError as err:
            raise YamlError(f"JSON: {err}") from err
    rows = [(n, len(line) - len(line.lstrip(" ")), line.strip())
            for n, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#") and line.strip() != "---"]
    if not rows:
        return None
    value, end = _block(rows, 0, rows[0][1], 0)
    if end != len(rows):
        raise YamlError(f"line {rows[end][0]}: unexpected indentation")
    return value


def _block(rows: list[tuple[int, int, str]], at: int, indent: int,
           depth: int) -> tuple[Any, int]:
    if depth > MAX_DEPTH:
        raise YamlError(f"line {rows[at][0]}: nested too deep")
    if rows[at][2].startswith("- ") or rows[at][2] == "-":
        return _sequence(rows, at, indent, depth)
    return _mapping(rows, at, indent, depth)


def _sequence(rows: list[tuple[int, int, str]], at: int, indent: int,
              depth: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    while at < len(rows) and rows[at][1] == indent and rows[at][2].startswith("-"):
        n, _, text = rows[at]
        rest = text[1:].lstrip()
        if (":" in _unquoted(rest) and not rest.startswith(("\"", "[", "{"))) or \
                (rest.startswith("\"") and _key_split(rest) is not None):
            inner = indent + len(text) - len(rest)
            rows[at] = (n, inner, rest)
            value, at = _mapping(rows, at, inner, depth + 1)
        else:
            value, at = _value(rest, n), at + 1
        items.append(value)
    return items, at


def _mapping(rows: list[tuple[int, int, str]], at: int, indent: int,
             depth: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while at < len(rows) and rows[at][1] == indent and not rows[at][2].startswith("- "):
        n, _, text = rows[at]
        split = _key_split(text)
        if split is None:
            raise YamlError(f"line {n}: expected `key: value`")
        key, rest = split
        at += 1
        if rest:
            out[key] = _value(rest, n)
        elif at < len(rows) and (rows[at][1] > indent or (rows[at][1] == indent
                                 and rows[at][2].startswith("- "))):
            out[key], at = _block(rows, at, rows[at][1], depth + 1)
        else:
            out[key] = None
    return out, at


def _key_split(text: str) -> tuple[str, str] | None:
    if text.startswith("\""):
        try:
            key, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            return None
        rest = text[end:]
        if not rest.startswith(":"):
            return None
        return str(key), rest[1:].strip()
    key, sep, rest = text.partition(":")
    return (key.strip(), rest.strip()) if sep and key.strip() else None


def _unquoted(text: str) -> str:
    return text.split("\"", 1)[0]


def _value(text: str, line: int) -> Any:
    if text in ("true", "false"):
        return text == "true"
    if text.startswith(("\"", "[", "{")):
        try:
            return json.loads(text)
        except ValueError as err:
            raise YamlError(f"line {line}: {err}") from err
    if text.lstrip("-").isdigit() and len(text) <= 20:
        return int(text)
    return text
