"""`nvhook install`: write the launchers runtimes run: the hook, the runtime wrapper and the
nvidia-container-cli drop-in. Stage: CLI command.

A launcher is a small Python script run by the system interpreter in isolated mode without the
site module (`#!/usr/bin/python3 -IS`; a shebang passes one argument, so `-I -S` is written as
`-IS`); what each kind does before calling nvhook is in `nvhook.launch.write`.

    nvhook install [--prefix DIR] [--name NAME ...] [--runtime-name NAME ...]
                   [--cli-name NAME ...] [--ctk-name NAME ...] [--cdi-hook-name NAME ...]
                   [--config PATH] [--python PATH] [--force]
                   [--print [hook|cli|runtime|ctk|cdihook]]
    nvhook install --uninstall [--prefix DIR] [--name NAME ...] [...]

`--prefix` is the directory the launchers are written to (default /usr/local/bin). Default
names: the hook `nvidia-container-runtime-hook` (the name Docker's `--gpus` looks up on its
PATH) and `nvhook-hook`; the wrapper `nvidia-container-runtime` and `nvhook-runtime`; the CLI
`nvidia-container-cli` (the name containerd's `--gpus`, nerdctl, enroot and Apptainer run);
`nvidia-ctk` and `nvidia-cdi-hook` (NVIDIA 1.20's commands: install guides, operators and the
hooks of NVIDIA-written CDI specs call them).
Naming launchers of one kind writes only the named ones (`--name a` writes only the hook `a`).
`--config PATH` records a config file the launchers use unless NVIDIA_CTK_CONFIG_FILE_PATH is
set. Re-run after moving or upgrading the installation: a launcher that cannot import nvhook
says so in one line and exits 127. The next steps (which runtime to configure and restart)
are printed on stderr. `--uninstall` removes the launchers (the named ones, else every default
name) that are nvhook's; other files of those names are left alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from nvhook.errors import NvhookError
from nvhook.launch.write import DEFAULT_NAMES as DEFAULT_LAUNCHERS
from nvhook.launch.write import KINDS, MARKER

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.flags import GlobalOptions

DEFAULT_PREFIX = "/usr/local/bin"
DEFAULT_NAMES = DEFAULT_LAUNCHERS["hook"]
DEFAULT_PYTHON = "/usr/bin/python3"
# Importable names nvhook needs at hook time: itself and its runtime dependencies.
_MODULES = ("nvhook", "nvmount", "prctl")

def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="nvhook install",
        description="write the isolated launchers: hook, runtime wrapper, nvidia-container-cli, "
                    "nvidia-ctk, nvidia-cdi-hook")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX,
                        help=f"directory to write the launchers to (default {DEFAULT_PREFIX})")
    for flag, kind in (("--name", "hook"), ("--runtime-name", "runtime"), ("--cli-name", "cli"),
                       ("--ctk-name", "ctk"), ("--cdi-hook-name", "cdihook")):
        parser.add_argument(flag, action="append", dest=f"{kind}_names", metavar="NAME",
                            help=f"{kind} launcher file name; repeatable (default: "
                                 + ", ".join(DEFAULT_LAUNCHERS[kind]) + ")")
    parser.add_argument("--python", default=DEFAULT_PYTHON,
                        help=f"interpreter of the launcher (default {DEFAULT_PYTHON})")
    parser.add_argument("--force", action="store_true",
                        help="replace files that are not nvhook launchers")
    parser.add_argument("--print", nargs="?", const="hook", choices=KINDS, dest="print_kind",
                        help="print a launcher (default: the hook) instead of writing it")
    parser.add_argument("--uninstall", action="store_true",
                        help="remove nvhook's launchers (the named ones, else the defaults)")
    return parser.parse_args(argv)  # fmt: skip


def wanted_launchers(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(kind, name) to write: the named ones when any name is given, else every default."""
    named = {kind: getattr(args, f"{kind}_names") or () for kind in KINDS}
    if not any(named.values()):
        named = dict(DEFAULT_LAUNCHERS)
    return [(kind, name) for kind in KINDS for name in named[kind]]


