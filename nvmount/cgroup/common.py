"""Device cgroup: find the container's cgroup, allow the GPU device nodes in it, undo that.

Stage: container inspection (`find_cgroup`) and the last step of apply (`allow_devices`).
Reads /proc/<pid>/cgroup and a mountinfo; writes only the container's v1 `devices.allow`/
`devices.deny` (v2: its BPF device programs, in cgroup_bpf.py).

Differences from libnvidia-container (libnvc-spec §4):
- v1 is detected from any controllers field that CONTAINS `devices` (co-mounts like
  `cpu,devices` included), the mount from its super options, not from the mount point's name.
- mountinfo is parsed properly (optional fields, the ` - ` separator, `\\040` escapes) and the
  cgroup root is stripped by path components, not as a string prefix.
- A candidate mount is used only if it is really reachable from here (the mount id of its
  mount point, via fdinfo, is the one in mountinfo), so a hidden v1 mount (runc forced onto
  cgroup v2 in hybrid mode) or a stray directory of the same name is never written to.
- Root cgroups ("/") are never touched: a device rule there would apply to the whole host.
- v1 rules (cgroup_v1.py) go to a cgroupfs checked with fstatfs, opened with O_NOFOLLOW from the
  cgroup directory fd; rules already covered by devices.list are not written, so `undo`
  removes exactly what was added. Wildcards and out-of-range numbers are refused.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from nvmount.container.types import CgroupTarget
from nvmount.errors import CgroupError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Protocol

    from nvmount._libc import Libc
    from nvmount.plan.types import DeviceRule

log = logging.getLogger(__name__)

MAX_MAJOR = (1 << 12) - 1  # Linux dev_t: 12-bit major, 20-bit minor
MAX_MINOR = (1 << 20) - 1
ACCESS_ORDER = "rwm"


@dataclass(frozen=True, slots=True)
class CgroupLine:
    """One line of /proc/<pid>/cgroup: `hierarchy-id:controllers:path`."""

    hierarchy_id: int
    controllers: tuple[str, ...]  # () for the v2 line (and named v1 hierarchies' name= entry)
    path: str


@dataclass(frozen=True, slots=True)
class MountEntry:
    """The fields of one mountinfo line that cgroup detection needs (paths unescaped)."""

    mount_id: int
    root: str  # the path of the mount's root inside its filesystem
    mount_point: str
    fstype: str
    super_options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CgroupCandidate:
    """A cgroup directory that may hold the container's device rules."""

    version: int
    path: str  # host path of the cgroup directory
    mount_point: str
    mount_id: int  # the mount `path` must go through


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
def should_skip_cgroups(no_cgroups: bool, in_userns: bool) -> str | None:
    """Why the device cgroup is left alone (None: update it); the engine logs the reason."""
    if no_cgroups:
        return "no-cgroups = true in the config"
    if in_userns:
        return ("the container runs in a user namespace (rootless: its runtime owns device "
                "access; use no-cgroups = true to silence this)")
    return None


def format_rule(rule: DeviceRule) -> str:
    return f"c {rule.major}:{rule.minor} {rule.access}"


def validate_rules(rules: Sequence[DeviceRule]) -> tuple[DeviceRule, ...]:
    """The rules in order without duplicates; CgroupError for anything not a plain char rule."""
    out: list[DeviceRule] = []
    for rule in rules:
        where = f" ({rule.what})" if rule.what else ""
        if not (0 <= rule.major <= MAX_MAJOR and 0 <= rule.minor <= MAX_MINOR):
            raise CgroupError(f"device rule c {rule.major}:{rule.minor}{where}: major must be "
                              f"0..{MAX_MAJOR} and minor 0..{MAX_MINOR} (no wildcards)")
        access = rule.access
        if not access or set(access) - set(ACCESS_ORDER) or len(set(access)) != len(access):
            raise CgroupError(f"device rule c {rule.major}:{rule.minor}{where}: access "
                              f"{access!r} must be letters of 'rwm' without repeats")
        if rule not in out:
            out.append(rule)
    return tuple(out)


def parse_proc_cgroup(text: str) -> tuple[CgroupLine, ...]:
    lines = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            raise ValueError(f"line {n} is not 'id:controllers:/path': {line!r}")
        ctrls = tuple(c for c in parts[1].split(",") if c)
        lines.append(CgroupLine(int(parts[0]), ctrls, parts[2]))
    return tuple(lines)


