"""`nvhook-runtime` (also installed as `nvidia-container-runtime`): a runc-compatible wrapper.

    nvhook-runtime [runc global flags] <command> [flags] [args]

Installed, it runs behind a POSIX sh launcher (`nvhook.launch.runtime_sh`) that execs the
low-level runtime itself for every call that cannot concern GPUs, so this module sees the
creates of containers that may want GPUs, `--version`/`--help`, unusual command lines, and
calls made while the launcher's facts are stale (`launched`; it then rewrites them,
`nvhook.launch.facts`).

It finds the low-level runtime (`nvidia-container-runtime.runtimes`, default runc then crun),
and for `create` and `run` first edits the bundle's config.json for GPU containers
(`nvhook.runtime.create`); then it execs the runtime with the same arguments and environment
(argv[0] = the runtime's path, as NVIDIA's does). Every other command (`state`, `start`,
`kill`, `delete`, ...) reads only the few config keys it needs (`settings`) and execs at once;
when the config cannot be loaded it still execs (with the runtimes of the last facts), so a
container can always be cleaned up. `--version` prints the wrapper's version, then the
runtime's.

Errors are one line on stderr and an `error` record in the runtime's `--log` file (known from
the command line before anything else is read, so a config error reaches it too: containerd and
Docker show that record); exit status 1. An error about the config file names the file and
what chose it (the launcher and its `nvhook install --config`, or NVIDIA_CTK_CONFIG_FILE_PATH).
The wrapper keeps its working directory (runc's default bundle) and its environment (the
runtime gets both unchanged).

Imports stay minimal on the path every call takes: argv, settings, lowlevel, log; the create
path imports the hook's decision code only for a config.json that may want GPUs.
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import ConfigError, NvhookError
from nvhook.launch.argv import parse_runtime_argv
from nvhook.launch.runtime_log import RuntimeLog

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.launch.argv import Invocation
    from nvhook.launch.settings import Settings

OCI_SPEC_VERSION = "1.2.1"


def version_lines() -> str:
    from nvhook import __version__

    return (f"nvhook-runtime version {__version__} (NVIDIA Container Runtime v1.17.8 "
            f"compatible)\nspec: {OCI_SPEC_VERSION}\n\n")


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None, *,
         recorded: str | None = None, facts: str | None = None) -> int:
    """Run the wrapper: returns only on an error (else the runtime replaces this process).
    `recorded` and `facts`: the launcher's config and facts file (`launched`)."""
    argv = list(sys.argv if argv is None else argv)
    environ = dict(os.environ) if environ is None else environ
    own = os.path.abspath(argv[0]) if argv and argv[0] else None
    inv = parse_runtime_argv(argv[1:])
    log = RuntimeLog("info", "", "" if inv.version else inv.log_file, inv.log_format,
                     debug=inv.debug)
    try:
        settings = _settings(inv, environ, recorded, own, facts, log)
        from nvhook.launch.lowlevel import find_runtime

        runtime = find_runtime(settings.runtimes, environ.get("PATH", ""), own)
        if inv.version:
            sys.stdout.write(version_lines())
            sys.stdout.flush()
        elif inv.creates and inv.ambiguous:
            return _fail(log, f"cannot tell the bundle of `{inv.command}`: {inv.ambiguous}")
        elif inv.creates:
            from nvhook.runtime.create import prepare_bundle

            bundle = inv.bundle if inv.bundle is not None else "."
            prepare_bundle(os.path.abspath(bundle), settings, log, environ,
                           os.path.dirname(own) if own else None)
        if facts and settings.path:
            from nvhook.launch.facts import refresh_facts

            refresh_facts(facts, settings, log)
        log.debug(f"exec {runtime} {' '.join(argv[1:])}")
        log.close()
        os.execve(runtime, [runtime, *argv[1:]], environ)
    except NvhookError as err:
        return _fail(log, str(err))
    except OSError as err:
        return _fail(log, f"could not exec runtime: {err.filename or ''}: {err.strerror}")
    except Exception as err:  # nvmount's errors (spec mode) and anything unforeseen
        from nvmount.errors import NvmountError

        if isinstance(err, NvmountError):
            return _fail(log, str(err))
        return _fail(log, f"internal error: {type(err).__name__}: {err} (please report it)")
    return 1  # pragma: no cover - execve does not return


def _settings(inv: Invocation, environ: dict[str, str], recorded: str | None,
              own: str | None, facts: str | None, log: RuntimeLog) -> Settings:
    """The config's settings. A create fails when the config cannot be loaded; every other
    command (state, start, kill, delete) goes on with the runtimes of the last facts written
    for the launcher, else the defaults: cleaning up never depends on the config."""
    from nvhook.launch.settings import Settings, load_settings

    try:
        settings = load_settings(environ, recorded, own or "")
    except ConfigError as err:
        if inv.creates:
            raise
        settings = Settings()
        if facts:
            from nvhook.launch.facts import read_runtimes

            settings.runtimes = read_runtimes(facts) or settings.runtimes
        log.warning(f"{err}; `{inv.command or '--version'}` goes on with the runtimes "
                    f"{', '.join(settings.runtimes)}")
        return settings
    log.configure(settings.log_level, "" if inv.version else settings.debug_file)
    return settings


def _fail(log: RuntimeLog, message: str) -> int:
    from nvhook.logs import one_line

    line = one_line(message)
    log.error(line)
    log.close()
    sys.stderr.write(f"nvhook-runtime: {line}\n" if not line.startswith("nvhook-runtime")
                     else line + "\n")
    return 1


def launched(args: list[str]) -> None:
    """The sh launcher's entry (`nvhook.launch.runtime_sh`): args are the launcher's path, the
    config it records ("" for none), its facts file, then the runtime's command line."""
    if len(args) < 3:
        sys.stderr.write("nvhook-runtime: run through its launcher (nvhook install)\n")
        os._exit(2)
    launcher, recorded, facts, *rest = args
    from nvhook.launch.pack import use_pack

    # a GPU create's modules from the pack `nvhook install` wrote, if it is current
    use_pack(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
             "create")
    rc = main([launcher, *rest], recorded=recorded or None, facts=facts or None)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # a short-lived process: no interpreter teardown


def entry() -> None:  # pragma: no cover - console script
    sys.exit(main())
