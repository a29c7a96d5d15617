"""Find the low-level runtime the wrapper hands every call to (hook-spec 3.2). Reads only
the file system (stat); no imports beyond os.

Candidates are `nvidia-container-runtime.runtimes` in order. A candidate with a `/` must be an
executable file at that path; a name is looked up in the wrapper's PATH, then in the six
default directories. The first hit wins. Unlike NVIDIA's, a candidate that is the wrapper
itself (same file, e.g. a `runc` link to it, or a PATH entry holding the wrapper) is skipped:
the wrapper would otherwise exec itself forever.
"""

from __future__ import annotations

import os

from nvhook.errors import WrapperError

DEFAULT_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _executable(path: str) -> os.stat_result | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    import stat

    if not stat.S_ISREG(st.st_mode) or not os.access(path, os.X_OK):
        return None
    return st


def search_dirs(path_env: str) -> list[str]:
    """PATH's entries, then the default directories not already in it."""
    dirs = [d for d in path_env.split(":") if d]
    return dirs + [d for d in DEFAULT_DIRS if d not in dirs]


def find_runtime(candidates: tuple[str, ...], path_env: str, own: str | None = None) -> str:
    """The path of the first candidate found; `own` is the wrapper's file (never returned)."""
    own_id = None
    if own:
        try:
            st = os.stat(own)
            own_id = (st.st_dev, st.st_ino)
        except OSError:
            own_id = None
    for candidate in candidates:
        paths = [candidate] if "/" in candidate else [
            os.path.join(d, candidate) for d in search_dirs(path_env)]
        for path in paths:
            found = _executable(path)
            if found is not None and (found.st_dev, found.st_ino) != own_id:
                return path if path.startswith("/") else os.path.abspath(path)
    shown = " ".join(candidates)
    raise WrapperError(
        "failed to create NVIDIA Container Runtime: error constructing low-level runtime: "
        f"error locating runtime: no runtime binary found from candidate list: [{shown}] "
        "(install runc, or set nvidia-container-runtime.runtimes)")
