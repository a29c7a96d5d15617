"""JSON through CPython's C accelerator (`_json`) without importing the `json` package.

`import json` pulls in `re` (and `enum` through it): about 6 ms of the hook's start for
nothing, since decoding and encoding run in `_json`'s C scanner and encoder anyway. These
two functions drive that C code directly:

- `decode(text, start=0, *, object_pairs_hook=None, parse_constant=None)` -> (value, end):
  one JSON value from `text` at `start` (like `json.JSONDecoder.raw_decode`); errors are
  `ValueError` with json's message (the `json` package is imported only to build it);
- `encode(value, *, sort_keys=False, indent=None)` -> str: compact (`,`/`:`) or indented,
  ASCII-only; indentation falls back to the `json` package (off the hook's path);
- `strict_loads(data, *, go=False, max_bytes=MAX_DOCUMENT_BYTES)`: nvhook's one decoder of
  input documents (config.json, the OCI state, daemon.json), strict:

| input | refused (ValueError, one line) |
|---|---|
| size | more than `max_bytes` bytes |
| constants | `NaN`, `Infinity`, `-Infinity` |
| integers | more than `MAX_DIGITS` digits (checked before `int()`: its cost is quadratic) |
| floats | too large for a float (`1e999`: Go refuses it; Python would make it inf) |
| nesting | deeper than the interpreter's recursion limit ("nesting too deep") |
| text | invalid UTF-8 |
| keys | a key given twice in one object |
| after the value | anything but whitespace |

`go=True` reads as Go's `encoding/json` Decoder reads a stream (runc's and NVIDIA's hook's
reading of the state and config.json, hook-spec 1.4): the last of duplicate keys wins (in the
order of its last occurrence), data after the value is ignored, invalid UTF-8 is replaced
(U+FFFD); every other row holds.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON value {name}")


class _Context:
    """The attributes `_json.make_scanner` reads from a json.JSONDecoder."""

    __slots__ = ("memo", "object_hook", "object_pairs_hook", "parse_constant", "parse_float",
                 "parse_int", "strict")

    def __init__(self, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None,
                 parse_constant: Callable[[str], Any],
                 parse_int: Callable[[str], Any] = int) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = object_pairs_hook
        self.parse_float: Callable[[str], Any] = float
        self.parse_int = parse_int
        self.parse_constant = parse_constant
        self.memo: dict[str, str] = {}


def decode(text: str, start: int = 0, *,
           object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
           parse_constant: Callable[[str], Any] | None = None,
           parse_int: Callable[[str], Any] = int,
           context: _Context | None = None) -> tuple[Any, int]:
    """One JSON value from `text` at `start`: (value, index after it). ValueError if none.
    `parse_int` gets each integer's text (check its length first: int() of input is not);
    `context` replaces the three hooks."""
    if context is None:
        context = _Context(object_pairs_hook, parse_constant or _no_constant,  # a JSONDecoder's
                           parse_int)
    scan = _json.make_scanner(context)  # type: ignore[arg-type]
    try:
        value, end = scan(text, start)
    except StopIteration as stop:
        import json

        raise json.JSONDecodeError("Expecting value", text, stop.value) from None
    except SystemError:  # the scanner builds its errors only when json.decoder is loaded
        import json.decoder

        return decode(text, start, context=context)
    return value, end


def loads(text: str) -> Any:
    """Exactly one JSON value in `text` (whitespace around it allowed), like json.loads."""
    value, end = decode(text, len(text) - len(text.lstrip(" \t\r\n")))
    if text[end:].strip(" \t\r\n"):
        import json

        raise json.JSONDecodeError("Extra data", text, end)
    return value


MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
MAX_DIGITS = 20  # any 64-bit integer


def _parse_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > MAX_DIGITS:
        raise ValueError(f"a number with {digits} digits (at most {MAX_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} out of range")
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)  # C speed; a key given twice makes it shorter
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key[:100]!r}")
            seen.add(key)
    return obj


def _last_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Keys in the order of their last occurrence: a later `field` lookup sees Go's value."""
    obj = dict(pairs)
    if len(obj) != len(pairs):  # a key given twice: put each where it last occurs
        obj = {}
        for key, value in pairs:
            obj.pop(key, None)
            obj[key] = value
    return obj


def strict_loads(data: bytes | str, *, go: bool = False,
                 max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """One JSON value from `data`, strictly (module docstring); ValueError says why."""
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    if isinstance(data, str):
        text = data
    else:
        try:
            text = data.decode("utf-8", "replace" if go else "strict")
        except UnicodeDecodeError as err:
            raise ValueError(f"invalid UTF-8: {err}") from None
    start = len(text) - len(text.lstrip(" \t\r\n"))
    context = _Context(_last_wins if go else _unique, _no_constant, _parse_int)
    context.parse_float = _parse_float
    try:
        value, end = decode(text, start, context=context)
    except RecursionError:
        raise ValueError("nesting too deep") from None
    if not go and text[end:].strip(" \t\r\n"):
        raise ValueError(f"extra data at character {end}")
    return value


def _unsupported(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encode(value: object, *, sort_keys: bool = False, indent: int | None = None) -> str:
    """`value` as JSON text (ASCII; compact separators unless `indent` is given)."""
    if indent is not None:
        import json

        return json.dumps(value, sort_keys=sort_keys, indent=indent)
    encoder = _json.make_encoder(None, _unsupported, _json.encode_basestring_ascii, None,
                                 ":", ",", sort_keys, False, True)
    return "".join(encoder(value, 0))
