"""JSON through CPython's C accelerator (`_json`) without importing the `json` package.

`import json` pulls in `re` (and `enum` through it): about 6 ms of the hook's start for
nothing, since decoding and encoding run in `_json`'s C scanner and encoder anyway. These
two functions drive that C code directly:

- `decode(text, start=0, *, object_pairs_hook=None, parse_constant=None)` -> (value, end):
  one JSON value from `text` at `start` (like `json.JSONDecoder.raw_decode`); errors are
  `ValueError` with json's message (the `json` package is imported only to build it);
- `encode(value, *, sort_keys=False, indent=None)` -> str: compact (`,`/`:`) or indented,
  ASCII-only; indentation falls back to the `json` package (off the hook's path).
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
        self.parse_float = float
        self.parse_int = parse_int
        self.parse_constant = parse_constant
        self.memo: dict[str, str] = {}


def decode(text: str, start: int = 0, *,
           object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
           parse_constant: Callable[[str], Any] | None = None,
           parse_int: Callable[[str], Any] = int) -> tuple[Any, int]:
    """One JSON value from `text` at `start`: (value, index after it). ValueError if none.
    `parse_int` gets each integer's text (check its length first: int() of input is not)."""
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

        return decode(text, start, object_pairs_hook=object_pairs_hook,
                      parse_constant=parse_constant, parse_int=parse_int)
    return value, end


def loads(text: str) -> Any:
    """Exactly one JSON value in `text` (whitespace around it allowed), like json.loads."""
    value, end = decode(text, len(text) - len(text.lstrip(" \t\r\n")))
    if text[end:].strip(" \t\r\n"):
        import json

        raise json.JSONDecodeError("Extra data", text, end)
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
