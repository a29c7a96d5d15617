"""Device cgroup: what v1 and v2 share (rule checks, the cgroup directory, the change record).

Stage: cgroup (the last step before ldcache). Pure helpers plus `open_cgroup_dir`, which
opens a cgroup directory without magic links and checks its filesystem magic. Used by
`nvmount.cgroup.v1`, `nvmount.cgroup.bpf` and `nvmount.cgroup.allow`; imports neither.
"""

from __future__ import annotations

import os

from nvmount.errors import CgroupError
from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    from nvmount._libc import Libc
    from nvmount.plan.types import DeviceRule

log = get_logger(__name__)

MAX_MAJOR = (1 << 12) - 1  # Linux dev_t: 12-bit major, 20-bit minor
MAX_MINOR = (1 << 20) - 1
ACCESS_ORDER = "rwm"


if TYPE_CHECKING:  # a type only (no run-time use): defining it needs typing (~2 ms)

    class CgroupChange(Protocol):
        """What `allow_devices` did. Keep it until the hook ends: `undo` on a later failure,
        `close` on success (releases fds; the rules stay)."""

        path: str

        def describe(self) -> str: ...

        def undo(self) -> None: ...

        def close(self) -> None: ...


class NoChange:
    """Nothing was written (no rules, or the cgroup already allows everything)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def describe(self) -> str:
        return f"cgroup {self.path}: unchanged"

    def undo(self) -> None:
        pass

    def close(self) -> None:
        pass


# -- pure: decisions and parsing ------------------------------------------------------------
def should_skip_cgroups(no_cgroups: bool, hook_in_userns: bool) -> str | None:
    """Why the device cgroup is left alone (None: update it); the engine logs the reason.
    Decided by what the hook can do, not by a setting: a hook in a user namespace (a rootless
    engine's) can neither load a device BPF program nor write a v1 devices cgroup; host root
    can, whatever user namespace the container has (Podman's --userns=auto)."""
    if no_cgroups:
        return "no-cgroups = true in the config"
    if hook_in_userns:
        return ("the hook runs in a user namespace (a rootless engine): no device limits are "
                "set, the container's devices are those mounted into it")
    return None


_UNIT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.\\@")


def systemd_scope(path: str) -> str | None:
    """The systemd scope unit a container cgroup belongs to, from its path alone: the last
    component when it is a `.scope` (runc's and crun's systemd driver: docker-<id>.scope,
    cri-containerd-<id>.scope, libpod-<id>.scope), or the one above it (crun's `container`
    subgroup); None for a cgroupfs driver's path (/docker/<id>, /kubepods/...)."""
    parts = path.rstrip("/").rsplit("/", 2)[1:]
    for name in reversed(parts):
        if name.endswith(".scope") and len(name) <= 255 and set(name) <= _UNIT_CHARS \
                and name != ".scope":
            return name
    return None


def format_rule(rule: DeviceRule) -> str:
    return f"c {rule.major}:{rule.minor} {rule.access}"


def validate_rules(rules: Sequence[DeviceRule]) -> tuple[DeviceRule, ...]:
    """The rules in order without duplicates; CgroupError for anything not a plain char rule.
    Linear (a dict of the rules seen): a 64-GPU MIG config request has ~9000 rules."""
    out: dict[DeviceRule, None] = {}
    for rule in rules:
        where = f" ({rule.what})" if rule.what else ""
        if not (0 <= rule.major <= MAX_MAJOR and 0 <= rule.minor <= MAX_MINOR):
            raise CgroupError(f"device rule c {rule.major}:{rule.minor}{where}: major must be "
                              f"0..{MAX_MAJOR} and minor 0..{MAX_MINOR} (no wildcards)")
        access = rule.access
        if not access or set(access) - set(ACCESS_ORDER) or len(set(access)) != len(access):
            raise CgroupError(f"device rule c {rule.major}:{rule.minor}{where}: access "
                              f"{access!r} must be letters of 'rwm' without repeats")
        out.setdefault(rule)
    return tuple(out)


# -- effects ----------------------------------------------------------------------------------
def open_cgroup_dir(path: str, libc: Libc, flags: int, magic: int, version: int) -> int:
    """Open a cgroup directory (no magic links) and check it is on the expected cgroupfs."""
    from nvmount import _libc as L

    try:
        fd = libc.openat2(L.AT_FDCWD, path, flags | os.O_DIRECTORY | os.O_NOFOLLOW,
                          resolve=L.RESOLVE_NO_MAGICLINKS)
    except OSError as err:
        raise CgroupError(f"open cgroup {path}: {err.strerror} "
                          "(is the container still running?)") from err
    try:
        fstype = libc.fstatfs_type(fd)
    except OSError as err:
        os.close(fd)
        raise CgroupError(f"statfs cgroup {path}: {err.strerror}") from err
    if fstype != magic:
        os.close(fd)
        raise CgroupError(f"open cgroup {path}: not a cgroup v{version} filesystem (magic "
                          f"{fstype:#x}) (refusing to write device rules there)")
    return fd


def undo_quietly(change: CgroupChange) -> None:
    """Roll back on a failure path: an undo error is logged, the original error goes on."""
    try:
        change.undo()
    except CgroupError as err:
        log.error("%s", err)
