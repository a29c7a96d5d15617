"""What the ldconfig sandbox's worker does as the container owner, in its nodev view, before
and after ldconfig runs (steps 3 and 5 of `nvmount.ldcache.sandbox`). Stage: ldcache.

`prepare`: skip images without an ld.so.cache to keep (musl, no /etc); read the image's
configuration with budgets and write ours to the scratch; look at the library directories;
return ldconfig's argv. `install`: put the cache ldconfig wrote into the image.
"""

from __future__ import annotations

import os

from nvmount.ldcache.install import InstallError, install_cache
from nvmount.ldcache.ldconf import (
    SYSTEM_DIRS,
    Budget,
    ConfReader,
    first_names,
    scan_lib_dirs,
    write_conf,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc

LDCONFIG_FLAGS = ("-i",)  # never read the image's aux cache (its writes go to a tmpfs)
_MUSL_LOOK = 4096  # entries of /lib looked at for the musl loader


class Stop(Exception):
    """ldconfig is not run (`kind` "skip": nothing to do; "refuse": not safe, a warning) or
    its cache is not installed ("install-error"); `text` says why."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind, self.text = kind, text


def prepare(path: str, dirs: tuple[str, ...], libc: Libc, scratch: str
            ) -> tuple[list[str], list[str]]:
    """(ldconfig's argv, notes for the log). Raises Stop."""
    _preflight()
    try:
        conf_dirs, notes = ConfReader(libc).read()
        write_conf(f"{scratch}/ld.so.conf", conf_dirs)
        why = scan_lib_dirs([*dirs, *conf_dirs, *SYSTEM_DIRS], libc)
    except Budget as err:
        raise Stop("refuse", str(err)) from err
    if why is not None:
        raise Stop("refuse", why)
    argv = [path, *LDCONFIG_FLAGS, "-f", f"{scratch}/ld.so.conf", "-C",
            f"{scratch}/ld.so.cache", *first_names(dirs, [*conf_dirs, *SYSTEM_DIRS])]
    return argv, notes


def _preflight() -> None:
    if not os.path.isdir("/etc"):
        raise Stop("skip", "the image has no /etc directory")
    if not os.path.lexists("/etc/ld.so.conf") and _is_musl():
        raise Stop("skip", "musl libc image: it has no ld.so.cache (the SONAME links suffice)")


def _is_musl() -> bool:
    try:
        with os.scandir("/lib") as entries:
            for count, entry in enumerate(entries):
                if entry.name.startswith("ld-musl-"):
                    return True
                if count >= _MUSL_LOOK:
                    return False
    except OSError:
        return False
    return False


def install(libc: Libc, scratch: str) -> int:
    """Install the cache ldconfig wrote on the scratch; its size. Raises Stop."""
    try:
        return install_cache(f"{scratch}/ld.so.cache", libc)
    except InstallError as err:
        raise Stop("install-error", str(err)) from err