def main(argv: list[str], opts: GlobalOptions) -> int:
    args = _parse(argv)
    if args.uninstall:
        return uninstall(_absolute(args.prefix, opts.cwd), wanted_launchers(args))
    python = _absolute(args.python, opts.cwd)
    _check_interpreter(python)
    # `--config PATH` is nvhook's global flag (taken from anywhere on the command line)
    config = _absolute(opts.config_path, opts.cwd) if opts.config_path else None
    if args.print_kind:
        sys.stdout.write(render_launcher(python, import_paths(), args.print_kind, config))
        return 0
    prefix = _absolute(args.prefix, opts.cwd)
    paths = import_paths()
    check_code(python, paths)
    for kind, name in wanted_launchers(args):
        if not name or "/" in name or name in (".", ".."):
            raise NvhookError(f"install launcher {name!r}: not a file name (use --name NAME)")
        path = os.path.join(prefix, name)
        write_launcher(path, render_launcher(python, paths, kind, config), force=args.force)
        verify_launcher(path, kind)
        print(path)
    kinds = {kind for kind, _ in wanted_launchers(args)}
    if "runtime" in kinds:
        from nvhook.launch.facts import prime_facts

        prime_facts(config)  # the runtime launcher's first call needs no interpreter
    if kinds & {"runtime", "hook"}:
        write_pack(python)  # the GPU create's and the GPU prestart's modules
    from nvhook.admin.configure.hints import install_hint

    sys.stderr.write(install_hint(prefix))
    return 0


def uninstall(prefix: str, launchers: list[tuple[str, str]]) -> int:
    """Remove the nvhook launchers among `launchers` in `prefix`; print each removed path."""
    for _, name in launchers:
        path = os.path.join(prefix, name)
        try:
            with open(path, encoding="utf-8", errors="replace") as stream:
                ours = MARKER in stream.read(4096)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise NvhookError(f"uninstall launcher {path}: {err.strerror}") from err
        if not ours:
            sys.stderr.write(f"nvhook install: leaving {path}: not an nvhook launcher\n")
            continue
        try:
            os.unlink(path)
        except OSError as err:
            raise NvhookError(f"uninstall launcher {path}: {err.strerror}") from err
        print(path)
    sys.stderr.write("nvhook install: a runtime configured with `nvhook runtime configure` "
                     "still names these launchers: undo that configuration too\n")
    return 0


def _absolute(path: str, cwd: str | None) -> str:
    return os.path.normpath(os.path.join(cwd or os.getcwd(), path))


