"""nvmount.jsonio.strict_loads: nvhook's one decoder of input documents (config.json, the OCI
state, daemon.json, the screen's reading of both), strict and, with `go`, Go's reading."""

from __future__ import annotations

from typing import Any

import pytest

from nvmount.jsonio import strict_loads

REFUSED = [
    (b'{"a": 1, "a": 2}', False, "duplicate key 'a'"),
    (b'{"a": NaN}', True, "invalid JSON value NaN"),
    (b'{"a": -Infinity}', True, "invalid JSON value -Infinity"),
    (b'{"a": 1e999}', True, "out of range"),
    (b'{"a": -1e999}', True, "out of range"),
    (b'{"a": 123456789012345678901}', True, "21 digits"),
    (b'{"a": -123456789012345678901}', True, "21 digits"),
    (b"[" * 100_000 + b"]" * 100_000, True, "nesting too deep"),
    (b'{"a": "\xff"}', False, "invalid UTF-8"),
    (b'{"a": 1} x', False, "extra data at character 8"),
    (b" " * 65, True, "larger than 64 bytes"),
    (b"", True, "Expecting value"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "go", "message"), REFUSED, ids=[
    "duplicate", "nan", "infinity", "overflow", "negative-overflow", "long-int",
    "long-negative-int", "deep", "utf8", "trailing", "size", "empty"])
def test_refused(data: bytes, go: bool, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        strict_loads(data, go=go, max_bytes=64 if message.startswith("larger") else 1 << 20)


ACCEPTED: list[tuple[bytes, bool, Any]] = [
    (b' {"a": [1, 2.5, -3, true, null, "x"]} \n', False, {"a": [1, 2.5, -3, True, None, "x"]}),
    (b'{"a": 18446744073709551615}', False, {"a": 2**64 - 1}),
    (b'{"a": 1, "b": 2, "a": 3}', True, {"b": 2, "a": 3}),
    (b'{"a": 1} trailing {', True, {"a": 1}),
    (b'{"a": "\xff"}', True, {"a": "\ufffd"}),
]  # fmt: skip


@pytest.mark.parametrize(("data", "go", "want"), ACCEPTED, ids=[
    "values", "uint64", "go-last-wins", "go-trailing", "go-utf8-replaced"])
def test_accepted(data: bytes, go: bool, want: Any) -> None:
    got = strict_loads(data, go=go)
    assert got == want and list(got) == list(want)  # key order: the last occurrence's
