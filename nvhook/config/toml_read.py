"""One TOML reader for every file nvhook reads (config.toml, the runtimes' configurations), on
every Python it supports.

`loads(text)`: the simple subset first (`toml_subset`: no import, exact), then the first TOML
library this interpreter has: `tomllib` (3.11+), `tomli` (pip installs it below 3.11), or
`toml` (Debian 11's python3-toml: no Debian or Ubuntu release with a 3.9 interpreter ships
python3-tomli; the .deb depends on `python3 (>= 3.11) | python3-tomli | python3-toml`). Every
error is a ValueError; `TomlUnavailable` (one) says that a file needs a library and none is
installed, and which package to install. Effects: imports a library only for text outside the
subset.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

LIBRARIES = ("tomllib", "tomli", "toml")  # in order of preference
INSTALL_HINT = "install python3-toml (Debian 11) or python3-tomli, or use Python 3.11+"


class TomlUnavailable(ValueError):
    """The text is outside the subset nvhook reads itself and no TOML library is installed."""


def loads(text: str) -> dict[str, Any]:
    """The TOML document in `text`; ValueError (with TOML's message) when it is invalid."""
    from nvhook.config.toml_subset import parse_simple

    doc = parse_simple(text)
    if doc is not None:
        return doc
    return library_loads()(text)


def library_loads() -> Callable[[str], dict[str, Any]]:
    """The `loads` of the first library in LIBRARIES that imports, errors made ValueErrors."""
    import importlib

    for name in LIBRARIES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if name == "toml":
            return _guarded(module.loads)
        loader: Callable[[str], dict[str, Any]] = module.loads
        return loader
    raise TomlUnavailable("it uses TOML beyond the simple subset nvhook reads itself, and no "
                          f"TOML library is installed ({INSTALL_HINT})")


def _guarded(parse: Callable[[str], Any]) -> Callable[[str], dict[str, Any]]:
    """python3-toml (0.10) raises TomlDecodeError, a ValueError, for most invalid text, and
    IndexError or TypeError for some: all of them become ValueErrors."""

    def loads(text: str) -> dict[str, Any]:
        try:
            doc = parse(text)
        except (IndexError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"invalid TOML ({type(err).__name__}: {err})") from err
        if not isinstance(doc, dict):
            raise ValueError("invalid TOML: not a table")
        return dict(doc)

    return loads
