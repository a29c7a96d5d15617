"""The Tegra CSV mount specs (nvmount.discover.csv_backend): parsing, bounds, kinds, and
the mode selection (csv asked for, or auto on a root with /etc/nv_tegra_release)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvhook.config.model import config_from_document
from nvhook.hook.request import csv_mode
from nvmount.discover.csv_backend import read_specs
from nvmount.errors import DriverError


def test_parse_kinds_comments_and_order(tmp_path: Path) -> None:
    (tmp_path / "b.csv").write_text("# c\n\nDEV, /dev/nvmap\nlib,/usr/lib/x.so \n")
    (tmp_path / "a.csv").write_text("sym, /usr/lib/y.so\ndir, /usr/lib/d/\n")
    (tmp_path / "ignored.txt").write_text("dev, /dev/zero\n")
    assert read_specs(str(tmp_path)) == [
        ("a.csv", "sym", "/usr/lib/y.so"), ("a.csv", "dir", "/usr/lib/d"),
        ("b.csv", "dev", "/dev/nvmap"), ("b.csv", "lib", "/usr/lib/x.so")]


@pytest.mark.parametrize("line", ["blob, /x", "lib /x", "lib, relative/x"])
def test_bad_lines_name_file_and_line(tmp_path: Path, line: str) -> None:
    (tmp_path / "l4t.csv").write_text("dev, /dev/nvmap\n" + line + "\n")
    with pytest.raises(DriverError, match=r"l4t.csv line 2: .* is not `dev\|lib\|sym\|dir"):
        read_specs(str(tmp_path))


def test_bounded(tmp_path: Path) -> None:
    (tmp_path / "big.csv").write_text("lib, /x\n" * 10000)
    assert len(read_specs(str(tmp_path))) == 4096
    with pytest.raises(DriverError, match="read CSV mount specs"):
        read_specs(str(tmp_path / "none"))


def test_mode_selection(tmp_path: Path) -> None:
    root = {"nvidia-container-cli": {"root": str(tmp_path)}}
    assert not csv_mode(config_from_document(root, "p"))
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("# R35\n")
    assert csv_mode(config_from_document(root, "p"))
    legacy = {**root, "nvidia-container-runtime": {"mode": "legacy"}}
    assert not csv_mode(config_from_document(legacy, "p"))


def test_skip_mode_detection_proceeds_as_legacy(tmp_path: Path) -> None:
    """NVIDIA's hook with mode = "csv" and skip-mode-detection = true runs its legacy path
    (the CLI): no CSV mount specs are read, so a missing spec directory is no error."""
    doc = {"nvidia-container-cli": {"root": str(tmp_path)},
           "nvidia-container-runtime": {"mode": "csv"}}
    assert csv_mode(config_from_document(doc, "p"))
    skip = {**doc, "nvidia-container-runtime-hook": {"skip-mode-detection": True}}
    assert not csv_mode(config_from_document(skip, "p"))
