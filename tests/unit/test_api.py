"""nvmount.api, the engine's one door: every name it hands out is its home's own object, the
type checker's list and the run-time table name the same things, and importing the door
loads nothing else (the hook's path loads only the stages it uses)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from nvmount import api

SOURCE = Path(api.__file__)


def type_checking_names() -> set[str]:
    """The names bound under `if TYPE_CHECKING:` in nvmount/api.py."""
    for node in ast.parse(SOURCE.read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            names: set[str] = set()
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    names.update(a.asname or a.name for a in stmt.names)
                elif isinstance(stmt, ast.Assign):
                    names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
            return names
    raise AssertionError("nvmount/api.py has no TYPE_CHECKING block")


def test_the_type_checkers_names_are_the_tables() -> None:
    assert type_checking_names() == set(api._HOMES)


@pytest.mark.parametrize("name", sorted(api._HOMES))
def test_each_name_is_its_homes_object(name: str) -> None:
    module, colon, attr = api._HOMES[name].partition(":")
    __import__(module)
    home = sys.modules[module]
    expected = home if colon and not attr else getattr(home, attr or name)
    assert getattr(api, name) is expected


def test_an_unknown_name_is_an_import_error() -> None:
    with pytest.raises(ImportError, match="no_such_name"):
        exec("from nvmount.api import no_such_name", {})


def test_importing_the_door_loads_no_other_module() -> None:
    code = ("import sys; import nvmount.api; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('nvmount'))))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True, cwd=SOURCE.parent.parent, timeout=60).stdout.split()
    assert out == ["nvmount", "nvmount.api"]
