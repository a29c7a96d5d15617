"""The runtime wrapper's view of a runc (or crun) command line. Pure.

    [global flags] <command> [command flags and arguments]

Global flags are parsed as runc parses them (urfave/cli v1 on Go's `flag` package): `-name`,
`--name`, `-name=value`, `--name=value`, and `-name value` for the flags that take a value
(`--root`, `--log`, `--log-format`, `--criu`, `--rootless`; crun's `--cgroup-manager` and
`--log-level` too): the next argument is the value whatever it looks like. Boolean flags
(`--debug`, `--systemd-cgroup`, `--help`/`-h`, `--version`/`-v`) take no separate value, only
`=` with one of Go's boolean spellings. Parsing stops at the first argument that does not start
with `-` (or is `-` alone), which is the command, or after `--`, whose next argument is the
command. Where Go's parser fails (a value flag without its value, `---name`, `-=x`, a bad
boolean, an unknown flag) runc runs no command: `command` is "" and `error` says why (the
wrapper then only execs the runtime, which reports it). `tests/unit/test_runtime_argv.py`
checks this against runc itself, and the shell launcher's parser (`nvhook.launch.runtime_sh`)
against both.

Only `create` and `run` are acted on. Their bundle is what runc and crun read from the rest of
the line (`nvhook.launch.command_line`: each runtime's own grammar, from the flag table
`nvhook.launch.runtime_flags`), else the working directory. NVIDIA's wrapper (hook-spec 3.3)
treats any argument equal to `create` as the command - a container named `create` in `runc
delete create` makes it edit the config.json of the working directory - and does not act on
`run`; nvhook finds the command word first.
"""

from __future__ import annotations

from nvhook.launch.command_line import GO_FALSE, GO_TRUE, bundle_of, go_flag
from nvhook.launch.runtime_flags import CRUN_GLOBAL_VALUES, RUNC_GLOBAL_BOOLS, RUNC_GLOBAL_VALUES

# runc's global flags that take a value, then crun's extra ones (an error for runc itself)
VALUE_FLAGS = frozenset(RUNC_GLOBAL_VALUES)
CRUN_VALUE_FLAGS = frozenset(CRUN_GLOBAL_VALUES)
BOOL_FLAGS = frozenset(RUNC_GLOBAL_BOOLS)
CREATE_COMMANDS = frozenset(("create", "run"))


class Invocation:
    """One call of the wrapper: its command and what matters about its flags."""

    __slots__ = ("ambiguous", "bundle", "command", "debug", "error", "help", "log_file",
                 "log_format", "shown", "version")

    def __init__(self) -> None:
        self.command = ""  # "" when there is none (runc prints its help or an error)
        self.bundle: str | None = None  # None: the working directory
        self.log_file = ""
        self.log_format = "text"
        self.debug = False
        self.version = False
        self.help = False
        self.error = ""  # what runc's parser would refuse ("" when nothing)
        self.ambiguous = ""  # why the bundle of a create/run cannot be told ("" when it can)
        self.shown: dict[str, bool] = {}  # the help and version flags seen, by name

    @property
    def creates(self) -> bool:
        return self.command in CREATE_COMMANDS and not self.error


def parse_runtime_argv(args: list[str]) -> Invocation:
    """Scan argv[1:] as runc does (module docstring)."""
    inv = Invocation()
    i = 0
    while i < len(args) and not inv.error:
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if len(arg) < 2 or arg[0] != "-":
            break
        i = _global(inv, args, i)
    if inv.error or inv.help or inv.version:
        return inv
    if i < len(args):
        inv.command = args[i]
        if inv.command in CREATE_COMMANDS:
            inv.bundle, inv.error, inv.ambiguous = bundle_of(inv.command, args[i + 1:])
    return inv


def _global(inv: Invocation, args: list[str], i: int) -> int:
    """Apply the global flag at args[i]; the index of the next argument."""
    split = go_flag(args[i])
    if split is None:
        inv.error = f"bad flag syntax: {args[i]}"
        return i + 1
    name, value = split
    if name in VALUE_FLAGS or name in CRUN_VALUE_FLAGS:
        if value is None:
            if i + 1 >= len(args):
                inv.error = f"flag needs an argument: -{name}"
                return i + 1
            i += 1
            value = args[i]
        if name == "log":
            inv.log_file = value
        elif name == "log-format":
            inv.log_format = value
    elif name in BOOL_FLAGS:
        if value is not None and value not in GO_TRUE and value not in GO_FALSE:
            inv.error = f'invalid boolean value "{value}" for -{name}'
        on = value is None or value in GO_TRUE
        if name == "debug":
            inv.debug = on
        elif name in ("version", "v", "help", "h"):  # each its own flag, the last value wins;
            inv.shown[name] = on  # urfave/cli shows the version when either is set, or help
            inv.version = inv.shown.get("version", False) or inv.shown.get("v", False)
            inv.help = inv.shown.get("help", False) or inv.shown.get("h", False)
    else:
        inv.error = f"flag provided but not defined: -{name}"
    return i + 1
