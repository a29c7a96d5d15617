"""Process hygiene of the hook: the loader variables it drops (re-executing once without
them) and the working directory it leaves before importing anything else. Used by
`nvhook.cli.main` and written into the launchers by `nvhook.admin.install`.
"""

from __future__ import annotations

import os
import sys

# Variables that make the dynamic loader or libc load code or data chosen by whoever set them
# (glibc's list of variables it drops for setuid programs, plus every LD_*). Not here: TZ and
# TZDIR - libc reads the file they name when the interpreter starts (zipimport imports time,
# which calls tzset), before any code of ours, like LD_PRELOAD: only an explicit `env` on the
# hook entry keeps them out (docs/security.md).
LOADER_VARIABLES = frozenset((
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS",
))  # fmt: skip
REEXEC_XOPTION = "nvhook_reexec"  # `-X nvhook_reexec`: set on the re-executed interpreter


def is_loader_variable(name: str) -> bool:
    return name.startswith("LD_") or name in LOADER_VARIABLES


def reexec_without_loader_variables() -> None:
    """execve the same interpreter and argv once, minus the loader variables, if any are set."""
    found = [name for name in os.environ if is_loader_variable(name)]
    if not found:
        return
    if REEXEC_XOPTION in sys._xoptions:  # already re-executed: never loop
        for name in found:
            del os.environ[name]
        return
    env = {k: v for k, v in os.environ.items() if not is_loader_variable(k)}
    from nvmount.api import orig_argv

    argv = [sys.executable, "-X", REEXEC_XOPTION, *orig_argv()[1:]]
    os.execve(sys.executable, argv, env)


def enter_root_directory() -> str | None:
    """Record the working directory, then chdir("/"); None if the directory is gone."""
    try:
        cwd: str | None = os.getcwd()
    except OSError:
        cwd = None
    os.chdir("/")
    return cwd
