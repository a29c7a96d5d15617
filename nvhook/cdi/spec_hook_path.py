"""The program a generated spec's hook runs: the launcher of the running installation.

In this order, the first that exists, is executable and runs this installation:

1. the package's `/usr/bin/nvhook` (its launcher imports from /usr/lib/python3/dist-packages);
2. a launcher `nvhook install` wrote (`nvhook-hook`, `nvhook`, `nvidia-container-runtime-hook`
   in /usr/local/bin and the directories of PATH) whose recorded import paths hold the
   running nvhook;
3. the virtual environment's own `bin/nvhook` (when nvhook runs from a venv).

"Runs this installation" is read from the launcher's text (the header's `_PATHS = [...]` line
`nvhook.launch.write` writes), never by running it. Effects: reads files.
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import CdiError

PACKAGE_LAUNCHER = "/usr/bin/nvhook"
NAMES = ("nvhook-hook", "nvhook", "nvidia-container-runtime-hook")
INSTALL_PREFIX = "/usr/local/bin"


def import_dir() -> str:
    """The directory the running nvhook package was imported from."""
    import nvhook

    return os.path.dirname(os.path.dirname(os.path.realpath(nvhook.__file__)))


def launcher_paths(path: str) -> list[str] | None:
    """The import paths an nvhook launcher records, None when `path` is not one."""
    from nvhook.launch.write import MARKER, recorded_paths

    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            text = stream.read(16384)
    except OSError:
        return None
    if MARKER not in text:
        return None
    return recorded_paths(text)


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def candidates(path_env: str) -> list[str]:
    dirs = [INSTALL_PREFIX] + [d for d in path_env.split(":") if d.startswith("/")]
    found = [PACKAGE_LAUNCHER]
    found += [os.path.join(d, n) for d in dict.fromkeys(dirs) for n in NAMES]
    return list(dict.fromkeys(found))


def default_hook_path(path_env: str | None = None) -> str:
    """The running installation's launcher (see the module docstring), else CdiError."""
    here = import_dir()
    env = os.environ.get("PATH", "") if path_env is None else path_env
    tried = candidates(env)
    for path in tried:
        paths = launcher_paths(path) if _executable(path) else None
        if paths is not None and any(os.path.realpath(p) == here for p in paths):
            return path
    if sys.prefix != sys.base_prefix:  # a virtual environment: its console script
        script = os.path.join(sys.prefix, "bin", "nvhook")
        if _executable(script):
            return script
        tried.append(script)
    raise CdiError(f"cdi generate: no launcher of this nvhook installation ({here}) to name as "
                   f"the spec's hook (looked at {', '.join(tried[:4])}, ...): run `nvhook "
                   "install`, or name one with --hook-path")


def check_hook_path(path: str) -> str | None:
    """A warning when an explicit --hook-path is not an executable file here."""
    if not path.startswith("/"):
        raise CdiError(f"cdi generate: --hook-path {path[:100]!r} is not an absolute path")
    if not _executable(path):
        return (f"nvhook cdi: --hook-path {path} is not an executable file on this host (the "
                "spec's containers fail to start where it is missing)")
    return None
