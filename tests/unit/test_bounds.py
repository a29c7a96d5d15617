"""nvmount.bounds: numbers from input are length-checked before any conversion (issue 8,
class 5: a 5000-digit value gave `internal error: ValueError` from int()'s own limit)."""

from __future__ import annotations

import sys
import time

import pytest

from nvmount.bounds import compare_decimal, long_number, parse_decimal, shorten

HUGE = "9" * 100_000  # far past int()'s 4300-digit limit


@pytest.mark.parametrize(("text", "want"), [
    ("0", 0), ("42", 42), ("0000000042", 42), ("4294967295", 4294967295), ("12345678901", None),
    ("", None), ("-1", None), ("+1", None), (" 1", None), ("1e3", None), ("²", None),
    ("١", None), (HUGE, None),
], ids=["zero", "plain", "leading-zeros", "uint32-max", "11-digits", "empty", "minus", "plus",
        "space", "exponent", "superscript", "arabic-indic", "huge"])
def test_parse_decimal(text: str, want: int | None) -> None:
    assert parse_decimal(text) == want


@pytest.mark.parametrize(("a", "b", "want"), [
    ("1", "2", -1), ("10", "9", 1), ("007", "7", 0), ("", "0", 0), (HUGE, HUGE + "0", -1),
    (HUGE, "9" * 99_999 + "8", 1),
])
def test_compare_decimal_never_converts(a: str, b: str, want: int) -> None:
    assert compare_decimal(a, b) == want
    assert compare_decimal(b, a) == -want


def test_huge_numbers_cost_nothing_whatever_the_interpreters_int_limit() -> None:
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # the limit off: int() would be quadratic, never reached
    try:
        start = time.monotonic()
        assert parse_decimal(HUGE * 10) is None
        assert compare_decimal(HUGE * 10, HUGE * 10) == 0
        assert long_number("cuda>=" + HUGE * 10) is not None
        assert time.monotonic() - start < 0.5
    finally:
        sys.set_int_max_str_digits(old)


@pytest.mark.parametrize(("text", "want"), [
    ("cuda>=12.4 brand=tesla,driver>=470,driver<471", None),
    ("cuda>=" + "9" * 11, "9" * 11),
    ("driver>=1." + "1" * 12 + ".3", "1" * 12),
    ("a" + "1" * 6 + "é" + "2" * 12 + "b", "2" * 12),
    ("1" * 10 + "x" + "1" * 10, None),
], ids=["real", "long", "middle-component", "glued-by-non-ascii", "two-short"])
def test_long_number(text: str, want: str | None) -> None:
    assert long_number(text) == want


def test_shorten() -> None:
    assert shorten("short") == "short"
    assert shorten(HUGE) == "9" * 80 + "...(100000 chars)"
    assert len(shorten(HUGE, 10)) < 40
