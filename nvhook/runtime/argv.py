"""The runtime wrapper's view of a runc (or crun) command line. Pure, no imports.

    [global flags] <command> [command flags and arguments]

Global flags are runc's and crun's (`--root DIR`, `--log FILE`, `--log-format text|json`,
`--criu PATH`, `--rootless VALUE`, `--cgroup-manager M`, `--log-level L`; `--debug`,
`--systemd-cgroup`), as `--flag value`, `--flag=value` or with one dash. The command is the first
word that is not a global flag or its value; only `create` and `run` are acted on. Their
bundle is the last `-b`/`--bundle` value (`-b DIR`, `-b=DIR`, `--bundle DIR`, any number of
leading dashes), else the working directory, as runc has it.

NVIDIA's wrapper (hook-spec 3.3) treats any argument equal to `create` as the command - a
container named `create` in `runc delete create` makes it edit the config.json of the working
directory - and does not act on `run`; nvhook finds the command word first.
"""

from __future__ import annotations

# global flags that take a value (runc, crun)
_VALUE_FLAGS = frozenset(("root", "log", "log-format", "criu", "rootless", "cgroup-manager",
                          "log-level"))
CREATE_COMMANDS = frozenset(("create", "run"))


class Invocation:
    """One call of the wrapper: its command and what matters about its flags."""

    __slots__ = ("bundle", "command", "debug", "log_file", "log_format", "version")

    def __init__(self) -> None:
        self.command = ""  # "" when there is none (runc prints its help)
        self.bundle: str | None = None  # None: the working directory
        self.log_file = ""
        self.log_format = "text"
        self.debug = False
        self.version = False

    @property
    def creates(self) -> bool:
        return self.command in CREATE_COMMANDS


def _flag_name(arg: str) -> tuple[str, str | None]:
    """("name", value after '=' or None) of `-name[=value]` / `--name[=value]`."""
    name, eq, value = arg.lstrip("-").partition("=")
    return name, (value if eq else None)


def parse_runtime_argv(args: list[str]) -> Invocation:
    """Scan argv[1:] as runc does (module docstring)."""
    inv = Invocation()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        name, value = _flag_name(arg)
        if name in _VALUE_FLAGS and value is None:
            i += 1
            value = args[i] if i < len(args) else ""
        if name == "log":
            inv.log_file = value or ""
        elif name == "log-format":
            inv.log_format = value or "text"
        elif name == "debug":
            inv.debug = value in (None, "true", "1", "t", "T", "TRUE", "True")
        elif name in ("version", "v"):
            inv.version = True
        i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    if i < len(args):
        inv.command = args[i]
        if inv.creates:
            inv.bundle = _bundle(args[i + 1:])
    return inv


def _bundle(args: list[str]) -> str | None:
    """The last -b/--bundle value of a create/run command line (hook-spec 3.3)."""
    bundle = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg.startswith("-"):
            name, value = _flag_name(arg)
            if name in ("b", "bundle"):
                if value is None:
                    i += 1
                    value = args[i] if i < len(args) else None
                    if value is None:
                        raise ValueError("bundle option requires an argument")
                bundle = value
        i += 1
    return bundle
