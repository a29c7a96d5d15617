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


DEVIATION_TABLE = re.compile(r"^\| deviation \| what nvhook does \| why \|$", re.M)
# the deviations each page documents (the tables are their one home; this list only notices
# one that goes missing or is renamed without the code that implements it being looked at)
DEVIATIONS = {
    "hook.md": (
    'The container from the state',
    'User namespaces: who creates, who owns',
    'Device cgroup and user namespaces',
    'Repeated device ids',
    'Requirement order',
    'Config file lookup',
    'Config files named by the environment',
    'Host paths root uses',
    "Nothing from the hook's environment",
    'IPC mounts read-only',
    'Input budgets',
    "ldconfig's input and output",
    'Stricter config values',
    'Mode detection',
    'Invalid supported-driver-capabilities',
    'Error texts',
    'Tracebacks',
    'Hostile state and spec',
    'Command line',
    'Version output',
    'Log verbosity',
    'No nvidia-container-cli',
    'MIG device lists',
    'Graphics: no non-GLVND GL libraries',
    'Graphics: the allocator',
    'CDI: one self-contained hook',
    'CDI: container paths',
    'load-kmods',
    'ld.so.cache paths',
    'Graphics and video files on every layout',
    'info',
    'Optional targets',
    ),
    "runtimes.md": (
    'Runtime wrapper: GPU containers only',
    'Runtime wrapper: command line',
    'Runtime wrapper: spec rewrite',
    'Runtime wrapper: hook entry',
    'Runtime wrapper: low-level runtime',
    'Runtime wrapper: launcher and configuration',
    'Runtime wrapper: modes and output',
    "Runtime wrapper: spec delivery, nvhook's jit-cdi",
    'nvidia-container-cli drop-in',
    'runtime configure',
    'nvidia-cdi-hook: where a hook works',
    'nvidia-cdi-hook: optional targets',
    'nvidia-cdi-hook: disable-device-node-modification and update-ldcache',
    'nvidia-cdi-hook: one process for a run of hooks',
    'nvidia-ctk cdi generate',
    'nvidia-ctk runtime configure',
    'nvidia-ctk config, cdi list, system',
    ),
}


def deviation_rows(page: str) -> dict[str, tuple[str, str]]:
    text = (REPO / "docs" / page).read_text()
    match = DEVIATION_TABLE.search(text)
    assert match, f"{page}: no deviation table"
    rows: dict[str, tuple[str, str]] = {}
    for line in text[match.end():].lstrip("\n").splitlines()[1:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == 3 and all(cells), f"{page}: {line[:60]}"
        topic = cells[0].strip("*")
        assert topic not in rows, f"{page}: {topic} twice"
        rows[topic] = (cells[1], cells[2])
    return rows


@pytest.mark.parametrize("page", sorted(DEVIATIONS))
def test_every_deviation_is_documented_with_what_and_why(page: str) -> None:
    rows = deviation_rows(page)
    assert sorted(rows) == sorted(DEVIATIONS[page])
    for topic, (what, why) in rows.items():
        assert len(what) > 10 and len(why) > 10, (page, topic)


def test_the_layout_tables_are_the_tree() -> None:
    """docs/architecture.md's layout is drawn from the tree: every package and module, with
    the first sentence of its docstring (`python -m tests.fixtures.layout --write` redraws)."""
    from tests.fixtures.layout import current, draw

    assert current() == draw(), "run: python -m tests.fixtures.layout --write"
