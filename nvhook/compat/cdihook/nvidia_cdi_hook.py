"""`nvidia-cdi-hook` and `nvidia-ctk hook`: NVIDIA 1.20's hook grammar (urfave/cli), each hook
done by nvhook (`nvhook.compat.cdihook.actions`). Installed as `nvidia-cdi-hook` by the
package and `nvhook install`; `nvidia-ctk hook ...` comes here too.

    nvidia-cdi-hook [--debug|-d] [--quiet] HOOK [FLAGS]
    nvidia-ctk [--debug] [--quiet] [--config PATH] hook HOOK [FLAGS]

Hooks: create-symlinks, update-ldcache, enable-cuda-compat,
disable-device-node-modification, update-application-profile, apply-cuda-memory-limits
(NVIDIA's, expected in 1.21: `nvhook.hook.memlimits`), chmod (deprecated), noop.
As NVIDIA's: an unknown hook (one a newer or older spec names) logs `Unsupported CDI hook:
NAME` and exits 0, no hook at all `No CDI hook specified`; an unknown flag of a known hook
is an error (exit 1); errors are one logrus-style line (`level=error msg=...`), exit 1.
`--debug` (or NVIDIA_CTK_DEBUG / NVIDIA_CDI_DEBUG) shows the engine's debug records.

The OCI state comes on stdin (or from the file of the hidden `--container-spec`); the
container is found as `nvhook.compat.cdihook.target` says, config.toml (for `[nvhook]
proc-root`, `sim-procfs`, `ldconfig-required`) is read only by the hooks that need it.
"""

from __future__ import annotations

import os
import sys

from nvhook.compat.cdihook.run import HookRun
from nvhook.compat.urfave import BOOL, SLICE, CliError, Flag, HelpRequested, Log, parse, usage

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from nvhook.compat.urfave import Parsed

NVIDIA_VERSION = "1.20.0"
PROG = "nvidia-cdi-hook"
_SPEC = Flag("container-spec", help="the OCI state's file ('' or '-': stdin; for testing)")
HOOKS: dict[str, tuple[tuple[Flag, ...], str, str]] = {
    "update-ldcache": ((
        Flag("folder", SLICE, help="a folder to add to the container's ld.so.cache"),
        Flag("ldconfig-path", default="/sbin/ldconfig", help="the host's ldconfig"), _SPEC),
        "update_ldcache", "Update ldcache in a container by running ldconfig"),
    "create-symlinks": ((
        Flag("link", SLICE, help="a link to create, as target::link"), _SPEC),
        "create_symlinks", "A hook to create symlinks in the container."),
    "chmod": ((
        Flag("path", SLICE, help="a path to apply the mode to"),
        Flag("mode", help="the file mode (octal)"), _SPEC),
        "chmod", "Set the permissions of folders in the container (deprecated)"),
    "enable-cuda-compat": ((
        Flag("host-driver-version", help="the host driver version"),
        Flag("host-cuda-version", help="the CUDA version of the host driver"),
        Flag("cuda-compat-container-root", default="/usr/local/cuda/compat",
             help="the folder of the CUDA compat libraries in the container"), _SPEC),
        "enable_cuda_compat", "Add the CUDA compat libraries to the ldconfig search path"),
    "disable-device-node-modification": (
        (_SPEC,), "disable_device_node_modification",
        "The container's /proc/driver/nvidia/params says ModifyDeviceFiles: 0"),
    "update-application-profile": (
        (_SPEC,), "update_application_profile",
        "EGLVisibleDGPUDevices restricted to the container's GPUs"),
    "apply-cuda-memory-limits": ((
        Flag("driver-root", help="the driver root (its libnvidia-ml.so.1)"),
        Flag("gpu-id", SLICE, help="the UUID of a GPU to limit"), _SPEC),
        "apply_cuda_memory_limits",
        "Set the soft and hard limits of CUDA memory usage on a GPU device in the container."),
    "noop": ((), "", "performs no actions"),
}
GLOBAL_FLAGS = (
    Flag("debug", BOOL, aliases=("d",), env=("NVIDIA_CTK_DEBUG", "NVIDIA_CDI_DEBUG"),
         help="Enable debug-level logging"),
    Flag("quiet", BOOL, env=("NVIDIA_CTK_QUIET", "NVIDIA_CDI_QUIET"),
         help="Suppress all output except for errors; overrides --debug"),
    Flag("version", BOOL, aliases=("v",), help="print the version"),
)


def hooks_usage(prog: str) -> str:
    return usage(prog, "Command to structure files for usage inside a container, called as "
                 "hooks from a container runtime, defined in a CDI yaml file (nvhook)",
                 GLOBAL_FLAGS, [(n, h[2]) for n, h in HOOKS.items() if n != "noop"])


