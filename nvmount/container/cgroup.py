"""Device cgroup: which cgroup directory limits the container's devices (read only).

Stage: container inspection (`nvmount.container.open` calls `find_cgroup`). Reads
/proc/<pid>/cgroup and a mountinfo; changes nothing.

Differences from libnvidia-container (libnvc-spec §4):
- v1 is detected from any controllers field that CONTAINS `devices` (co-mounts like
  `cpu,devices` included), the mount from its super options, not from the mount point's name.
- mountinfo is parsed properly (optional fields, the ` - ` separator, `\\040` escapes) and the
  cgroup root is stripped by path components, not as a string prefix.
- A candidate mount is used only if it is really reachable from here (the mount id of its
  mount point, via fdinfo, is the one in mountinfo), so a hidden v1 mount (runc forced onto
  cgroup v2 in hybrid mode) or a stray directory of the same name is never written to.
- Root cgroups ("/") are never touched: a device rule there would apply to the whole host.
"""

from __future__ import annotations

import os

from nvmount.errors import CgroupError
from nvmount.log import get_logger
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence

log = get_logger(__name__)


@record
class CgroupTarget:
    """The container's device cgroup: its hierarchy version and host directory."""

    version: int  # 1 or 2
    path: str  # host path of the container's devices cgroup dir (v1) or cgroup dir (v2)


@record
class CgroupLine:
    """One line of /proc/<pid>/cgroup: `hierarchy-id:controllers:path`."""

    hierarchy_id: int
    controllers: tuple[str, ...]  # () for the v2 line (and named v1 hierarchies' name= entry)
    path: str


@record
class MountEntry:
    """The fields of one mountinfo line that cgroup detection needs (paths unescaped)."""

    mount_id: int
    root: str  # the path of the mount's root inside its filesystem
    mount_point: str
    fstype: str
    super_options: tuple[str, ...]


@record
class CgroupCandidate:
    """A cgroup directory that may hold the container's device rules."""

    version: int
    path: str  # host path of the cgroup directory
    mount_point: str
    mount_id: int  # the mount `path` must go through


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


_OCTAL_DIGITS = frozenset("01234567")


def unescape_mountinfo(field: str) -> str:
    """Undo the kernel's octal escapes (`\\040` space, `\\011` tab, `\\012` newline, `\\134`)."""
    if "\\" not in field:
        return field
    out: list[str] = []
    at = 0
    while True:
        hit = field.find("\\", at)
        if hit < 0:
            return "".join(out) + field[at:]
        digits = field[hit + 1:hit + 4]
        if len(digits) == 3 and set(digits) <= _OCTAL_DIGITS:
            out += [field[at:hit], chr(int(digits, 8))]
            at = hit + 4
        else:
            out.append(field[at:hit + 1])
            at = hit + 1


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


def cgroup_lines(text: str) -> str:
    """The mountinfo lines of cgroup filesystems only (a host may have a thousand mounts)."""
    return "\n".join(line for line in text.split("\n") if " - cgroup" in line)


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
        mounts = parse_mountinfo(cgroup_lines(_read(mi_path)))
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




# -- every hierarchy (the ldconfig sandbox joins them all) -----------------------------------
def hierarchy_candidates(lines: Sequence[CgroupLine],
                         mounts: Sequence[MountEntry]) -> tuple[tuple[int, CgroupCandidate], ...]:
    """(index in `lines`, candidate dir) for every non-root cgroup of `lines`, all hierarchies:
    v1 lines (named ones included) on the cgroup mounts with their controllers, the v2 line
    on cgroup2 mounts. Root cgroups are left out: joining them limits nothing."""
    out = []
    for index, ln in enumerate(lines):
        if ln.path == "/":
            continue
        v2 = ln.hierarchy_id == 0 and not ln.controllers
        for m in mounts:
            if v2:
                ok = m.fstype == "cgroup2"
            else:
                ok = m.fstype == "cgroup" and all(c in m.super_options for c in ln.controllers)
            rel = _below(ln.path, m.root) if ok and (v2 or ln.controllers) else None
            if rel is not None:
                full = m.mount_point if rel == "/" else m.mount_point.rstrip("/") + rel
                out.append((index, CgroupCandidate(2 if v2 else 1, full, m.mount_point,
                                                   m.mount_id)))
    return tuple(out)


def process_cgroups(pid: int, proc_root: str = "/proc") -> tuple[CgroupTarget, ...]:
    """The cgroup directories of `pid` in every hierarchy (one per cgroup line, reachable from
    here), for a helper that must run under the same limits (memory, pids, cpu, devices).
    Raises CgroupError when a non-root cgroup of `pid` has no reachable directory."""
    cg_path = f"{proc_root}/{pid}/cgroup"
    try:
        lines = parse_proc_cgroup(_read(cg_path))
        mounts = parse_mountinfo(_read(f"{proc_root}/self/mountinfo"))
    except OSError as err:
        raise CgroupError(f"read {err.filename}: {err.strerror} "
                          f"(is process {pid} still running?)") from err
    except ValueError as err:
        raise CgroupError(f"parse {cg_path}: {err}") from err
    found: dict[str, CgroupTarget] = {}
    missing = {i for i, ln in enumerate(lines) if ln.path != "/"}
    reachable: dict[str, int | None] = {}
    for index, c in hierarchy_candidates(lines, mounts):
        if c.mount_point not in reachable:
            reachable[c.mount_point] = _mount_id_of(c.mount_point)
        if reachable[c.mount_point] == c.mount_id and os.path.isdir(c.path):
            found.setdefault(c.path, CgroupTarget(c.version, c.path))
            missing.discard(index)
    if missing:
        where = ", ".join(f"{lines[i].hierarchy_id}:{','.join(lines[i].controllers)}:"
                          f"{lines[i].path}" for i in sorted(missing))
        raise CgroupError(f"find the cgroups of pid {pid}: {where} not reachable from this "
                          "mount namespace (run the hook in the runtime's mount namespace)")
    return tuple(found.values())
