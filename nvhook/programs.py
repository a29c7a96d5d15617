"""Programs the admin commands run to ask a question (`--version` of a launcher, an engine,
containerd): root runs a program only when it and every directory above it pass the
trusted-path rule (`nvmount.fs.trusted.check_path`), wherever it was found: a PATH (the
caller's or a daemon's <proc>/<pid>/environ), a runtime's configuration, the working
directory. A PATH entry that is not absolute (empty, ".", "bin") names the working directory
and is never searched; a relative program path is never run.

| found through     | refused when                                                       |
|-------------------|--------------------------------------------------------------------|
| a PATH entry      | the entry is not absolute; the file or a directory above it is not |
|                   | root's, or is writable by group or others (the rule's sticky dirs) |
| a configured path | the same; a relative path                                          |

Effects: stats (the trust walk).
"""

from __future__ import annotations


def untrusted(path: str) -> str | None:
    """Why root must not run `path` (None: it may)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import check_path

    if not path.startswith("/"):
        return (f"{path}: not an absolute path (root runs no program found in the working "
                "directory)")
    try:
        check_path(path, "program")
    except TrustError as err:
        return str(err)
    except OSError as err:
        return f"program {path}: {err.strerror}"
    return None


def which(name: str, search: str) -> str | None:
    """The first executable `name` in the absolute directories of `search` (a path with a
    "/" is taken as it is when absolute); not yet checked: see `untrusted`."""
    import os

    if "/" in name:
        return name if name.startswith("/") and os.path.isfile(name) else None
    for directory in search.split(":"):
        if not directory.startswith("/"):
            continue
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def trusted_which(name: str, search: str) -> str | None:
    """`which`, when what it finds may run as root (None otherwise)."""
    found = which(name, search)
    return found if found is not None and untrusted(found) is None else None
