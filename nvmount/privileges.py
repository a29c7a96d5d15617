"""Capabilities per engine stage (what libnvc-spec §8 does, for our engine's own needs).

Stage: privileges, used by every stage of the hook. Touches only the calling process's
capability sets, bounding set, securebits and credentials (never files).

Model: at hook start `limit_permitted()` cuts the permitted set (and the bounding set) down to
what all stages together need; each stage then runs with exactly its own capabilities
effective (`with stage(Stage.MOUNT): ...` or `drop_to(Stage.MOUNT)`). Helpers we exec get none:
`drop_for_exec(uid, gid)` clears every set, locks root's exec privileges away and sets
no_new_privs.

When the process is not root (a dry run by a normal user) everything here is a no-op with a
debug log. python-prctl is imported lazily, and only its C module `_prctl` (~0.3 ms): the
`prctl` wrapper module costs 3-7 ms more (it builds classes at import).
"""

from __future__ import annotations

import os

from nvmount.choices import Choice, Number, members
from nvmount.log import DEBUG, get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import ModuleType
    from typing import ClassVar

log = get_logger(__name__)


class Cap(Number):
    """Linux capability numbers (linux/capability.h)."""

    __slots__ = ()
    CHOWN: ClassVar[Cap]
    DAC_OVERRIDE: ClassVar[Cap]
    DAC_READ_SEARCH: ClassVar[Cap]
    FOWNER: ClassVar[Cap]
    FSETID: ClassVar[Cap]
    KILL: ClassVar[Cap]
    SETGID: ClassVar[Cap]
    SETUID: ClassVar[Cap]
    SETPCAP: ClassVar[Cap]
    NET_ADMIN: ClassVar[Cap]
    SYS_MODULE: ClassVar[Cap]
    SYS_CHROOT: ClassVar[Cap]
    SYS_PTRACE: ClassVar[Cap]
    SYS_ADMIN: ClassVar[Cap]
    MKNOD: ClassVar[Cap]
    BPF: ClassVar[Cap]


members(Cap, CHOWN=0, DAC_OVERRIDE=1, DAC_READ_SEARCH=2, FOWNER=3, FSETID=4, KILL=5, SETGID=6,
        SETUID=7, SETPCAP=8, NET_ADMIN=12, SYS_MODULE=16, SYS_CHROOT=18, SYS_PTRACE=19,
        SYS_ADMIN=21, MKNOD=27, BPF=39)


class Stage(Choice):
    __slots__ = ()
    INIT: ClassVar[Stage]  # config, spec, driver discovery (NVML, driver root, /dev, /proc)
    KMODS: ClassVar[Stage]  # load-kmods: kernel modules and NVIDIA device nodes on the host
    CONTAINER: ClassVar[Stage]  # the target: /proc/<pid>/ns/mnt, /proc/<pid>/root, cgroup paths
    MOUNT: ClassVar[Stage]  # setns into the container and apply the mount plan
    LDCACHE: ClassVar[Stage]  # fork the ldconfig sandbox (setns, unshare, pivot, drop, kill)
    CGROUP: ClassVar[Stage]  # v1 devices.allow; v2 device eBPF program query/load/replace
    SHUTDOWN: ClassVar[Stage]  # nothing privileged is left to do


members(Stage, INIT="init", KMODS="kmods", CONTAINER="container", MOUNT="mount",
        LDCACHE="ldcache", CGROUP="cgroup", SHUTDOWN="shutdown")


