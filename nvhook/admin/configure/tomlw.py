"""Write a TOML document (the dict `tomllib` returns) as text. Pure.

Scalars of a table first, then its sub-tables as `[dotted."quoted".headers]`; arrays of
scalars and arrays of tables inline; keys bare when they can be, else basic-quoted. A table is
given a header when it has scalars or is empty (so empty tables survive). `render_checked`
parses the text back and refuses to return one that does not mean the same document: nvhook
never writes a TOML file it could not read back identically.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

from nvhook.errors import ConfigureError

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def key(name: str) -> str:
    return name if name and set(name) <= _BARE else json.dumps(name, ensure_ascii=False)


def value(item: Any) -> str:
    """A TOML value for a scalar, an array or an inline table."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        if math.isnan(item):
            return "nan"
        return ("inf" if item > 0 else "-inf") if math.isinf(item) else repr(item)
    if isinstance(item, str):
        return json.dumps(item, ensure_ascii=False)
    if isinstance(item, (datetime.datetime, datetime.date, datetime.time)):
        return item.isoformat()
    if isinstance(item, list):
        return "[" + ", ".join(value(v) for v in item) + "]"
    if isinstance(item, dict):
        return "{" + ", ".join(f"{key(k)} = {value(v)}" for k, v in item.items()) + "}"
    raise ConfigureError(f"render TOML: cannot write a {type(item).__name__} value")


def render(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    _table(doc, (), lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(table: dict[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    scalars = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    if path and (scalars or not tables):
        lines.append("")
        lines.append("[" + ".".join(key(p) for p in path) + "]")
    lines.extend(f"{key(k)} = {value(v)}" for k, v in scalars)
    for name, sub in tables:
        _table(sub, (*path, name), lines)


def render_checked(doc: dict[str, Any], what: str) -> str:
    """`render(doc)`, refused unless it reads back as `doc`."""
    from nvhook.config.toml_read import loads as toml_loads

    text = render(doc)
    try:
        back = toml_loads(text)
    except ValueError as err:
        raise ConfigureError(f"refuse to write {what}: the TOML nvhook produced does not parse "
                             f"({err}); nothing was written (please report it)") from err
    if back != doc:
        raise ConfigureError(f"refuse to write {what}: the TOML nvhook produced reads back "
                             "differently; nothing was written (please report it)")
    return text
