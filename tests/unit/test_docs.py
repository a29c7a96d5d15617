"""The README is a front door and docs/ holds the guides: the README stays short, every guide it
links exists, relative links in the docs resolve, and the configuration reference is the text
`nvhook config default` prints (one source, no drift)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
DOCS = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) < 200
    assert "nvhook demo" in lines[3] and "pytest" in lines[4]


@pytest.mark.parametrize("page", [REPO / "README.md", *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_every_guide_is_linked_from_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    for page in DOCS:
        assert f"(docs/{page.name})" in readme, page.name


def test_configuration_reference_is_the_default_file() -> None:
    from nvhook.config.default import default_text

    page = (REPO / "docs" / "configuration.md").read_text()
    block = page.split("<!-- nvhook config default: begin -->\n```toml\n", 1)[1]
    block = block.split("```\n<!-- nvhook config default: end -->", 1)[0]
    assert block == default_text(), (
        "docs/configuration.md differs from `nvhook config default`: paste its output between "
        "the markers")
