"""nvhook.config.toml_read: the simple subset needs no library; beyond it the first of tomllib,
tomli, toml (Debian 11's python3-toml) is used; with none, one clear error (never an internal
error: issue 18). The real python3-toml is exercised in the bullseye root of
tests/e2e/test_deb.py."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from nvhook.config import toml_read
from nvhook.errors import ConfigError

SIMPLE = '[nvidia-container-cli]\nroot = "/run/nvidia/driver"\n'
BEYOND = '[nvhook]\nx = { y = 0.5 }\n'


def _without(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


def test_simple_text_needs_no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "tomllib", "tomli", "toml")
    assert toml_read.loads(SIMPLE) == {"nvidia-container-cli": {"root": "/run/nvidia/driver"}}


def test_no_library_is_one_clear_error(monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    _without(monkeypatch, "tomllib", "tomli", "toml")
    with pytest.raises(toml_read.TomlUnavailable, match="install python3-toml"):
        toml_read.loads(BEYOND)
    from nvhook.config.load import _read_toml

    path = tmp_path / "config.toml"
    path.write_text(BEYOND)
    with pytest.raises(ConfigError) as info:
        _read_toml(str(path), "--config")
    assert str(info.value) == (
        f"couldn't parse configuration file {path}: it uses TOML beyond the simple subset "
        "nvhook reads itself, and no TOML library is installed (install python3-toml "
        "(Debian 11) or python3-tomli, or use Python 3.11+)")


def test_python3_toml_is_the_last_resort(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "tomllib", "tomli")
    fake = types.ModuleType("toml")

    def loads(text: str) -> dict[str, object]:
        if "bad" in text:
            raise IndexError("string index out of range")  # as toml 0.10 does on some input
        return {"parsed": text}

    fake.loads = loads  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "toml", fake)
    assert toml_read.loads(BEYOND) == {"parsed": BEYOND}
    with pytest.raises(ValueError, match="invalid TOML \\(IndexError: string index"):
        toml_read.loads("bad = [")


def test_tomllib_or_tomli_first() -> None:
    assert toml_read.loads(BEYOND) == {"nvhook": {"x": {"y": 0.5}}}
    with pytest.raises(ValueError):
        toml_read.loads("a = [\n")
