"""Differences between the supported Python versions (3.9 to 3.13), in one place. Pure.

Nothing here imports `typing` or `subprocess` at import time (the hook's start is measured).
"""

from __future__ import annotations

import sys


def add_note(err: BaseException, note: str) -> None:
    """BaseException.add_note (3.11+); before 3.11 the note is kept in __notes__ as 3.11 does."""
    if sys.version_info >= (3, 11):
        err.add_note(note)
    else:
        notes = getattr(err, "__notes__", None)
        if not isinstance(notes, list):
            notes = []
            err.__notes__ = notes  # type: ignore[attr-defined,unused-ignore]
        notes.append(note)


def orig_argv() -> list[str]:
    """sys.orig_argv (3.10+); before 3.10 rebuilt from the interpreter flags, script and argv.

    3.9 keeps no copy of `-c CODE`; the hook is always a script (launcher, console script) or
    `-m nvhook`, which are rebuilt exactly.
    """
    if sys.version_info >= (3, 10):
        return sys.orig_argv
    import subprocess  # only on this path (re-exec): not at every start

    flags: list[str] = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined,unused-ignore]
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    script = ["-m", spec.name] if spec is not None and spec.name else sys.argv[:1]
    return [sys.executable, *flags, *script, *sys.argv[1:]]
