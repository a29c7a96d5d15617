"""Device cgroup: allow the plan's device rules in the container's cgroup (v1 or v2).

Stage: cgroup. `allow_devices` validates the rules and hands them to `nvmount.cgroup.v1`
(`devices.allow`, undone through `devices.deny`) or `nvmount.cgroup.bpf` (the cgroup's
BPF_CGROUP_DEVICE programs, replaced atomically). v1 rules go to a cgroupfs checked with
fstatfs, opened with O_NOFOLLOW from the cgroup directory fd; rules already covered by
devices.list are not written, so `undo` removes exactly what was added. Wildcards and
out-of-range numbers are refused.
"""

from __future__ import annotations

from nvmount.cgroup.common import NoChange, validate_rules
from nvmount.container.cgroup import CgroupTarget
from nvmount.errors import CgroupError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nvmount._libc import Libc
    from nvmount.cgroup.common import CgroupChange
    from nvmount.plan.types import DeviceRule


def allow_devices(target: CgroupTarget, rules: Sequence[DeviceRule], libc: Libc,
                  point: Callable[[str], None] | None = None) -> CgroupChange:
    """Allow `rules` (char devices) in the cgroup; atomic per rule (v1) or per program (v2).

    `point(step)` runs before each change: each write of a v1 rule ("cgroup allow c 195:0
    rw"), the one replacement of the v2 programs ("cgroup allow" and every rule). On failure
    (of a change or of `point`) everything done so far is undone and the error raised.
    """
    valid = validate_rules(rules)
    if not valid:
        return NoChange(target.path)
    if target.version == 2:
        from nvmount.cgroup.bpf import allow_devices_bpf
        from nvmount.cgroup.common import format_rule

        if point is not None:
            point(f"cgroup allow {', '.join(format_rule(r) for r in valid)}")
        return allow_devices_bpf(target, valid, libc)
    if target.version != 1:
        raise CgroupError(f"update cgroup {target.path}: unknown cgroup version {target.version}")
    from nvmount.cgroup.v1 import allow_devices_v1

    return allow_devices_v1(target.path, valid, libc, point)


