"""The urfave/cli v3 grammar of NVIDIA's Go tools (nvidia-ctk, nvidia-cdi-hook), and their
logrus-style lines on stderr. Pure but for `Log` (stderr) and the environment it is handed.

What NVIDIA 1.20.0's binaries accept (observed with /opt/peer-1.20, not only read):

- `--flag value`, `--flag=value`, `-flag value` and `-flag=value` alike; a boolean flag takes
  no value (`--dry-run`) or `=VALUE` with Go's ParseBool (`--dry-run=false`);
- a scalar flag given twice: the last value wins; a slice flag (`--link`, `--spec-dir`)
  appends, and every value is split on commas (1.20.0 still splits, despite its changelog);
- flags may follow positional arguments of a command without subcommands; `--` ends flags;
- a flag left out takes its first set environment variable (slices split on commas), then
  its default;
- an undefined flag: `flag provided but not defined: -NAME`, exit 1.

A flag NVIDIA has and nvhook does not implement is declared `refused`: given on the command
line or through its variable, it is a one-line error naming it, never a silent no-op.
"""

from __future__ import annotations

import sys

from nvhook.errors import NvhookError
from nvhook.logrus import LogrusLog, go_quote, local_time, text_line
from nvmount.log import DEBUG, ERROR, INFO, WARNING

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

BOOL, STRING, SLICE = "bool", "string", "slice"
_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
_FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))
MAX_ARGS = 8192  # a hook's argv comes from a spec: bounded work


class CliError(NvhookError):
    """A command-line error of a drop-in (NVIDIA's tools exit 1 on them, not 2)."""


class HelpRequested(Exception):
    """`--help` / `-h`: print the command's usage and exit 0."""


class Flag:
    """One flag: its names, kind, variables and default, or why nvhook refuses it."""

    __slots__ = ("aliases", "default", "env", "help", "kind", "name", "refused")

    def __init__(self, name: str, kind: str = STRING, *, aliases: Sequence[str] = (),
                 env: Sequence[str] = (), default: object = None, refused: str = "",
                 help: str = "") -> None:
        self.name, self.kind, self.aliases, self.env = name, kind, tuple(aliases), tuple(env)
        self.default = default if default is not None else (
            False if kind == BOOL else [] if kind == SLICE else "")
        self.refused, self.help = refused, help


class Parsed:
    """Flag values by canonical name, positional arguments, and the names that were set."""

    __slots__ = ("args", "given", "values")

    def __init__(self, values: dict[str, object], args: list[str], given: set[str]) -> None:
        self.values, self.args, self.given = values, args, given

    def string(self, name: str) -> str:
        return str(self.values[name])

    def boolean(self, name: str) -> bool:
        return bool(self.values[name])

    def strings(self, name: str) -> list[str]:
        value = self.values[name]
        return [str(v) for v in value] if isinstance(value, list) else []


def parse_bool(value: str, what: str) -> bool:
    """Go's strconv.ParseBool."""
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise CliError(f'invalid value "{value[:100]}" for {what}: parse error '
                   "(expected true or false)")


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",")]


def parse(argv: Sequence[str], flags: Sequence[Flag], *, command: str,
          environ: Mapping[str, str], subcommands: bool = False) -> Parsed:
    """Parse `argv` (after the command words). With `subcommands`, the first positional
    argument ends the flags (it names a subcommand; the rest is its argv)."""
    if len(argv) > MAX_ARGS:
        raise CliError(f"{command}: more than {MAX_ARGS} arguments")
    by_name = {n: f for f in flags for n in (f.name, *f.aliases)}
    values: dict[str, object] = {}
    args: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            args.extend(argv[i:])
            break
        if len(arg) < 2 or arg[0] != "-":
            args.append(arg)
            if subcommands:
                args.extend(argv[i:])
                break
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if name in ("h", "help") and name not in by_name:
            raise HelpRequested(command)
        flag = by_name.get(name)
        if flag is None or arg.startswith("---"):
            raise CliError(f"flag provided but not defined: -{name[:100]}")
        if flag.kind == BOOL:
            values[flag.name] = parse_bool(value, f"flag -{name}") if eq else True
            continue
        if not eq:
            if i >= len(argv):
                raise CliError(f"flag needs an argument: -{name}")
            value, i = argv[i], i + 1
        if flag.kind == SLICE:
            have = values.setdefault(flag.name, [])
            assert isinstance(have, list)
            have.extend(_split(value))
        else:
            values[flag.name] = value
    given = set(values)
    for flag in flags:
        if flag.name not in values:
            _from_env(flag, values, given, environ)
        if flag.refused and flag.name in given:
            raise CliError(f"{command}: flag --{flag.name} is not supported by nvhook's "
                           f"drop-in: {flag.refused}")
    return Parsed(values, args, given)


def _from_env(flag: Flag, values: dict[str, object], given: set[str],
              environ: Mapping[str, str]) -> None:
    for var in flag.env:
        raw = environ.get(var)
        if raw:
            if flag.kind == BOOL:
                values[flag.name] = parse_bool(raw, var)
            else:
                values[flag.name] = _split(raw) if flag.kind == SLICE else raw
            given.add(flag.name)
            return
    default = flag.default
    values[flag.name] = list(default) if isinstance(default, list) else default


def parse_command(argv: Sequence[str], flags: Sequence[Flag], *, command: str, summary: str,
                  environ: Mapping[str, str], subcommands: Sequence[tuple[str, str]] = ()
                  ) -> Parsed | None:
    """`parse`, or None after printing the command's usage for `--help`."""
    try:
        return parse(argv, flags, command=command, environ=environ,
                     subcommands=bool(subcommands))
    except HelpRequested:
        sys.stdout.write(usage(command, summary, flags, subcommands))
        return None


def usage(command: str, summary: str, flags: Sequence[Flag], subcommands: Sequence[
        tuple[str, str]] = ()) -> str:
    """A short help text in urfave's layout (NAME, USAGE, COMMANDS, OPTIONS)."""
    lines = ["NAME:", f"   {command} - {summary}", "", "USAGE:",
             f"   {command} [options]" + (" [command [command options]]" if subcommands else ""),
             ""]
    if subcommands:
        lines += ["COMMANDS:", *(f"   {n:<34} {h}" for n, h in subcommands), ""]
    lines.append("OPTIONS:")
    for flag in flags:
        names = ", ".join(f"--{n}" if len(n) > 1 else f"-{n}" for n in (flag.name, *flag.aliases))
        extra = f" (not supported by nvhook: {flag.refused})" if flag.refused else ""
        env = f" [${', $'.join(flag.env)}]" if flag.env else ""
        lines.append(f"   {names:<34} {flag.help}{extra}{env}")
    lines.append(f"   {'--help, -h':<34} show help")
    return "\n".join(lines) + "\n"


# -- logrus-style lines (`nvhook.logrus`) -------------------------------------------------------
class Log(LogrusLog):
    """NVIDIA's log lines on stderr: `time="..." level=warning msg="..."`. Its own messages
    from info up by default, debug with `--debug`, errors only with `--quiet` (which wins).
    Installed as the engine's sink (`nvmount.log.install`), it shows the engine's warnings
    and errors (everything with `--debug`) the same way."""

    __slots__ = ()

    def __init__(self, *, debug: bool = False, quiet: bool = False) -> None:
        super().__init__(ERROR if quiet else DEBUG if debug else INFO,
                         ERROR if quiet else DEBUG if debug else WARNING)

    def write(self, level: str, message: str) -> None:
        sys.stderr.write(text_line(local_time(), level, go_quote(message)))
        sys.stderr.flush()
