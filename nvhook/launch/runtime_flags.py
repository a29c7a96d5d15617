"""runc's and crun's command-line flags, as data: the one table the runtime wrapper's parser
(`nvhook.launch.command_line`) and the sh launcher's grammar (`runtime_sh.grammar_values`)
are made from. Pure, no imports.

Taken from the flag tables of runc 1.1 to 1.5 (`main.go`, `create.go`, `run.go`; urfave/cli
v1 on Go's `flag` package; every command also gets urfave's `--help, -h`) and crun 1.8 to 1.28
(`src/crun.c`, `src/create.c`, `src/run.c`; glibc argp, which adds `-?, --help`, `--usage`
and the hidden `--program-name` and `--HANG`):

    grammar    command flags that take a value          booleans
    runc 1.1   bundle b, console-socket, pid-file,      no-pivot, no-new-keyring, help h;
               preserve-fds (an int)                    run: detach d, keep, no-subreaper
    runc 1.2+  the same and pidfd-socket                the same
    crun       bundle b, config f, console-socket,      no-pivot, no-new-keyring,
               pid-file, preserve-fds (1.19+: an int)   no-subreaper, help ?, usage;
                                                        run: detach d, keep (1.9+)

runc 1.1 pins urfave/cli 1.22.1, whose argument reordering moves every `-x` word and the word
after it to the front; runc 1.2 to 1.5 (urfave/cli 1.22.14 to 1.22.17), and distributions that
build runc 1.1 with their own urfave/cli, move only the command's own flags and the word after
one of them that is not itself a flag.
"""

from __future__ import annotations

# Go's flag package: (names that take a value, boolean names); the first name of a pair is
# the long one. runc's global flags (criu: 1.1 to 1.3; crun's extra ones: an error for runc).
RUNC_GLOBAL_VALUES = ("root", "log", "log-format", "criu", "rootless")
RUNC_GLOBAL_BOOLS = ("debug", "systemd-cgroup", "help", "h", "version", "v")
CRUN_GLOBAL_VALUES = ("cgroup-manager", "log-level")

BUNDLE = ("bundle", "b")

# runc create/run: name -> kind ("value", "int", "bool"); per urfave/cli generation
_RUNC_CREATE = {"bundle": "value", "b": "value", "console-socket": "value",
                "pid-file": "value", "preserve-fds": "int", "no-pivot": "bool",
                "no-new-keyring": "bool", "help": "bool", "h": "bool"}
_RUNC_RUN = {**_RUNC_CREATE, "detach": "bool", "d": "bool", "keep": "bool",
             "no-subreaper": "bool"}
RUNC_COMMANDS = {  # the flags of runc 1.1, then those of 1.2 to 1.5
    "1.1": {"create": _RUNC_CREATE, "run": _RUNC_RUN},
    "1.2": {"create": {**_RUNC_CREATE, "pidfd-socket": "value"},
            "run": {**_RUNC_RUN, "pidfd-socket": "value"}},
}
# urfave/cli's reordering: "any" (1.22.1: every dash word, and the word after it) or "own"
# (1.22.14+: the command's own flags). A distribution builds runc with its own urfave/cli
# (Debian 12's runc 1.1.5 reorders "own"), so every runc flag set goes with both.
RUNC_REORDER = ("any", "own")

# crun create/run (argp): long name -> (short letter or "", takes a value)
_CRUN_CREATE = {"bundle": ("b", True), "config": ("f", True), "console-socket": ("", True),
                "preserve-fds": ("", True), "no-pivot": ("", False), "pid-file": ("", True),
                "no-subreaper": ("", False), "no-new-keyring": ("", False),
                "help": ("?", False), "usage": ("", False), "program-name": ("", True),
                "HANG": ("", False)}
CRUN_COMMANDS = {"create": _CRUN_CREATE,
                 "run": {**_CRUN_CREATE, "detach": ("d", False), "keep": ("", False)}}
CRUN_CONFIG = ("config", "f")  # crun reads BUNDLE/FILE instead of BUNDLE/config.json
CRUN_INTS = ("preserve-fds",)  # crun 1.19+: a base-10 int (strtoll, all of it); before: any
CRUN_VERSIONS = ("1.8", "1.19")  # lenient, strict ints

# never on the sh front's fast path: help and usage print, crun's --config reads another file,
# argp's hidden flags
_FRONT_NEVER = frozenset(("help", "h", "?", "usage", "HANG", "program-name", *CRUN_CONFIG))


def command_kinds(command: str) -> dict[str, set[str]]:
    """Every create/run flag name of every grammar -> the kinds ("value", "bool") they give it."""
    kinds: dict[str, set[str]] = {}
    for table in RUNC_COMMANDS.values():
        for name, kind in table[command].items():
            kinds.setdefault(name, set()).add("bool" if kind == "bool" else "value")
    for name, (short, value) in CRUN_COMMANDS[command].items():
        for each in (name, short):
            if each:
                kinds.setdefault(each, set()).add("value" if value else "bool")
    return kinds


def front_lists() -> dict[str, str]:
    """The sh launcher's flag lists (`nvhook_*` header variables: names between spaces): a
    create/run flag is on the fast path when every grammar that knows it agrees whether it
    takes a value."""
    out = {"nvhook_global_values": _words(RUNC_GLOBAL_VALUES),
           "nvhook_global_bools": _words(RUNC_GLOBAL_BOOLS),
           "nvhook_bundle_names": _words(BUNDLE)}
    for command in ("create", "run"):
        kinds = command_kinds(command)
        for kind in ("value", "bool"):
            names = sorted(n for n, k in kinds.items() if k == {kind} and n not in _FRONT_NEVER)
            out[f"nvhook_{command}_{kind}s"] = _words(names)
    return out


def _words(names: tuple[str, ...] | list[str]) -> str:
    return f" {' '.join(names)} "
