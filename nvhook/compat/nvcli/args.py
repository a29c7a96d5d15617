"""nvidia-container-cli's command line, parsed as GNU argp parses it. Pure.

    nvidia-container-cli [global options] COMMAND [command options] [ARG]

Long options as `--name=value` or `--name value`, abbreviated to any unique prefix; short ones
as `-d FILE`, `-dFILE`, or bundled (`-kn`); an optional argument (`--user`) only attached
(`-u1000:1000`, `--user=1000:1000`); `--` ends the options. Global options stop at the command
word; a command's options may come before or after its argument. Repeated list options
(`--device`, `--require`, ...) accumulate; a repeated single value keeps the last.
"""

from __future__ import annotations

from nvhook.errors import UsageError

# name: (short letter or "", argument: "" none, "req" required, "opt" optional, repeatable)
Spec = dict[str, tuple[str, str, bool]]

GLOBAL: Spec = {
    "debug": ("d", "req", False), "load-kmods": ("k", "", False),
    "no-pivot": ("n", "", False), "user": ("u", "opt", False), "root": ("r", "req", False),
    "ldcache": ("l", "req", False), "no-create-imex-channels": ("", "", False),
    "version": ("V", "", False), "help": ("?", "", False),
}
COMMANDS: dict[str, Spec] = {
    "info": {"csv": ("c", "", False), "help": ("?", "", False)},
    "list": {
        "device": ("d", "req", True), "libraries": ("l", "", False),
        "binaries": ("b", "", False), "ipcs": ("i", "", False), "firmwares": ("f", "", False),
        "compat32": ("", "", False), "mig-config": ("", "req", True),
        "mig-monitor": ("", "req", True), "imex-channel": ("", "req", True),
        "no-persistenced": ("", "", False), "no-fabricmanager": ("", "", False),
        "no-gsp-firmware": ("", "", False), "help": ("?", "", False),
    },
    "configure": {
        "pid": ("p", "req", False), "device": ("d", "req", True), "require": ("r", "req", True),
        "ldconfig": ("l", "req", False), "compute": ("c", "", False),
        "utility": ("u", "", False), "video": ("v", "", False), "graphics": ("g", "", False),
        "display": ("D", "", False), "ngx": ("n", "", False), "compat32": ("", "", False),
        "mig-config": ("", "req", True), "mig-monitor": ("", "req", True),
        "imex-channel": ("", "req", True), "no-cgroups": ("", "", False),
        "no-devbind": ("", "", False), "no-cntlibs": ("", "", False),
        "cuda-compat-mode": ("", "req", False), "help": ("?", "", False),
    },
}

Values = dict[str, "str | bool | list[str]"]


class Parsed:
    """Global options, the command, its options and its positional arguments."""

    __slots__ = ("args", "command", "global_opts", "opts")

    def __init__(self) -> None:
        self.global_opts: Values = {}
        self.command = ""
        self.opts: Values = {}
        self.args: list[str] = []


def parse_cli(argv: list[str]) -> Parsed:
    """argv[1:] of nvidia-container-cli (module docstring)."""
    out = Parsed()
    rest = _parse(argv, GLOBAL, out.global_opts, in_order=True)
    if not rest:
        return out
    out.command = rest[0]
    if out.command not in COMMANDS:
        raise UsageError(f"nvidia-container-cli: unknown command: {out.command} (commands: "
                         "info, list, configure)")
    out.args = _parse(rest[1:], COMMANDS[out.command], out.opts, in_order=False)
    return out


def _long(name: str, spec: Spec) -> str:
    if name in spec:
        return name
    matches = [n for n in spec if n.startswith(name)]
    if len(matches) != 1:
        what = "ambiguous" if matches else "unrecognized"
        raise UsageError(f"nvidia-container-cli: {what} option '--{name}'")
    return matches[0]


def _store(values: Values, spec: Spec, name: str, value: str | bool) -> None:
    if spec[name][2]:
        current = values.setdefault(name, [])
        assert isinstance(current, list)
        current.append(str(value))
    else:
        values[name] = value


def _parse(argv: list[str], spec: Spec, values: Values, *, in_order: bool) -> list[str]:
    """Options into `values`; returns the non-option arguments (from the first one on, when
    `in_order`)."""
    shorts = {s: n for n, (s, _, _) in spec.items() if s}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return positional + argv[i + 1:]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            name = _long(name, spec)
            kind = spec[name][1]
            if kind == "" and eq:
                raise UsageError(f"nvidia-container-cli: option '--{name}' doesn't allow an "
                                 "argument")
            if kind == "req" and not eq:
                i += 1
                if i >= len(argv):
                    raise UsageError(f"nvidia-container-cli: option '--{name}' requires an "
                                     "argument")
                value = argv[i]
            _store(values, spec, name, value if (eq or kind == "req") else True)
        elif arg.startswith("-") and len(arg) > 1:
            i = _shorts(argv, i, spec, shorts, values)
        elif in_order:
            return argv[i:]
        else:
            positional.append(arg)
        i += 1
    return positional


def _shorts(argv: list[str], i: int, spec: Spec, shorts: dict[str, str],
            values: Values) -> int:
    """A bundle of short options at argv[i]; returns the index of its last argument."""
    arg = argv[i]
    for j in range(1, len(arg)):
        name = shorts.get(arg[j])
        if name is None:
            raise UsageError(f"nvidia-container-cli: invalid option -- '{arg[j]}'")
        kind, attached = spec[name][1], arg[j + 1:]
        if kind == "":
            _store(values, spec, name, True)
            continue
        if kind == "opt":
            _store(values, spec, name, attached or True)
        elif attached:
            _store(values, spec, name, attached)
        elif i + 1 < len(argv):
            i += 1
            _store(values, spec, name, argv[i])
        else:
            raise UsageError(f"nvidia-container-cli: option requires an argument -- '{arg[j]}'")
        break
    return i