# What each stage needs (libnvc-spec §8 as a guide, trimmed to what this engine does):
# - opening /proc/<pid>/ns/* and /proc/<pid>/root of another process is a ptrace-read check;
# - setns(CLONE_NEWNS) needs SYS_ADMIN + SYS_CHROOT; pivot_root SYS_ADMIN;
# - mountpoints are created as the container owner (setfsuid: SETUID/SETGID) in directories
#   the owner may not be able to write as uid 0 without DAC_OVERRIDE (user namespaces);
# - the ldconfig child drops to the container owner (SETUID/SETGID), drops the bounding set and
#   sets securebits (SETPCAP); the hook kills it on timeout (KILL: its uid differs); it joins
#   the container's cgroups first (their cgroup.procs: DAC_OVERRIDE when delegated);
# - writing devices.allow needs SYS_ADMIN (DAC_OVERRIDE when a delegated cgroup is not root's);
#   cgroup-v2 device programs, measured on 6.18: BPF_PROG_LOAD needs BPF+NET_ADMIN or SYS_ADMIN
#   (CAP_BPF alone: EPERM), BPF_PROG_QUERY/ATTACH/DETACH NET_ADMIN or SYS_ADMIN,
#   BPF_PROG_GET_FD_BY_ID SYS_ADMIN only - so SYS_ADMIN alone covers the whole replace.
STAGE_CAPS: dict[Stage, frozenset[Cap]] = {
    Stage.INIT: frozenset({Cap.DAC_READ_SEARCH, Cap.DAC_OVERRIDE}),
    Stage.KMODS: frozenset(
        {Cap.SYS_MODULE, Cap.MKNOD, Cap.CHOWN, Cap.FOWNER, Cap.DAC_OVERRIDE}
    ),
    Stage.CONTAINER: frozenset({Cap.SYS_PTRACE, Cap.DAC_READ_SEARCH}),
    Stage.MOUNT: frozenset(
        {
            Cap.SYS_ADMIN,
            Cap.SYS_CHROOT,
            Cap.SYS_PTRACE,
            Cap.DAC_OVERRIDE,
            Cap.DAC_READ_SEARCH,
            Cap.CHOWN,
            Cap.FOWNER,
            Cap.SETUID,
            Cap.SETGID,
        }
    ),
    Stage.LDCACHE: frozenset(
        {
            Cap.SYS_ADMIN,
            Cap.SYS_CHROOT,
            Cap.DAC_OVERRIDE,  # the container's cgroup.procs files (delegated cgroups)
            Cap.DAC_READ_SEARCH,
            Cap.SETUID,
            Cap.SETGID,
            Cap.SETPCAP,
            Cap.KILL,
        }
    ),
    Stage.CGROUP: frozenset({Cap.SYS_ADMIN, Cap.DAC_OVERRIDE}),
    Stage.SHUTDOWN: frozenset(),
}

# securebits (linux/securebits.h): exec as uid 0 grants nothing, keep-caps can never be set
SECBIT_NOROOT = 0x01
SECBIT_NOROOT_LOCKED = 0x02
SECBIT_KEEP_CAPS_LOCKED = 0x20
_EXEC_SECUREBITS = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_KEEP_CAPS_LOCKED
PR_SET_NO_NEW_PRIVS = 38


def caps_for(stages: Iterable[Stage]) -> frozenset[Cap]:
    """The union of the capabilities of `stages` (pure)."""
    out: frozenset[Cap] = frozenset()
    for s in stages:
        out |= STAGE_CAPS[s]
    return out


def _prctl() -> ModuleType | None:
    """python-prctl's C module, or None (with a debug log) when we are not root."""
    if os.geteuid() != 0:
        log.debug("not root (euid %d): leaving capabilities unchanged", os.geteuid())
        return None
    import _prctl  # type: ignore[import-not-found]  # python-prctl's C module

    return _prctl  # type: ignore[no-any-return]


def _all_caps(p: ModuleType) -> list[int]:
    return list(range(_last_cap(p) + 1))


def _last_cap(p: ModuleType) -> int:
    """python-prctl's CAP_LAST_CAP; python-prctl 1.7 (Debian 11's) has none: the kernel's."""
    last = getattr(p, "CAP_LAST_CAP", None)
    if last is not None:
        return int(last)
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as f:
            return int(f.read(16))
    except (OSError, ValueError):
        return 40  # CAP_CHECKPOINT_RESTORE (Linux 5.9)


def _current(p: ModuleType, flag: int) -> set[int]:
    caps = p.get_caps(_all_caps(p), _all_caps(p), _all_caps(p))[flag]
    return {int(c) for c, on in caps.items() if on}


def effective() -> frozenset[int]:
    """The current effective set as capability numbers (empty when not root)."""
    p = _prctl()
    return frozenset() if p is None else frozenset(_current(p, p.CAP_EFFECTIVE))


def _set_effective(p: ModuleType, want: set[int]) -> None:
    permitted = _current(p, p.CAP_PERMITTED)
    on = sorted(want & permitted)
    off = sorted(set(_all_caps(p)) - set(on))
    p.set_caps(on, [], [], off, [], [])


