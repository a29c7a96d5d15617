"""`nvidia-ctk` drop-in: NVIDIA Container Toolkit 1.20.0's CLI grammar (urfave/cli) over
nvhook's own commands. Installed as `nvidia-ctk` by the package and `nvhook install`.

    nvidia-ctk [--debug|-d] [--quiet] [--config PATH] COMMAND ...
        hook ...                  the CDI hooks (nvhook.compat.cdihook)
        runtime configure ...     nvhook runtime configure (nvhook.admin.configure), 1.20's defaults
        cdi generate|list|transform root
                                  nvhook's CDI spec (nvhook.cdi), the spec dirs, a root transform
        config [--set K=V] [--in-place] | config default
                                  config.toml edited in place, nvhook's default file
        system create-dev-char-symlinks | create-device-nodes
        info                      (as NVIDIA's: the command's help)

`--version` prints `NVIDIA Container Toolkit CLI version 1.20.0` and nvhook's version on the
commit line. Log lines go to stderr in logrus' format (`time=... level=info msg=...`); a
failure is one `level=error` line and exit 1, an unknown command `No help topic for 'X'`
and exit 3, as NVIDIA's. Every 1.20 flag is accepted or refused by name (docs/nvidia-cli.md).
"""

from __future__ import annotations

import os
import sys

from nvhook.compat.nvctk.context import COMMANDS, PROG, Context
from nvhook.compat.urfave import BOOL, CliError, Flag, HelpRequested, Log, parse, usage

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    CommandMain = Callable[[list[str], Context], int]

SUMMARY = "Tools to configure the NVIDIA Container Toolkit (nvhook's drop-in)"
GLOBAL_FLAGS = (
    Flag("debug", BOOL, aliases=("d",), env=("NVIDIA_CTK_DEBUG",),
         help="Enable debug-level logging"),
    Flag("quiet", BOOL, env=("NVIDIA_CTK_QUIET",),
         help="Suppress all output except for errors; overrides --debug"),
    Flag("config", env=("NVIDIA_CTK_CONFIG",), help="Path to the config file"),
    Flag("version", BOOL, aliases=("v",), help="print the version"),
)


def _loader(name: str) -> CommandMain:
    if name == "hook":
        return _hook
    if name == "runtime":
        from nvhook.compat.nvctk.runtime_configure import main as runtime

        return runtime
    if name == "cdi":
        from nvhook.compat.nvctk.cdi import main as cdi

        return cdi
    if name == "config":
        from nvhook.compat.nvctk.config import main as config

        return config
    if name == "system":
        from nvhook.compat.nvctk.system import main as system

        return system
    return _info


def _hook(argv: list[str], ctx: Context) -> int:
    from nvhook.compat.cdihook.nvidia_cdi_hook import run_hook
    from nvhook.compat.cdihook.run import HookRun

    run = HookRun(ctx.log, cwd=ctx.cwd, stdin=ctx.stdin, environ=ctx.environ,
                  config_path=ctx.path(ctx.config_path) if ctx.config_path else None,
                  program=ctx.program, argv=ctx.argv, start=len(ctx.argv) - len(argv))
    return run_hook(argv, run, prog=f"{PROG} hook")


def _info(argv: list[str], ctx: Context) -> int:
    """NVIDIA's `info` has no action of its own: it shows its help (`nvhook info` is ours)."""
    try:  # noqa: SIM105 (no contextlib import for one call)
        parse(argv, (), command=f"{PROG} info", environ=ctx.environ)
    except HelpRequested:
        pass
    sys.stdout.write(usage(f"{PROG} info", COMMANDS["info"], ()))
    return 0


def main(argv: list[str], *, cwd: str | None = None, stdin: bytes | None = None,
         environ: Mapping[str, str] | None = None, program: str | None = None) -> int:
    """The drop-in's entry point (the launcher passes argv[1:], its original cwd and its own
    path: `nvidia-ctk hook` looks for it among the container's hooks)."""
    from nvhook.compat.cdihook.nvidia_cdi_hook import guarded, version_text
    from nvmount.log import install

    env = os.environ if environ is None else environ
    log = Log()
    previous = install(log)
    try:
        try:
            g = parse(argv, GLOBAL_FLAGS, command=PROG, environ=env, subcommands=True)
        except HelpRequested:
            sys.stdout.write(usage(PROG, SUMMARY, GLOBAL_FLAGS, list(COMMANDS.items())))
            return 0
        except CliError as err:
            log.error(str(err))
            return 1
        if g.boolean("version"):
            sys.stdout.write(version_text("NVIDIA Container Toolkit CLI"))
            return 0
        if not g.args:
            sys.stdout.write(usage(PROG, SUMMARY, GLOBAL_FLAGS, list(COMMANDS.items())))
            return 0
        name, rest = g.args[0], g.args[1:]
        if name in ("help", "h"):
            sys.stdout.write(usage(PROG, SUMMARY, GLOBAL_FLAGS, list(COMMANDS.items())))
            return 0
        if name not in COMMANDS:
            sys.stderr.write(f"No help topic for '{name}'\n")
            return 3
        debug = g.boolean("debug")
        log = Log(debug=debug, quiet=g.boolean("quiet"))
        install(log)
        ctx = Context(log, cwd=cwd, stdin=stdin, environ=env,
                      config_path=g.string("config") or None, debug=debug)
        ctx.program, ctx.argv = program, argv
        return guarded(lambda: _run(name, rest, ctx), log, debug)
    finally:
        install(previous)


def _run(name: str, rest: list[str], ctx: Context) -> int:
    """Hooks run in "/" (as the launcher left them); the other commands in the directory the
    user started from, so that relative paths mean what they meant there."""
    if name != "hook" and ctx.cwd:
        try:
            os.chdir(ctx.cwd)
        except OSError as err:
            raise CliError(f"cannot return to the working directory {ctx.cwd}: "
                           f"{err.strerror}") from err
    return _loader(name)(rest, ctx)


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main(sys.argv[1:]))
