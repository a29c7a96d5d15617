"""Command-line flags in Go's `flag` syntax, as NVIDIA's hook parses them, and the global
options every command receives. Pure (no I/O); used by `nvhook.cli` and the commands.
"""

from __future__ import annotations

from nvhook.errors import UsageError
from nvmount.records import record

_HELP_FLAGS = frozenset(("h", "help"))
_GO_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
_GO_FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))


@record
class GlobalOptions:
    """Global flags handed to every command. `cwd` is the directory the process started in
    (runc: the bundle); hook commands run in "/", so resolve relative user paths against it."""

    config_path: str | None = None
    debug: bool = False
    cwd: str | None = None
    stdin: bytes | None = None  # what the launcher's gate already read from stdin (the state)


class HelpRequested(Exception):
    """-h / -help: print the usage and exit 0 (as Go's flag package does)."""


def go_bool(value: str, flag: str) -> bool:
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise UsageError(f'invalid boolean value "{value}" for -{flag}: parse error')


def split_flag(arg: str) -> tuple[str, str | None] | None:
    """(name, value or None) of a flag argument, None for a positional one (Go's syntax)."""
    if len(arg) < 2 or arg[0] != "-":
        return None
    body = arg[2:] if arg[1] == "-" else arg[1:]
    if not body or body[0] in "-=":
        raise UsageError(f"bad flag syntax: {arg}")
    name, eq, value = body.partition("=")
    return name, (value if eq else None)


def _flag_or_none(arg: str, *, passthrough: bool) -> tuple[str, str | None] | None:
    """split_flag; in pass-through mode malformed flags are left to the command's parser."""
    try:
        return split_flag(arg)
    except UsageError:
        if passthrough:
            return None
        raise


def take_flags(
    args: list[str], known: dict[str, bool], *, leading: bool, strict: bool
) -> tuple[dict[str, str | bool], list[str]]:
    """Parse `known` flags (name -> takes a value) out of `args`.

    leading: stop at the first positional argument (Go's flag.Parse); else pick flags from
    anywhere and keep the others in order. strict: an unknown flag is a usage error.
    Returns (values, remaining arguments).
    """
    values: dict[str, str | bool] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i + 1 :] if leading or strict else args[i:]
            break
        parsed = _flag_or_none(arg, passthrough=not (strict or leading))
        if parsed is None:
            if leading:
                return values, args[i:]
            rest.append(arg)
        elif parsed[0] in _HELP_FLAGS and (leading or strict):
            raise HelpRequested()
        elif parsed[0] not in known:
            if strict or leading:
                raise UsageError(f"flag provided but not defined: -{parsed[0]}")
            rest.append(arg)
        else:
            name, value = parsed
            if not known[name]:
                values[name] = go_bool("true" if value is None else value, name)
            elif value is not None:
                values[name] = value
            elif i + 1 < len(args):
                i += 1
                values[name] = args[i]
            else:
                raise UsageError(f"flag needs an argument: -{name}")
        i += 1
    return values, rest
