"""Device cgroup, v1: allow rules in `devices.allow`, undo them through `devices.deny`.

Stage: the last step of apply. Writes only the container's devices cgroup, through a directory
fd whose filesystem is checked to be a cgroup v1 fs, opening the control files with O_NOFOLLOW.
Rules that devices.list already grants are not written, and only the missing access letters
are: `undo` then denies exactly what was added and nothing that was there before. A cgroup in
allow-all mode (`a *:* rwm`) is left alone. (libnvc-spec §4.3 writes every rule blindly.)
"""

from __future__ import annotations

import errno
import os

from nvmount.cgroup.common import ACCESS_ORDER, format_rule, open_cgroup_dir, undo_quietly
from nvmount.errors import CgroupError
from nvmount.log import get_logger
from nvmount.records import record, replace

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nvmount._libc import Libc
    from nvmount.cgroup.common import CgroupChange
    from nvmount.plan.types import DeviceRule

log = get_logger(__name__)


@record
class ListEntry:
    """One line of a v1 `devices.list`: `c 195:0 rw`, `a *:* rwm` (None = `*`)."""

    kind: str  # "a", "b" or "c"
    major: int | None
    minor: int | None
    access: str


def parse_devices_list(text: str) -> tuple[ListEntry, ...]:
    out = []
    for line in text.splitlines():
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        numbers, _, access = rest.partition(" ")
        major, sep, minor = numbers.partition(":")
        if kind not in ("a", "b", "c") or not sep or not access:
            raise ValueError(f"not a devices.list line: {line!r}")
        out.append(ListEntry(kind, None if major == "*" else int(major),
                             None if minor == "*" else int(minor), access))
    return tuple(out)


def missing_access(listed: Sequence[ListEntry] | Granted, rule: DeviceRule) -> str:
    """The letters of `rule.access` that no entry of devices.list grants yet."""
    granted = listed if isinstance(listed, Granted) else Granted(listed)
    have = granted.access(rule.major, rule.minor)
    return "".join(c for c in ACCESS_ORDER if c in rule.access and c not in have)


class Granted:
    """The char-device access a devices.list grants, indexed by (major, minor): a lookup per
    rule costs the same with 10 listed entries or 9000 (a list scan per rule would not)."""

    def __init__(self, listed: Sequence[ListEntry]) -> None:
        self.exact: dict[tuple[int | None, int | None], str] = {}
        for e in listed:
            if e.kind in ("a", "c"):
                key = (e.major, e.minor)
                self.exact[key] = self.exact.get(key, "") + e.access

    def access(self, major: int, minor: int) -> str:
        get = self.exact.get
        return (get((major, minor), "") + get((major, None), "") + get((None, minor), "")
                + get((None, None), ""))


class V1Change:
    """Rules written to a v1 devices cgroup; `undo` denies exactly the access we added."""

    def __init__(self, path: str, dir_fd: int, libc: Libc) -> None:
        self.path = path
        self.added: list[DeviceRule] = []  # access = only the letters we added
        self._dir_fd: int | None = dir_fd
        self._libc = libc

    def describe(self) -> str:
        rules = ", ".join(format_rule(r) for r in self.added) or "nothing"
        return f"cgroup v1 {self.path}: allowed {rules}"

    def undo(self) -> None:
        removed: list[DeviceRule] = []
        try:
            if self._dir_fd is not None and self.added:
                _write_rules(self._dir_fd, "devices.deny", self.added[::-1], self._libc, removed)
        except OSError as err:
            raise CgroupError(f"remove device rules from {self.path}/devices.deny: "
                              f"{err.strerror} (left: {self.describe()})") from err
        finally:
            gone = set(removed)  # not list.remove per rule: quadratic with ~9000 rules
            self.added = [r for r in self.added if r not in gone]
            self.close()

    def close(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None


def _write_rules(dir_fd: int, control: str, rules: Sequence[DeviceRule], libc: Libc,
                 written: list[DeviceRule], point: Callable[[str], None] | None = None) -> None:
    """One rule per write(2) to `control` (devices.allow / devices.deny), checked cgroupfs."""
    from nvmount import _libc as L

    fd = os.open(control, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if libc.fstatfs_type(fd) != L.CGROUP_SUPER_MAGIC:
            raise OSError(errno.EACCES, f"{control} is not on a cgroup v1 filesystem")
        for rule in rules:
            line = format_rule(rule)
            if point is not None:
                point("cgroup allow " + line)
            try:
                os.write(fd, line.encode())
            except OSError as err:
                raise OSError(err.errno, f"write '{line}' to {control}: "
                              f"{err.strerror}") from err
            written.append(rule)
    finally:
        os.close(fd)


def allow_devices_v1(path: str, rules: tuple[DeviceRule, ...], libc: Libc,
                     point: Callable[[str], None] | None = None) -> CgroupChange:
    """Write the (validated) rules' missing access to devices.allow, one rule per write
    (`point(step)` before each), after one read of devices.list, through one open."""
    from nvmount import _libc as L

    change = V1Change(path, open_cgroup_dir(path, libc, os.O_PATH, L.CGROUP_SUPER_MAGIC, 1), libc)
    try:
        assert change._dir_fd is not None
        fd = os.open("devices.list", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=change._dir_fd)
        with open(fd, "rb") as f:
            listed = parse_devices_list(os.fsdecode(f.read()))
        granted = Granted(listed)
        todo = []
        for r in rules:  # a new record only where devices.list already grants some access
            missing = missing_access(granted, r)
            todo.append(r if missing == r.access else replace(r, access=missing))
        _write_rules(change._dir_fd, "devices.allow", [r for r in todo if r.access], libc,
                     change.added, point)
    except (OSError, ValueError) as err:
        undo_quietly(change)
        cause = err.strerror if isinstance(err, OSError) else str(err)
        hint = ("the parent cgroup must allow it too, and the hook needs CAP_SYS_ADMIN"
                if getattr(err, "errno", 0) == errno.EPERM else "is the container still running?")
        raise CgroupError(f"allow devices in {path}: {cause} ({hint})") from err
    except BaseException:
        undo_quietly(change)
        raise
    log.info("%s", change.describe())
    return change
