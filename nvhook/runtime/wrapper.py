"""`nvhook-runtime` (also installed as `nvidia-container-runtime`): a runc-compatible wrapper.

    nvhook-runtime [runc global flags] <command> [flags] [args]

It finds the low-level runtime (`nvidia-container-runtime.runtimes`, default runc then crun),
and for `create` and `run` first edits the bundle's config.json for GPU containers
(`nvhook.runtime.create`); then it execs the runtime with the same arguments and environment
(argv[0] = the runtime's path, as NVIDIA's does). Every other command (`state`, `start`,
`kill`, `delete`, ...) reads only the few config keys it needs (`settings`) and execs at once.
`--version` prints the wrapper's version, then the runtime's.

Errors are one line on stderr (and an `error` record in the runtime's `--log` file, where
containerd and Docker look for it); exit status 1. The wrapper keeps its working directory
(runc's default bundle) and its environment (the runtime gets both unchanged).

Imports stay minimal on the path every call takes: argv, settings, lowlevel, log; the create
path imports the hook's decision code only for a config.json that may want GPUs.
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import NvhookError
from nvhook.runtime.argv import parse_runtime_argv
from nvhook.runtime.log import RuntimeLog

OCI_SPEC_VERSION = "1.2.1"


def version_lines() -> str:
    from nvhook import __version__

    return (f"nvhook-runtime version {__version__} (NVIDIA Container Runtime v1.17.8 "
            f"compatible)\nspec: {OCI_SPEC_VERSION}\n\n")


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """Run the wrapper: returns only on an error (else the runtime replaces this process)."""
    argv = list(sys.argv if argv is None else argv)
    environ = dict(os.environ) if environ is None else environ
    own = os.path.abspath(argv[0]) if argv and argv[0] else None
    log = RuntimeLog()
    try:
        inv = parse_runtime_argv(argv[1:])
        from nvhook.runtime.settings import load_settings

        settings = load_settings(environ)
        log = RuntimeLog(settings.log_level, "" if inv.version else settings.debug_file,
                         "" if inv.version else inv.log_file, inv.log_format, debug=inv.debug)
        from nvhook.runtime.lowlevel import find_runtime

        runtime = find_runtime(settings.runtimes, environ.get("PATH", ""), own)
        if inv.version:
            sys.stdout.write(version_lines())
            sys.stdout.flush()
        elif inv.creates:
            from nvhook.runtime.create import prepare_bundle

            bundle = inv.bundle if inv.bundle is not None else "."
            prepare_bundle(os.path.abspath(bundle), settings, log, environ,
                           os.path.dirname(own) if own else None)
        log.debug(f"exec {runtime} {' '.join(argv[1:])}")
        log.close()
        os.execve(runtime, [runtime, *argv[1:]], environ)
    except ValueError as err:  # the command line (a -b without its value)
        return _fail(log, f"nvhook-runtime: {err}")
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


def _fail(log: RuntimeLog, message: str) -> int:
    from nvhook.logs import one_line

    line = one_line(message)
    log.error(line)
    log.close()
    sys.stderr.write(f"nvhook-runtime: {line}\n" if not line.startswith("nvhook-runtime")
                     else line + "\n")
    return 1


def entry() -> None:  # pragma: no cover - console script
    sys.exit(main())