_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape_mountinfo(field: str) -> str:
    """Undo the kernel's octal escapes (`\\040` space, `\\011` tab, `\\012` newline, `\\134`)."""
    if "\\" not in field:
        return field
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> tuple[MountEntry, ...]:
    """Lines `id parent maj:min root mount-point opts [optional...] - fstype source sopts`."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            raise ValueError(f"line {n} has no ' - ' separator: {line!r}") from None
        if len(fields) < sep + 3 or not fields[0].isdigit():
            raise ValueError(f"line {n} is truncated: {line!r}")
        out.append(MountEntry(
            mount_id=int(fields[0]),
            root=unescape_mountinfo(fields[3]),
            mount_point=unescape_mountinfo(fields[4]),
            fstype=fields[sep + 1],
            super_options=tuple(fields[sep + 3].split(",")) if len(fields) > sep + 3 else (),
        ))
    return tuple(out)


def _below(path: str, root: str) -> str | None:
    """`path` relative to a mount whose root is `root` ("/" = the mount point itself)."""
    if root.startswith("/..") or ".." in path.split("/"):
        return None
    if root == "/":
        return path
    if path == root:
        return "/"
    return path[len(root):] if path.startswith(root + "/") else None


def device_cgroups(lines: Sequence[CgroupLine]) -> tuple[tuple[int, str], ...]:
    """(version, cgroup path) that may limit devices, v1 `devices` first, then v2. Root
    cgroups are left out (a rule there would apply to the whole host): () = nothing to do."""
    v1 = next((ln for ln in lines if "devices" in ln.controllers), None)
    v2 = next((ln for ln in lines if ln.hierarchy_id == 0 and not ln.controllers), None)
    return tuple((version, ln.path) for version, ln in ((1, v1), (2, v2))
                 if ln is not None and ln.path != "/")


def cgroup_candidates(lines: Sequence[CgroupLine],
                      mounts: Sequence[MountEntry]) -> tuple[CgroupCandidate, ...]:
    """Where the device cgroups of `device_cgroups(lines)` may be mounted, best first."""
    out = []
    for version, path in device_cgroups(lines):
        fstype = "cgroup" if version == 1 else "cgroup2"
        for m in mounts:
            ok = m.fstype == fstype and (version == 2 or "devices" in m.super_options)
            rel = _below(path, m.root) if ok else None
            if rel is not None:
                full = m.mount_point if rel == "/" else m.mount_point.rstrip("/") + rel
                out.append(CgroupCandidate(version, full, m.mount_point, m.mount_id))
    return tuple(out)


# -- reads ------------------------------------------------------------------------------------
def _read(path: str) -> str:
    with open(path, "rb") as f:
        return os.fsdecode(f.read())


def _mount_id_of(path: str) -> int | None:
    """The id of the mount `path` resolves to from this process (None: unreachable)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for line in _read(f"/proc/self/fdinfo/{fd}").splitlines():
            if line.startswith("mnt_id:"):
                return int(line.split()[1])
        return None
    finally:
        os.close(fd)


def find_cgroup(pid: int, proc_root: str = "/proc",
                mountinfo_pid: int | None = None) -> CgroupTarget | None:
    """The device cgroup of `pid`, or None when it is only in root cgroups (nothing limits it).

    The mountinfo read is this process's own (the hook runs in the runtime's mount namespace)
    unless `mountinfo_pid` is given; a candidate is used only if reachable from here.
    """
    cg_path = f"{proc_root}/{pid}/cgroup"
    mi_path = f"{proc_root}/{mountinfo_pid if mountinfo_pid else 'self'}/mountinfo"
    try:
        lines = parse_proc_cgroup(_read(cg_path))
        mounts = parse_mountinfo(_read(mi_path))
    except OSError as err:
        raise CgroupError(f"read {err.filename}: {err.strerror} "
                          f"(is process {pid} still running?)") from err
    except ValueError as err:
        raise CgroupError(f"parse {cg_path} or {mi_path}: {err}") from err
    wanted = device_cgroups(lines)
    if not wanted:
        log.info("pid %d is in root cgroups only: no device cgroup to update", pid)
        return None
    candidates = cgroup_candidates(lines, mounts)
    for c in candidates:
        if _mount_id_of(c.mount_point) == c.mount_id:
            log.info("setting devices cgroup to %s (cgroup v%d)", c.path, c.version)
            return CgroupTarget(c.version, c.path)
    where = ", ".join(f"v{v} {p}" for v, p in wanted)
    tried = ", ".join(sorted({c.mount_point for c in candidates})) or "none in " + mi_path
    raise CgroupError(f"find device cgroup of pid {pid} ({where}): no mount of its hierarchy "
                      f"is reachable from this mount namespace (mounts: {tried}) (set "
                      "no-cgroups = true to skip, or run the hook in the runtime's mount "
                      "namespace)")


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


def allow_devices(target: CgroupTarget, rules: Sequence[DeviceRule],
                  libc: Libc) -> CgroupChange:
    """Allow `rules` (char devices) in the cgroup; atomic per rule (v1) or per program (v2).

    On failure everything done so far is undone and CgroupError raised.
    """
    valid = validate_rules(rules)
    if not valid:
        return NoChange(target.path)
    if target.version == 2:
        from nvmount.cgroup.bpf import allow_devices_bpf

        return allow_devices_bpf(target, valid, libc)
    if target.version != 1:
        raise CgroupError(f"update cgroup {target.path}: unknown cgroup version {target.version}")
    from nvmount.cgroup.v1 import allow_devices_v1

    return allow_devices_v1(target.path, valid, libc)


def undo_quietly(change: CgroupChange) -> None:
    """Roll back on a failure path: an undo error is logged, the original error goes on."""
    try:
        change.undo()
    except CgroupError as err:
        log.error("%s", err)