def set_effective(caps: Iterable[int]) -> None:
    """Make exactly `caps` effective (those still permitted); nothing when not root. For a
    change of fsuid, which drops and raises the file capabilities on its own."""
    p = _prctl()
    if p is not None:
        _set_effective(p, set(caps))


def drop_to(stage: Stage) -> None:
    """Make exactly `stage`'s capabilities effective (those still permitted)."""
    p = _prctl()
    if p is None:
        return
    _set_effective(p, {int(c) for c in STAGE_CAPS[stage]})
    if log.isEnabledFor(DEBUG):  # the names cost more than the change (~30 us a stage)
        log.debug("privileges: stage %s, effective %s", stage.value,
                  ",".join(c.name.lower() for c in sorted(STAGE_CAPS[stage])) or "none")


class stage:
    """Run a block with `which`'s capabilities effective; restore the previous set after."""

    __slots__ = ("before", "p", "which")

    def __init__(self, which: Stage) -> None:
        self.which = which
        self.p: ModuleType | None = None
        self.before: set[int] = set()

    def __enter__(self) -> None:
        self.p = _prctl()
        if self.p is not None:
            self.before = _current(self.p, self.p.CAP_EFFECTIVE)
            drop_to(self.which)

    def __exit__(self, *exc: object) -> None:
        if self.p is not None:
            _set_effective(self.p, self.before)


def _drop_bounding(p: ModuleType, keep: set[int]) -> None:
    for cap in _all_caps(p):
        if cap not in keep:
            p.prctl(p.PR_CAPBSET_DROP, cap)


def limit_permitted(caps: Iterable[Cap] | None = None, *, bounding: bool = True) -> None:
    """Cut permitted (and, unless `bounding=False`, the bounding set) to `caps`.

    `caps` defaults to what every stage together needs. Inheritable (and with it ambient)
    is cleared; effective keeps only what stays permitted. Call once at hook start.
    """
    p = _prctl()
    if p is None:
        return
    keep = {int(c) for c in (caps_for(STAGE_CAPS) if caps is None else caps)}
    if bounding and int(Cap.SETPCAP) in _current(p, p.CAP_PERMITTED):
        p.set_caps([int(Cap.SETPCAP)], [], [], [], [], [])
        _drop_bounding(p, keep)
    every = _all_caps(p)
    drop = [c for c in every if c not in keep]
    p.set_caps([], [], [], drop, drop, every)
    log.debug("privileges: permitted limited to %s",
              ",".join(Cap(c).name.lower() for c in sorted(keep)) or "none")


def drop_for_exec(uid: int, gid: int) -> tuple[str, ...]:
    """Become `uid:gid` with no capabilities at all, for exec'ing a helper; returns warnings.

    Order: securebits (exec as root grants nothing), bounding set, groups, gid, uid, clear
    effective/permitted/inheritable (and so ambient), no_new_privs, then verify. Needs
    SETPCAP, SETUID, SETGID effective. Raises OSError when a step that matters fails.
    """
    warnings: list[str] = []
    p = _prctl()
    if p is None:  # nothing to drop, but never let the helper gain privileges by exec
        import _prctl as prctl_module

        prctl_module.prctl(PR_SET_NO_NEW_PRIVS, 1)
        return ("not root: running the helper with the caller's own credentials",)
    p.set_caps([int(Cap.SETPCAP)], [], [], [], [], [])
    p.prctl(p.PR_SET_SECUREBITS, _EXEC_SECUREBITS)
    _drop_bounding(p, set())
    try:
        os.setgroups([gid])
    except PermissionError:  # setgroups denied in this user namespace: keep what we have
        warnings.append(f"setgroups([{gid}]) denied: keeping supplementary groups")
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    every = _all_caps(p)
    p.set_caps([], [], [], every, every, every)
    p.prctl(PR_SET_NO_NEW_PRIVS, 1)
    _verify_dropped(p, uid, gid)
    return tuple(warnings)


def _verify_dropped(p: ModuleType, uid: int, gid: int) -> None:
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError(1, f"credentials did not change to {uid}:{gid}")
    left = p.get_caps(_all_caps(p), _all_caps(p), _all_caps(p))
    if any(on for flag in left.values() for on in flag.values()):
        raise PermissionError(1, "capabilities are still set after clearing them")
    if any(p.prctl(p.PR_CAPBSET_READ, c) for c in _all_caps(p)):
        raise PermissionError(1, "the bounding set is not empty after dropping it")
