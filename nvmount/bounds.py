"""Budgets on input: numbers with a bounded count of digits, hostile values shortened for
messages. Pure; used by every stage that parses something an image or a spec controls.

Python's `int(str)` has its own limit (4300 digits, `sys.set_int_max_str_digits`) that raises
a bare ValueError, and below it the conversion is quadratic: never rely on it. Every integer
parsed from input goes through `parse_decimal` (or is compared as digits with
`compare_decimal`), which checks the length first.
"""

from __future__ import annotations

MAX_DIGITS = 10  # enough for any 32-bit id, index, pid or version component
SHOWN_CHARS = 80  # how much of a hostile value an error or log line quotes


def is_decimal(text: str) -> bool:
    """ASCII digits only, at least one (str.isdigit() also accepts "²" and other digits)."""
    return text.isascii() and text.isdigit()


def parse_decimal(text: str, max_digits: int = MAX_DIGITS) -> int | None:
    """The value of `text` when it is 1..`max_digits` ASCII digits (leading zeros count), else
    None. Never raises, never converts more than `max_digits` digits."""
    if not 0 < len(text) <= max_digits or not is_decimal(text):
        return None
    return int(text)


def compare_decimal(a: str, b: str) -> int:
    """-1/0/1 for two strings of ASCII digits of any length ("" counts as 0), compared as
    numbers without converting them: leading zeros dropped, then by length, then by text."""
    a, b = a.lstrip("0"), b.lstrip("0")
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


_ASCII_NON_DIGITS = {c: " " for c in range(128) if not 48 <= c <= 57}


def long_number(text: str, max_digits: int = MAX_DIGITS) -> str | None:
    """The first run of more than `max_digits` ASCII digits in `text`, or None (no regex:
    the hook's common path imports no `re`)."""
    for token in text.translate(_ASCII_NON_DIGITS).split():
        if len(token) <= max_digits:
            continue
        if token.isascii():  # only digits are left of ASCII
            return token
        start = -1
        for i, c in enumerate(token + " "):  # glued by non-ASCII characters: find the runs
            if "0" <= c <= "9":
                start = i if start < 0 else start
            elif start >= 0:
                if i - start > max_digits:
                    return token[start:i]
                start = -1
    return None


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` for a message: as is when short, else its start and its length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text)} chars)"
