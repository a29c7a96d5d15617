"""`nvhook install`: write the launchers that runtimes run as the hook. Stage: CLI command.

A launcher is a small Python script run by the system interpreter in isolated mode without the
site module (`#!/usr/bin/python3 -IS`; a shebang passes one argument, so `-I -S` is written as
`-IS`): PYTHON* variables, the user site, `.pth` files and the working directory have no say in
what it imports. It re-executes itself once without dynamic-loader variables (LD_PRELOAD,
LD_LIBRARY_PATH, ...), records the working directory (runc: the bundle), changes to "/", appends
the exact directories nvhook and its dependencies were found in at install time to `sys.path`
(after the standard library, so nothing there can shadow it), and calls `nvhook.cli.main`.

    nvhook install [--prefix DIR] [--name NAME ...] [--python PATH] [--force] [--print]

`--prefix` is the directory the launchers are written to (default /usr/local/bin); the default
names are `nvidia-container-runtime-hook` (the name Docker's `--gpus` looks up on its PATH) and
`nvhook-hook`. Re-run after moving or upgrading the installation.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from nvhook.errors import NvhookError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.flags import GlobalOptions

DEFAULT_PREFIX = "/usr/local/bin"
DEFAULT_NAMES = ("nvidia-container-runtime-hook", "nvhook-hook")
DEFAULT_PYTHON = "/usr/bin/python3"
MARKER = "# nvhook hook launcher"
# Importable names nvhook needs at hook time: itself and its runtime dependencies.
_MODULES = ("nvhook", "nvmount", "prctl", "psutil")

_TEMPLATE = '''#!{python} -IS
{marker}, written by `nvhook install` (nvhook {version}); re-run it after moving nvhook.
# Isolated interpreter: no PYTHON* variables, no cwd or user site, no site module or .pth files.
import os
import sys

_LOADER = {loader!r}
if "{xoption}" not in sys._xoptions and any(
    k.startswith("LD_") or k in _LOADER for k in os.environ
):
    os.execve(
        sys.executable,
        [sys.executable, "-X", "{xoption}", *sys.orig_argv[1:]],
        {{k: v for k, v in os.environ.items() if not (k.startswith("LD_") or k in _LOADER)}},
    )
try:
    _cwd = os.getcwd()
except OSError:
    _cwd = ""  # unknown: the directory is gone
os.chdir("/")
sys.path.extend({paths!r})
from nvhook.cli import main

sys.exit(main(cwd=_cwd))
'''


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="nvhook install", description="write the isolated hook launchers"
    )
    parser.add_argument("--prefix", default=DEFAULT_PREFIX,
                        help=f"directory to write the launchers to (default {DEFAULT_PREFIX})")
    parser.add_argument("--name", action="append", dest="names", metavar="NAME",
                        help="launcher file name; repeatable (default: "
                             + ", ".join(DEFAULT_NAMES) + ")")
    parser.add_argument("--python", default=DEFAULT_PYTHON,
                        help=f"interpreter of the launcher (default {DEFAULT_PYTHON})")
    parser.add_argument("--force", action="store_true",
                        help="replace files that are not nvhook launchers")
    parser.add_argument("--print", action="store_true", dest="print_only",
                        help="print the launcher instead of writing it")
    return parser.parse_args(argv)  # fmt: skip


def main(argv: list[str], opts: GlobalOptions) -> int:
    args = _parse(argv)
    python = _absolute(args.python, opts.cwd)
    _check_interpreter(python)
    text = render_launcher(python, import_paths())
    if args.print_only:
        sys.stdout.write(text)
        return 0
    prefix = _absolute(args.prefix, opts.cwd)
    for name in args.names or DEFAULT_NAMES:
        if not name or "/" in name or name in (".", ".."):
            raise NvhookError(f"install launcher {name!r}: not a file name (use --name NAME)")
        path = os.path.join(prefix, name)
        write_launcher(path, text, force=args.force)
        verify_launcher(path)
        print(path)
    return 0


def _absolute(path: str, cwd: str | None) -> str:
    return os.path.normpath(os.path.join(cwd or os.getcwd(), path))


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


def render_launcher(python: str, paths: list[str]) -> str:
    from nvhook import __version__
    from nvhook.isolation import LOADER_VARIABLES, REEXEC_XOPTION

    if any(c.isspace() for c in python) or not python.startswith("/") or len(python) > 120:
        raise NvhookError(
            f"install launcher: interpreter path {python!r} cannot be used in a shebang "
            "(absolute, no spaces, at most 120 characters)"
        )
    return _TEMPLATE.format(
        python=python,
        marker=MARKER,
        version=__version__,
        loader=tuple(sorted(LOADER_VARIABLES)),
        xoption=REEXEC_XOPTION,
        paths=paths,
    )


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
    """Write `text` to `path` (mode 0755) atomically; refuse to replace a foreign file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            ours = MARKER in stream.read(4096)
    except FileNotFoundError:
        ours = True
    except OSError as err:
        raise NvhookError(f"install launcher {path}: {err.strerror}") from err
    if not ours and not force:
        raise NvhookError(
            f"install launcher {path}: the file exists and is not an nvhook launcher "
            "(move it away, or use --force to replace it)"
        )
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.nvhook-{os.getpid()}")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o755)
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    except OSError as err:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise NvhookError(f"install launcher {path}: {err.strerror}") from err


def verify_launcher(path: str) -> None:
    """Run `<launcher> --version` as the runtime would (exec through the shebang)."""
    try:
        proc = subprocess.run(
            [path, "--version"], capture_output=True, text=True, check=False, timeout=30, cwd="/"
        )
    except OSError as err:
        raise NvhookError(f"install launcher {path}: cannot run it: {err.strerror}") from err
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise NvhookError(f"install launcher {path}: it does not start: {detail}")
