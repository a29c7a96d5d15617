"""The launchers' files and the one function that fills their header. Pure.

Each launcher lives in a real file beside this module (package data): the POSIX sh fronts
`runtime.sh` and `hookfront.sh` (checked by shellcheck as they are and as written) and the
Python launcher `launcher.pyt`. A file starts with

    #!/bin/sh                               (`.pyt`: #!/usr/bin/python3 -IS)
    # BEGIN header: ... (comment lines)
    nvhook_python='/usr/bin/python3'        one assignment per line: a placeholder value
    ...                                     (`.pyt`: _PATHS = [...])
    # END header

and `render` replaces that block by the #! line, the marker line and the same assignments
with the installation's values, each quoted for its language (`shlex.quote`, `repr`); the
body after `# END header` is copied as it is (no templating inside it, no eval). The names
must be exactly those the file's header assigns. The sh variables keep the body's lower-case
`nvhook_` prefix: the launcher exports nothing, and a daemon's environment is less likely to
hold (and pass on, changed) such a name.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

HERE = Path(__file__).resolve().parent
BEGIN = "# BEGIN header"
END = "# END header"
_ASSIGN = re.compile(r"^(nvhook_[a-z_]+)=|^(_[A-Z_]+) = ")


class TemplateError(ValueError):
    """A launcher file or the values given for it do not agree (a bug, never input)."""


def header_names(text: str) -> tuple[str, ...]:
    """The variables the header of a launcher file assigns, in order."""
    head = text[text.index(BEGIN):text.index(f"\n{END}\n")]
    return tuple(m.group(1) or m.group(2) for line in head.split("\n")
                 if (m := _ASSIGN.match(line)))


def source(name: str) -> str:
    """The text of the launcher file `name` as shipped."""
    return (HERE / name).read_text(encoding="utf-8")


def render(name: str, marker: str, values: Mapping[str, object], *,
           interpreter: str = "") -> str:
    """The launcher `name` with its header filled: the #! line (a `.pyt` file's names
    `interpreter`), `marker` (one comment line), then `values` as assignments in the file's
    order, then the body."""
    text = source(name)
    python = name.endswith(".pyt")
    first = f"#!{interpreter} -IS" if python else "#!/bin/sh"
    if not text.startswith("#!") or not text.split("\n", 2)[1].startswith(BEGIN) or (
            f"\n{END}\n" not in text):
        raise TemplateError(f"{name}: no '{BEGIN}' ... '{END}' block after the #! line")
    names = header_names(text)
    if set(names) != set(values) or len(names) != len(values):
        raise TemplateError(f"{name}: the header assigns {sorted(names)}, values given for "
                            f"{sorted(values)}")
    if "\n" in marker or not marker.startswith("#"):
        raise TemplateError(f"{name}: the marker must be one comment line")
    body = text.split(f"\n{END}\n", 1)[1]
    head = "".join(f"{n} = {values[n]!r}\n" if python else _assign(n, values[n])
                   for n in names)
    return f"{first}\n{marker}\n{head}{body}"


def _assign(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TemplateError(f"{name}: a sh value must be a string")
    note = "# shellcheck disable=SC2016 # literal text: nothing in it expands\n"
    return f"{note if '$' in value or '`' in value else ''}{name}={shlex.quote(value)}\n"
