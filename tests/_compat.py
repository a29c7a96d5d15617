"""Python 3.9/3.10 stand-ins for what the tests use from newer versions."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # tomli is nvhook's own dependency below 3.11
    import tomli as tomllib  # noqa: F401


def zip_strict(*iterables: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """zip(..., strict=True) (3.10+): the iterables must have the same length."""
    lists = [list(it) for it in iterables]
    assert len({len(x) for x in lists}) <= 1, f"zip_strict: lengths {[len(x) for x in lists]}"
    return zip(*lists)
