"""The bundle of a `create`/`run` command line as runc and crun read it. Pure, no imports
beyond the flag table (`nvhook.launch.runtime_flags`).

Each grammar is followed as its runtime's parser does, to the container id:

- runc (urfave/cli v1 on Go's `flag`): the arguments are reordered (`RUNC_REORDER`), then
  parsed by Go's rules: `-name`/`--name`, `=value`, a value flag takes the next word whatever
  it is, a boolean only `=` with Go's spellings, `--` ends the flags, the first word without a
  dash (or `-`) ends them; an unknown flag, `---x`, a bad int or boolean is an error; then
  exactly one word must be left (the container id). `--help`/`-h` prints help.
- crun (glibc argp, in order): `--long[=value]` (a unique prefix of a long name counts),
  `--long value`, `-b value`, `-bvalue`, clustered letters (`-db DIR`), `--`, the first word
  without a dash ends the options; at most one word may be left.

`bundle_of` runs every grammar (runc 1.1, runc 1.2 to 1.5, crun) and keeps those that accept
the line: when they name the same bundle, that is the bundle; when none accepts, the runtime
will refuse it (no container: nothing to screen); when they differ - or crun would read
another file than the bundle's config.json (`-f`/`--config`) - the wrapper cannot know
which bundle the runtime creates and refuses the create (`ambiguous`).
"""

from __future__ import annotations

from nvhook.launch.runtime_flags import (
    BUNDLE,
    CRUN_COMMANDS,
    CRUN_CONFIG,
    CRUN_INTS,
    CRUN_VERSIONS,
    RUNC_COMMANDS,
    RUNC_REORDER,
)

CWD = ""  # the bundle is the working directory
# strconv.ParseBool's spellings (Go's flag package reads boolean flags with it)
GO_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
GO_FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))


def go_flag(arg: str) -> tuple[str, str | None] | None:
    """(name, value after '=' or None) of a `-name[=value]`/`--name[=value]` argument, as Go's
    flag package splits it; None when Go calls it bad syntax (`---x`, `-=x`)."""
    body = arg[2:] if arg.startswith("--") else arg[1:]
    if not body or body[0] in "-=":
        return None
    name, eq, value = body.partition("=")
    return name, (value if eq else None)


class Parsed:
    """One grammar's reading: `bundle` (CWD for the working directory), `config` (crun's
    other spec file, "" when none), or `error` (the runtime refuses the line)."""

    __slots__ = ("bad_int", "bundle", "config", "error")

    def __init__(self, bundle: str = CWD, config: str = "", error: str = "") -> None:
        self.bundle = bundle
        self.config = config
        self.error = error
        self.bad_int = ""  # crun: a flag whose value is no int (1.19+ refuse it)


def bundle_of(command: str, args: list[str]) -> tuple[str | None, str, str]:
    """(bundle or None for the working directory, refused, ambiguous) of a create/run's
    arguments: `refused` says why every grammar refuses the line, `ambiguous` why the
    wrapper cannot tell the bundle ("" each when not so)."""
    readings = {f"runc {v} {r}": runc_parse(command, args, v, r)
                for v in RUNC_COMMANDS for r in RUNC_REORDER}
    for version in CRUN_VERSIONS:
        readings[f"crun {version}"] = crun_parse(command, args, version)
    accepted = {k: r for k, r in readings.items() if not r.error}
    if not accepted:
        return None, readings["runc 1.2 own"].error, ""
    configs = {r.config for r in accepted.values()} - {"", "config.json"}
    if configs:
        return None, "", (f"crun's --config {sorted(configs)[0]}: the wrapper reads and edits "
                          "the bundle's config.json (drop --config)")
    bundles = {r.bundle for r in accepted.values()}
    if len(bundles) > 1:
        seen = ", ".join(f"{k}: {r.bundle or '.'}" for k, r in sorted(accepted.items()))
        return None, "", (f"runc and crun read the bundle of this command line differently "
                          f"({seen}): write each flag as --name value or --name=value, "
                          "before the container id")
    bundle = bundles.pop()
    return (bundle or None), "", ""


def runc_parse(command: str, args: list[str], version: str, reorder: str) -> Parsed:
    """The reading of a create/run's arguments by runc `version`'s flags and urfave/cli's
    `reorder` (module docstring)."""
    flags = RUNC_COMMANDS[version][command]
    words = _reorder(args, flags, reorder)
    out = Parsed()
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if len(word) < 2 or word[0] != "-":
            break
        split = go_flag(word)
        if split is None:
            return Parsed(error=f"bad flag syntax: {word}")
        name, given = split
        kind = flags.get(name)
        if kind is None:
            return Parsed(error=f"flag provided but not defined: -{name}")
        if kind == "bool":
            if given is not None and given not in GO_TRUE and given not in GO_FALSE:
                return Parsed(error=f'invalid boolean value "{given}" for -{name}')
            if name in ("help", "h") and (given is None or given in GO_TRUE):
                return Parsed(error="help")  # urfave prints the command's help
        else:
            if given is None:
                if i + 1 >= len(words):
                    return Parsed(error=f"flag needs an argument: -{name}")
                i += 1
                given = words[i]
            if kind == "int" and not _go_int(given):
                return Parsed(error=f'invalid value "{given}" for flag -{name}: parse error')
            if name in BUNDLE:
                out.bundle = given
        i += 1
    if len(words) - i != 1:
        return Parsed(error=f'"{command}" requires exactly 1 argument(s)')
    return out