def run_hook(argv: list[str], run: HookRun, *, prog: str) -> int:
    """`argv` = [HOOK, its flags...]: run it (unknown: a warning, exit 0)."""
    if not argv:
        run.log.warning("No CDI hook specified")
        return 0
    name, entry = argv[0], HOOKS.get(argv[0])
    if name in ("help", "h"):
        sys.stdout.write(hooks_usage(prog))
        return 0
    if entry is None:
        run.log.warning(f"Unsupported CDI hook: {name}")
        return 0
    flags, function, summary = entry
    try:
        parsed = parse(argv[1:], flags, command=f"{prog} {name}", environ=run.environ)
    except HelpRequested:
        sys.stdout.write(usage(f"{prog} {name}", summary, flags))
        return 0
    if function:
        from nvhook.compat.cdihook.batch import run_group

        try:
            run_group(run, function, parsed, lambda words: parse_hook(words, run, prog))
        finally:
            run.close()
    return 0


def parse_hook(words: list[str], run: HookRun, prog: str) -> tuple[str, Parsed] | None:
    """(hook function, flags) of another hook's words as this program would run them ("" for
    noop); None for an unknown hook, flags that do not parse, or one that reads its state
    from a file (`nvhook.compat.cdihook.batch`)."""
    entry = HOOKS.get(words[0])
    if entry is None:
        return None
    try:
        parsed = parse(words[1:], entry[0], command=f"{prog} {words[0]}", environ=run.environ)
    except (CliError, HelpRequested):
        return None
    return None if "container-spec" in parsed.given else (entry[1], parsed)


def unknown_flag_is_fine(err: CliError, argv: list[str]) -> bool:
    """NVIDIA's root: an undefined flag before an unknown hook (or none) is a warning."""
    if not str(err).startswith("flag provided but not defined"):
        return False
    words = [a for a in argv if not a.startswith("-")]
    return not words or words[0] not in HOOKS


def main(argv: list[str], *, cwd: str | None = None, stdin: bytes | None = None,
         environ: Mapping[str, str] | None = None, program: str | None = None) -> int:
    """The nvidia-cdi-hook drop-in (the launcher passes argv[1:], its original cwd and its
    own path, which `batch` looks for among the container's hooks)."""
    from nvmount.log import install

    env = os.environ if environ is None else environ
    log = Log()
    previous = install(log)
    try:
        try:
            g = parse(argv, GLOBAL_FLAGS, command=PROG, environ=env, subcommands=True)
        except HelpRequested:
            sys.stdout.write(hooks_usage(PROG))
            return 0
        except CliError as err:
            if unknown_flag_is_fine(err, argv):
                words = [a for a in argv if not a.startswith("-")]
                log.warning(f"Unsupported CDI hook: {words[0]}" if words else
                            "No CDI hook specified")
                return 0
            log.error(str(err))
            return 1
        if g.boolean("version"):
            sys.stdout.write(version_text("NVIDIA CDI Hook"))
            return 0
        log = Log(debug=g.boolean("debug"), quiet=g.boolean("quiet"))
        install(log)
        run = HookRun(log, cwd=cwd, stdin=stdin, environ=env, program=program, argv=argv,
                      start=len(argv) - len(g.args))
        return guarded(lambda: run_hook(g.args, run, prog=PROG), log, g.boolean("debug"))
    finally:
        install(previous)


def guarded(action: Callable[[], int], log: Log, debug: bool) -> int:
    """Run `action`; an error becomes one logrus-style line and exit 1."""
    from nvhook.errors import NvhookError
    from nvmount.errors import NvmountError

    try:
        return action()
    except (NvhookError, NvmountError) as err:
        from nvhook.logs import one_line

        if debug:
            import traceback

            traceback.print_exc()
        log.error(one_line(str(err)))
        return 1
    except OSError as err:
        from nvhook.logs import one_line

        log.error(one_line(f"{err.filename or ''}: {err.strerror or err}".lstrip(": ")))
        return 1
    except Exception as err:  # the one place that turns unexpected errors into exit codes
        import traceback

        from nvhook.logs import one_line

        if debug:
            traceback.print_exc()
        log.error(one_line(f"internal error: {type(err).__name__}: {err} (please report it"
                           f"{'' if debug else '; rerun with --debug for a traceback'})"))
        return 1


def version_text(name: str) -> str:
    from nvhook import __version__

    return (f"{name} version {NVIDIA_VERSION}\n"
            f"commit: nvhook {__version__} (nvhook's drop-in, not NVIDIA's binary)\n")


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main(sys.argv[1:]))
