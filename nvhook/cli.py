"""The command line: `nvhook [global flags] <command> [args]`. Stage: entry point.

The only module that reads argv, configures logging and turns errors into exit codes:
0 success (or "not a GPU container"), 1 an error (one line on stderr; a traceback only with
`--debug`), 2 a usage error (NVIDIA's usage text on stderr).

Flags use Go's `flag` syntax as NVIDIA's hook does (`-config PATH`, `--config=PATH`, `-debug`,
`-debug=false`) and are also accepted after the command. Commands are imported lazily, so the
hook's path (`prestart`) pays for nothing else; no argparse on that path.

Process safety (the hook runs as host root with its cwd in an untrusted bundle): `main` first
re-executes the interpreter once without dynamic-loader variables (LD_PRELOAD, LD_LIBRARY_PATH,
...), then records the working directory, changes to "/" and sets umask 022. The launcher that
`nvhook install` writes (`#!/usr/bin/python3 -IS`) does the same before importing anything
from nvhook. Code preloaded into the first process image cannot be prevented by any interpreter:
the hook entries nvhook writes always carry an explicit `env`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    import logging

# Variables that make the dynamic loader or libc load code or data chosen by whoever set them
# (glibc's list of variables it drops for setuid programs, plus every LD_*).
LOADER_VARIABLES = frozenset((
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS",
))  # fmt: skip
REEXEC_XOPTION = "nvhook_reexec"  # `-X nvhook_reexec`: set on the re-executed interpreter

HOOK_COMMANDS = ("prestart", "poststart", "poststop")
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "prestart": ("nvhook.prestart", "main", "run the prestart hook"),
    "poststart": ("nvhook.prestart", "main", "no-op"),
    "poststop": ("nvhook.prestart", "main", "no-op"),
    "info": ("nvhook.driver_cmds", "main_info", "show the driver and GPUs nvhook sees"),
    "list": ("nvhook.driver_cmds", "main_list", "list the host files a container could get"),
    "sim": ("nvhook.sim.cmd", "main", "create a simulated driver (and its prestart step)"),
    "demo": ("nvhook.demo.cmd", "main", "start a GPU container under runc, print its nvidia-smi"),
    "install": ("nvhook.install_cmd", "main", "write the isolated hook launchers"),
}
_GLOBAL_FLAGS = {"config": True, "debug": False, "version": False}  # name -> takes a value
_LEADING_FLAGS = {**_GLOBAL_FLAGS, "dry-run": False}  # -dry-run may precede `prestart`
_HELP_FLAGS = frozenset(("h", "help"))
_GO_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
_GO_FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))


@dataclass(frozen=True, slots=True)
class GlobalOptions:
    """Global flags handed to every command. `cwd` is the directory the process started in
    (runc: the bundle); hook commands run in "/", so resolve relative user paths against it."""

    config_path: str | None = None
    debug: bool = False
    cwd: str | None = None


class _Help(Exception):
    """-h / -help: print the usage and exit 0 (as Go's flag package does)."""


def is_loader_variable(name: str) -> bool:
    return name.startswith("LD_") or name in LOADER_VARIABLES


def usage_text(prog: str) -> str:
    """NVIDIA's usage text (hook-spec 1.1) with nvhook's extra flag and commands."""
    lines = [
        f"Usage of {prog}:",
        "  -config string",
        "    \tconfiguration file",
        "  -debug",
        "    \tenable debug output",
        "  -dry-run",
        "    \tprestart: print the decision as JSON and change nothing",
        "  -version",
        "    \tenable version output",
        "",
        "Commands:",
    ]
    for name, (_, _, text) in _COMMANDS.items():
        lines += [f"  {name}", f"        {text}"]
    return "\n".join(lines) + "\n"


def version_text() -> str:
    from nvhook import __version__

    return f"nvhook version {__version__} (NVIDIA Container Runtime Hook v1.17.8 compatible)"


def go_bool(value: str, flag: str) -> bool:
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    from nvhook.errors import UsageError

    raise UsageError(f'invalid boolean value "{value}" for -{flag}: parse error')


def split_flag(arg: str) -> tuple[str, str | None] | None:
    """(name, value or None) of a flag argument, None for a positional one (Go's syntax)."""
    if len(arg) < 2 or arg[0] != "-":
        return None
    body = arg[2:] if arg[1] == "-" else arg[1:]
    if not body or body[0] in "-=":
        from nvhook.errors import UsageError

        raise UsageError(f"bad flag syntax: {arg}")
    name, eq, value = body.partition("=")
    return name, (value if eq else None)


def _flag_or_none(arg: str, *, passthrough: bool) -> tuple[str, str | None] | None:
    """split_flag; in pass-through mode malformed flags are left to the command's parser."""
    from nvhook.errors import UsageError

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
    from nvhook.errors import UsageError

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
            raise _Help()
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


def _reexec_without_loader_variables() -> None:
    """execve the same interpreter and argv once, minus the loader variables, if any are set."""
    found = [name for name in os.environ if is_loader_variable(name)]
    if not found:
        return
    if REEXEC_XOPTION in sys._xoptions:  # already re-executed: never loop
        for name in found:
            del os.environ[name]
        return
    env = {k: v for k, v in os.environ.items() if not is_loader_variable(k)}
    argv = [sys.executable, "-X", REEXEC_XOPTION, *sys.orig_argv[1:]]
    os.execve(sys.executable, argv, env)


def _enter_root_directory() -> str | None:
    """Record the working directory, then chdir("/"); None if the directory is gone."""
    try:
        cwd: str | None = os.getcwd()
    except OSError:
        cwd = None
    os.chdir("/")
    return cwd


def main(argv: list[str] | None = None, *, cwd: str | None = None) -> int:
    """Console entry point. `argv` defaults to sys.argv[1:]. `cwd` is given by callers that
    already recorded their working directory and moved to "/" (the launcher; "" = unknown);
    otherwise main records it and changes to "/" itself. With argv None (a process entry
    point) dynamic-loader variables trigger one re-exec of the interpreter without them."""
    if cwd is None:
        if argv is None:
            _reexec_without_loader_variables()
        cwd = _enter_root_directory()
    cwd = cwd or None
    os.umask(0o022)
    args = sys.argv[1:] if argv is None else list(argv)
    prog = sys.argv[0] if sys.argv and sys.argv[0] else "nvhook"
    debug = False
    try:
        command, rest, opts, show_version = _parse_command_line(args, cwd)
        debug = opts.debug
        if show_version:
            print(version_text())
            return 0
        if command is None:
            sys.stderr.write(usage_text(prog))
            return 2
        configure_logging(debug)
        if REEXEC_XOPTION in sys._xoptions:
            _log().debug("re-executed without dynamic-loader variables")
        return _dispatch(command, rest, opts)
    except _Help:
        sys.stderr.write(usage_text(prog))
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # the one place that turns errors into exit codes
        return report_error(err, debug=debug, prog=prog)


def _parse_command_line(
    args: list[str], cwd: str | None
) -> tuple[str | None, list[str], GlobalOptions, bool]:
    """(command, its arguments, global options, --version given)."""
    from nvhook.errors import UsageError

    values, rest = take_flags(args, _LEADING_FLAGS, leading=True, strict=True)
    command = rest[0] if rest else None
    if command is not None:
        later, rest = take_flags(rest[1:], _GLOBAL_FLAGS, leading=False, strict=False)
        values.update(later)
    show_version = bool(values.get("version", False))
    if command is not None and command not in _COMMANDS and not show_version:
        raise UsageError(f"command provided but not defined: {command}")
    if values.get("dry-run"):
        if command != "prestart" and not show_version:
            raise UsageError("flag -dry-run applies to the prestart command only")
        rest = ["--dry-run", *rest]
    config = values.get("config")
    config_path = str(config) if config else None
    if config_path and cwd and not config_path.startswith("/"):
        config_path = os.path.join(cwd, config_path)
    opts = GlobalOptions(config_path=config_path, debug=bool(values.get("debug")), cwd=cwd)
    return command, rest, opts, show_version


def _dispatch(command: str, rest: list[str], opts: GlobalOptions) -> int:
    from nvhook.errors import NvhookError

    module_name, function_name, _ = _COMMANDS[command]
    try:
        module = __import__(module_name, fromlist=[function_name])
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise
        raise NvhookError(
            f"command {command}: module {module_name} is not part of this installation "
            "(reinstall nvhook, or use a version that has this command)"
        ) from err
    function = getattr(module, function_name, None)
    if function is None:
        raise NvhookError(
            f"command {command}: {module_name} has no {function_name} (reinstall nvhook)"
        )
    if command in HOOK_COMMANDS:
        return int(function([command, *rest], opts))
    if opts.cwd is not None:  # only the hook commands run in "/"
        try:
            os.chdir(opts.cwd)
        except OSError as err:
            raise NvhookError(
                f"command {command}: cannot return to the working directory {opts.cwd}: "
                f"{err.strerror}"
            ) from err
    return int(function(rest, opts))


def _one_line(message: str) -> str:
    """One printable line: newlines and other control characters (terminal escapes from a
    hostile image's env or paths) are shown escaped, never sent to the terminal."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def report_error(err: BaseException, *, debug: bool, prog: str = "nvhook") -> int:
    """Print `err` as one line on stderr (after a traceback with --debug); its exit code."""
    from nvhook.errors import NvhookError, UsageError

    known: tuple[type[BaseException], ...] = (NvhookError,)
    try:
        from nvmount.errors import NvmountError

        known = (NvhookError, NvmountError)
    except ImportError:  # pragma: no cover - nvmount is part of the same distribution
        pass
    if debug:
        import traceback

        traceback.print_exception(err, file=sys.stderr)
    if isinstance(err, UsageError):
        sys.stderr.write(_one_line(str(err)) + "\n" + usage_text(prog))
        return 2
    if isinstance(err, known):
        sys.stderr.write(_one_line(str(err)) + "\n")
        return int(getattr(err, "exit_code", 1))
    hint = "" if debug else "; rerun with --debug for a traceback"
    sys.stderr.write(
        _one_line(f"internal error: {type(err).__name__}: {err} (please report it{hint})") + "\n"
    )
    return 1


def _log() -> logging.Logger:
    import logging

    return logging.getLogger("nvhook.cli")


def configure_logging(debug: bool) -> None:
    """stderr: warnings (everything with --debug), message only; no other handlers yet."""
    import logging

    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(logging.DEBUG if debug else logging.WARNING)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)


_STDERR_ALIASES = frozenset(("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"))


def attach_log_file(path: str) -> None:
    """Also log everything (debug and up) to `path`, appending: `nvidia-container-cli.debug`.

    A file that cannot be opened is a warning, not a failed container start.
    """
    import logging

    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    if path in _STDERR_ALIASES:
        for handler in root.handlers:
            handler.setLevel(logging.DEBUG)
        return
    try:
        handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    except OSError as err:
        _log().warning("open debug log %s: %s (check nvidia-container-cli.debug)", path,
                       err.strerror)
        return
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    )
    handler.setLevel(logging.DEBUG)
    root.addHandler(handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