def _reorder(args: list[str], flags: dict[str, str], style: str) -> list[str]:
    """urfave/cli v1's reorderArgs: flags (and the word after one) first, then the rest."""
    front: list[str] = []
    rest: list[str] = []
    want_value = False
    for i, arg in enumerate(args):
        if style == "any":  # urfave/cli 1.22.1
            if arg == "--":
                rest.extend(args[i:])
                break
            if want_value and not arg.startswith("-"):
                want_value = False
                front.append(arg)
                continue
            want_value = False
            if arg != "-" and arg.startswith("-"):
                front.append(arg)
                want_value = "=" not in arg
            else:
                rest.append(arg)
            continue
        own = _is_own_flag(arg, flags)  # urfave/cli 1.22.14 to 1.22.17
        if want_value and not own:
            want_value = False
            front.append(arg)
        elif arg == "--":
            rest = ["--", *rest, *args[i + 1:]]
            break
        elif own:
            front.append(arg)
            want_value = "=" not in arg
        else:
            rest.append(arg)
    return front + rest


def _is_own_flag(arg: str, flags: dict[str, str]) -> bool:
    """urfave's argIsFlag: `--x`/`-x` (at most two dashes removed) naming a flag of ours."""
    if arg in ("-", "--") or not arg.startswith("-"):
        return False
    if arg.startswith("--"):
        arg = arg.replace("-", "", 2)
    if arg.startswith("-"):
        arg = arg.replace("-", "", 1)
    return arg.split("=")[0] in flags


def _go_int(text: str) -> bool:
    """Whether strconv.ParseInt(text, 0, 64) accepts it (a sign, 0x/0o/0b, '_' between
    digits, a leading 0 for octal); the range is not checked."""
    body = text[1:] if text[:1] in "+-" else text
    if len(body) > 1 and body[0] == "0" and body[1] in "01234567_":  # Go's old octal form
        rest = body[1:]
        return (set(rest) <= set("01234567_") and "__" not in rest
                and not rest.endswith("_"))
    try:
        int(body, 0)
    except ValueError:
        return False
    return True


def crun_parse(command: str, args: list[str], version: str = CRUN_VERSIONS[-1]) -> Parsed:
    """crun `version`'s reading of a create/run's arguments (module docstring)."""
    table = CRUN_COMMANDS[command]
    shorts = {short: name for name, (short, _) in table.items() if short}
    out = Parsed()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if len(arg) < 2 or arg[0] != "-":
            break
        if arg.startswith("--"):
            i, error = _crun_long(out, table, args, i)
        else:
            i, error = _crun_short(out, table, shorts, args, i)
        if error:
            return Parsed(error=error)
    if len(args) - i != 1:
        return Parsed(error=f"`{command}` requires exactly 1 argument")
    if out.bad_int and version != CRUN_VERSIONS[0]:
        return Parsed(error=f"invalid value for `{out.bad_int}`")
    return out


def _crun_long(out: Parsed, table: dict[str, tuple[str, bool]], args: list[str],
               i: int) -> tuple[int, str]:
    name, eq, value = args[i][2:].partition("=")
    found = [name] if name in table else [n for n in table if n.startswith(name)]
    if len(found) != 1:
        return i + 1, f"option '--{name}' is {'ambiguous' if found else 'unrecognized'}"
    name = found[0]
    if not table[name][1]:
        if eq and name != "HANG":
            return i + 1, f"option '--{name}' doesn't allow an argument"
        return i + 1, ("help" if name in ("help", "usage") else "")
    if not eq:
        if i + 1 >= len(args):
            return i + 1, f"option '--{name}' requires an argument"
        i += 1
        value = args[i]
    _crun_value(out, name, value)
    return i + 1, ""


def _crun_short(out: Parsed, table: dict[str, tuple[str, bool]], shorts: dict[str, str],
                args: list[str], i: int) -> tuple[int, str]:
    letters = args[i][1:]
    for k, letter in enumerate(letters):
        name = shorts.get(letter)
        if name is None:
            return i + 1, f"invalid option -- '{letter}'"
        if not table[name][1]:
            if name == "help":
                return i + 1, "help"
            continue
        value = letters[k + 1:]
        if not value:
            if i + 1 >= len(args):
                return i + 1, f"option requires an argument -- '{letter}'"
            i += 1
            value = args[i]
        _crun_value(out, name, value)
        break
    return i + 1, ""


def _crun_value(out: Parsed, name: str, value: str) -> None:
    if name in CRUN_INTS and not _c_int(value):
        out.bad_int = out.bad_int or name
    if name == BUNDLE[0]:
        out.bundle = value
        if not value:
            out.error = "realpath `` failed"  # crun resolves the bundle: "" is an error
    elif name == CRUN_CONFIG[0]:
        out.config = value


def _c_int(text: str) -> bool:
    """Whether strtoll(text, &end, 10) reads all of `text` (leading blanks, a sign; "" is 0)."""
    body = text.lstrip(" \t\n\v\f\r")
    body = body[1:] if body[:1] in "+-" else body
    return body.isdigit() and body.isascii() if body else text == ""
