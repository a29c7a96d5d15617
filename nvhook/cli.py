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

from nvhook.commands import COMMANDS, HOOK_COMMANDS
from nvhook.flags import GlobalOptions, HelpRequested, take_flags
from nvhook.launch.isolation import (
    REEXEC_XOPTION,
    enter_root_directory,
    reexec_without_loader_variables,
)
from nvhook.logs import configure_hook_logging, configure_logging, one_line
from nvmount.log import get_logger, install, installed

_GLOBAL_FLAGS = {"config": True, "debug": False, "version": False}  # name -> takes a value
_LEADING_FLAGS = {**_GLOBAL_FLAGS, "dry-run": False}  # -dry-run may precede `prestart`


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
    for name, command in COMMANDS.items():
        lines += [f"  {name}", f"        {command.help}"]
    return "\n".join(lines) + "\n"


def version_text() -> str:
    from nvhook import __version__

    return f"nvhook version {__version__} (NVIDIA Container Runtime Hook v1.17.8 compatible)"


def main(argv: list[str] | None = None, *, cwd: str | None = None,
         stdin: bytes | None = None) -> int:
    """Console entry point. `argv` defaults to sys.argv[1:]. `cwd` is given by callers that
    already recorded their working directory and moved to "/" (the launcher; "" = unknown);
    otherwise main records it and changes to "/" itself. With argv None (a process entry
    point) dynamic-loader variables trigger one re-exec of the interpreter without them."""
    if cwd is None:
        if argv is None:
            reexec_without_loader_variables()
        cwd = enter_root_directory()
    cwd = cwd or None
    os.umask(0o022)
    args = sys.argv[1:] if argv is None else list(argv)
    prog = sys.argv[0] if sys.argv and sys.argv[0] else "nvhook"
    debug = False
    previous = installed()
    try:
        command, rest, opts, show_version = _parse_command_line(args, cwd, stdin)
        debug = opts.debug
        if show_version:
            print(version_text())
            return 0
        if command is None:
            sys.stderr.write(usage_text(prog))
            return 2
        if command in HOOK_COMMANDS or command == "info" or _is_cdi_hook(command, rest):
            configure_hook_logging(debug)
        else:
            configure_logging(debug)
        if REEXEC_XOPTION in sys._xoptions:
            get_logger(__name__).debug("re-executed without dynamic-loader variables")
        return _dispatch(command, rest, opts)
    except HelpRequested:
        sys.stderr.write(usage_text(prog))
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # the one place that turns errors into exit codes
        return report_error(err, debug=debug, prog=prog)
    finally:
        install(previous)  # in-process callers (tests) get their logging back


def _parse_command_line(
    args: list[str], cwd: str | None, stdin: bytes | None = None
) -> tuple[str | None, list[str], GlobalOptions, bool]:
    """(command, its arguments, global options, --version given)."""
    from nvhook.errors import UsageError

    values, rest = take_flags(args, _LEADING_FLAGS, leading=True, strict=True)
    command = rest[0] if rest else None
    if command is not None:
        later, rest = take_flags(rest[1:], _GLOBAL_FLAGS, leading=False, strict=False)
        values.update(later)
    show_version = bool(values.get("version", False))
    if command is not None and command not in COMMANDS and not show_version:
        raise UsageError(f"command provided but not defined: {command}")
    if values.get("dry-run"):
        if command != "prestart" and not show_version:
            raise UsageError("flag -dry-run applies to the prestart command only")
        rest = ["--dry-run", *rest]
    config = values.get("config")
    config_path = str(config) if config else None
    if config_path and cwd and not config_path.startswith("/"):
        config_path = os.path.join(cwd, config_path)
    opts = GlobalOptions(config_path=config_path, debug=bool(values.get("debug")), cwd=cwd,
                         stdin=stdin)
    return command, rest, opts, show_version


def _dispatch(command: str, rest: list[str], opts: GlobalOptions) -> int:
    from nvhook.errors import NvhookError

    try:
        function = COMMANDS[command].load()
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("nvhook"):
            raise
        if (err.name or "").startswith("nvhook.dev"):
            raise NvhookError(
                f"command {command}: the development tools (nvhook.dev: the simulated driver "
                "and the demo) are not installed with the package; run it from a source "
                "checkout (bash packaging/setup.sh) or a pip install of nvhook") from err
        raise NvhookError(
            f"command {command}: module {err.name} is not part of this installation "
            "(reinstall nvhook, or use a version that has this command)"
        ) from err
    if command in HOOK_COMMANDS:
        return int(function([command, *rest], opts))
    if _is_cdi_hook(command, rest):  # a CDI spec's hook: the hook's lean path, in "/"
        return int(function(rest, opts))
    if opts.cwd is not None:  # only the hook commands run in "/"
        try:
            os.chdir(opts.cwd)
        except OSError as err:
            raise NvhookError(
                f"command {command}: cannot return to the working directory {opts.cwd}: "
                f"{err.strerror}"
            ) from err
    return int(function(rest, opts))


def _is_cdi_hook(command: str, rest: list[str]) -> bool:
    """`nvhook cdi hook ...`: run by the OCI runtime like a prestart hook."""
    return command == "cdi" and rest[:1] == ["hook"]


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

        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    if isinstance(err, UsageError):
        sys.stderr.write(one_line(str(err)) + "\n" + usage_text(prog))
        return 2
    if isinstance(err, known):
        sys.stderr.write(one_line(str(err)) + "\n")
        return int(getattr(err, "exit_code", 1))
    hint = "" if debug else "; rerun with --debug for a traceback"
    sys.stderr.write(
        one_line(f"internal error: {type(err).__name__}: {err} (please report it{hint})") + "\n"
    )
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
