"""Register the container's GPU device rules with its systemd scope (DeviceAllow=).

Stage: cgroup, after the rules are in the cgroup (v1 devices.allow or the v2 program). With
runc's or crun's systemd cgroup driver the container's cgroup is a transient scope that
systemd owns: at the next `systemctl daemon-reload` systemd rebuilds the scope's device
rules (v1 devices.deny/allow, v2 its BPF program) from its own record of the unit, and a
rule written behind its back is lost - the container's processes get EPERM on
/dev/nvidia*. Adding the rules to the unit's DeviceAllow= property through systemd's D-Bus
API (`SetUnitProperties(unit, runtime=true, ...)`, what runc does for config.json's devices)
makes them part of that record. Paths are `/dev/char/MAJOR:MINOR`: systemd reads the device
number from the name (no node, no udev link needed; nvhook also makes the links for the
nodes it creates, for older systemd and for tools).

Only imported when `nvmount.cgroup.common.systemd_scope` named a scope: a cgroupfs path
costs the hook nothing. Never fails a start: the caller turns SystemdError into a warning.
"""

from __future__ import annotations

import os

from nvmount.errors import SystemdError
from nvmount.log import get_logger
from nvmount.systemd import bus, wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvmount.plan.types import DeviceRule

log = get_logger(__name__)

TIMEOUT_S = 2.0  # connect + auth + reply; systemd answers in milliseconds when not busy
BOOTED = "/run/systemd/system"  # sd_booted(): systemd is the init of this /run


def device_allow(rules: Sequence[DeviceRule]) -> list[tuple[str, str]]:
    """DeviceAllow= entries for char-device rules, in order, without repeats."""
    out: dict[tuple[str, str], None] = {}
    for rule in rules:
        out.setdefault((f"/dev/char/{rule.major}:{rule.minor}", rule.access))
    return list(out)


def register(unit: str, rules: Sequence[DeviceRule], timeout: float = TIMEOUT_S,
             where: tuple[tuple[str, str, bool], ...] | None = None) -> str:
    """Append `rules` to `unit`'s DeviceAllow=; what was done, for the log. SystemdError
    when systemd cannot be reached in `timeout` or refuses (the unit is gone, ...)."""
    entries = device_allow(rules)
    if not entries:
        return f"systemd unit {unit}: no device rules"
    what = f"register {len(entries)} devices with systemd unit {unit}"
    try:
        reply = bus.call(lambda serial: wire.set_unit_properties(serial, unit, entries),
                         timeout, where)
    except SystemdError as err:
        raise SystemdError(f"{what}: {err}") from err
    if reply.kind == wire.ERROR:
        raise SystemdError(f"{what}: {reply.error_text()}")
    return f"systemd unit {unit}: DeviceAllow= {len(entries)} devices"


def register_quietly(unit: str, rules: Sequence[DeviceRule]) -> str | None:
    """`register`, for the hook: None when this /run has no systemd (not its cgroup); the
    warning text (logged once) when systemd did not take the rules."""
    if not os.path.isdir(BOOTED):
        log.info("cgroup scope %s but no systemd in /run: DeviceAllow= not set", unit)
        return None
    try:
        done = register(unit, rules)
    except SystemdError as err:
        text = (f"{err} (the container starts with its GPUs; a `systemctl daemon-reload` "
                "will remove them from it)")
        log.warning("%s", text)
        return text
    log.info("%s", done)
    return None