def write_pack(python: str) -> None:
    """The GPU create's and the GPU prestart's modules in one file (`nvhook.launch.pack`),
    compiled by the launchers' interpreter; a failure costs only time, so it is a warning."""
    import subprocess

    from nvhook.launch import pack

    source = os.path.realpath(pack.__file__)
    base = os.path.dirname(os.path.dirname(os.path.dirname(source)))  # holds nvhook/
    proc = subprocess.run([python, "-IS", source, base],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        sys.stderr.write(f"nvhook install: warning: the create pack was not written ({last}); "
                         "GPU creates and prestarts import module by module\n")


def import_paths(modules: tuple[str, ...] = _MODULES) -> list[str]:
    """The directories `modules` are imported from in this interpreter, in order, unique."""
    import importlib.util

    paths: list[str] = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise NvhookError(
                f"install launcher: module {name} is not importable here (install nvhook with "
                "its dependencies, e.g. bash packaging/setup.sh)"
            )
        origin = os.path.realpath(spec.origin)
        directory = os.path.dirname(origin)
        if spec.submodule_search_locations is not None:  # a package: its parent directory
            directory = os.path.dirname(directory)
        if directory not in paths:
            paths.append(directory)
    return paths


def check_code(python: str, paths: list[str], modules: tuple[str, ...] = _MODULES) -> None:
    """Root runs the launchers: the interpreter and every file they import (the `modules`
    found in `paths`, their packages' trees, their byte-code caches) must be trusted
    (`nvmount.fs.trusted`: root's, writable by no one else, in directories that are too), so
    that no user can change the code root runs (a user-owned checkout is refused)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import check_path, check_tree

    stems = {m for name in modules for m in (name, "_" + name)}
    try:
        check_path(python, "launcher interpreter")
        for directory in paths:
            check_path(directory, "import path")
            for entry in sorted(os.listdir(directory)):
                if entry.split(".")[0] in stems or entry == "__pycache__":
                    check_tree(os.path.join(directory, entry), "import path")
    except TrustError as err:
        raise NvhookError(
            f"install launcher: {err}; root runs these launchers, so nvhook and its "
            "dependencies must be where only root can change them (install the .deb, or copy "
            "the checkout or venv to a root-owned directory and install from there)") from err
    except OSError as err:
        raise NvhookError(f"install launcher: check {err.filename}: {err.strerror}") from err


def render_launcher(python: str, paths: list[str], kind: str = "hook",
                    config: str | None = None) -> str:
    from nvhook import __version__
    from nvhook.launch.isolation import LOADER_VARIABLES, REEXEC_XOPTION
    from nvhook.launch.write import render

    if any(c.isspace() for c in python) or not python.startswith("/") or len(python) > 120:
        raise NvhookError(
            f"install launcher: interpreter path {python!r} cannot be used in a shebang "
            "(absolute, no spaces, at most 120 characters)"
        )
    return render(kind, python, paths, version=__version__,
                  loader=tuple(sorted(LOADER_VARIABLES)), xoption=REEXEC_XOPTION, config=config)


def _check_interpreter(python: str) -> None:
    """The launcher's interpreter must be the Python version nvhook is installed for."""
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        proc = subprocess.run(
            [python, "-IS", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
    except OSError as err:
        raise NvhookError(
            f"install launcher: run {python}: {err.strerror} (install python3 or use --python)"
        ) from err
    got = proc.stdout.strip()
    if proc.returncode != 0 or got != want:
        raise NvhookError(
            f"install launcher: {python} is Python {got or '?'}, but nvhook is installed for "
            f"Python {want} (use --python with a {want} interpreter)"
        )


def write_launcher(path: str, text: str, *, force: bool) -> None:
    """Write `text` to `path` (mode 0755, set on the open file) atomically in a trusted
    prefix (`nvmount.fs.trusted`; missing directories made 0755); refuse to replace a
    foreign file."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import open_dir, read_file, write_atomic

    try:  # the prefix: every directory root's and writable by no one else
        os.close(open_dir(os.path.dirname(path), "install launcher", create=0o755,
                          parents=True))
    except TrustError as err:
        raise NvhookError(str(err)) from err
    except OSError as err:
        raise NvhookError(f"install launcher {path}: {err.strerror}") from err
    try:
        ours = MARKER.encode() in read_file(path, "install launcher", 4096)
    except FileNotFoundError:
        ours = True
    except (TrustError, OSError):
        ours = False  # a symlink, a FIFO, a user's file, unreadable: not ours
    if not ours and not force:
        raise NvhookError(
            f"install launcher {path}: the file exists and is not an nvhook launcher "
            "(move it away, or use --force to replace it)"
        )
    try:
        write_atomic(path, text.encode("utf-8"), "install launcher", mode=0o755)
    except TrustError as err:
        raise NvhookError(str(err)) from err
    except OSError as err:
        raise NvhookError(f"install launcher {path}: {err.strerror}") from err


def verify_launcher(path: str, kind: str = "hook") -> None:
    """Run `<launcher> --version` as the runtime would (exec through the shebang). The
    runtime wrapper then execs the low-level runtime's `--version`: only its own first line
    is checked (runc may be missing at install time)."""
    try:
        proc = subprocess.run(
            [path, "--version"], capture_output=True, text=True, check=False, timeout=30, cwd="/"
        )
    except OSError as err:
        raise NvhookError(f"install launcher {path}: cannot run it: {err.strerror}") from err
    ok = proc.returncode == 0
    if kind == "runtime":
        ok = proc.stdout.startswith("nvhook-runtime version ") or "no runtime binary" in (
            proc.stderr)
    if not ok:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise NvhookError(f"install launcher {path}: it does not start: {detail}")
