"""Spec mode, the wrapper's side: the runtime's share of a container's mount plan as OCI spec
entries. Pure (the node modes are read by the caller).

`nvmount.plan.split.runtime_share` picks the entries; this module writes them as runc and
crun read them:

    mounts:                   {"destination": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                               "type": "bind", "source": "<host path>",
                               "options": ["bind", "ro", "nosuid", "nodev"]}
    linux.devices:            {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0,
                               "fileMode": 438, "uid": 0, "gid": 0}
    linux.resources.devices:  {"allow": true, "type": "c", "major": 195, "minor": 0,
                               "access": "rw"}

Mount options are the plan's flags (the same as the hook would set); device rules grant `rw`
like the hook's (runc creates the nodes itself, so no `m` is needed). The hook, seeing these
in config.json (`nvhook.hook.spec_mode`), applies only the rest of the same plan.
"""

from __future__ import annotations

from nvmount.api import Bind, MountFlag, MountPlan, runtime_share

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

_WORDS = ((MountFlag.RDONLY, "ro"), (MountFlag.NOSUID, "nosuid"), (MountFlag.NODEV, "nodev"),
          (MountFlag.NOEXEC, "noexec"))


class SpecEntries:
    """The runtime's share of a plan, as JSON-ready spec entries."""

    __slots__ = ("devices", "mounts", "rules")

    def __init__(self, mounts: list[dict[str, Any]], devices: list[dict[str, Any]],
                 rules: list[dict[str, Any]]) -> None:
        self.mounts, self.devices, self.rules = mounts, devices, rules


def mount_options(flags: MountFlag) -> list[str]:
    return ["bind", *(word for flag, word in _WORDS if flag in flags)]


def spec_mount(bind: Bind) -> dict[str, Any]:
    return {"destination": bind.target, "type": "bind", "source": bind.source,
            "options": mount_options(bind.flags)}


def spec_device(node: Bind, mode: int) -> dict[str, Any]:
    assert node.rdev is not None
    major, minor = node.rdev
    return {"path": node.target, "type": "c", "major": major, "minor": minor,
            "fileMode": mode & 0o777, "uid": 0, "gid": 0}


def device_nodes(plan: MountPlan) -> tuple[Bind, ...]:
    """The plan's device-node binds (whose host modes the caller reads)."""
    return runtime_share(plan)[1]


def spec_entries(plan: MountPlan, node_modes: dict[str, int]) -> SpecEntries:
    """Mounts, device nodes and rules for `plan`; `node_modes` maps host node path -> mode."""
    mounts, nodes, rules = runtime_share(plan)
    return SpecEntries(
        mounts=[spec_mount(b) for b in mounts],
        devices=[spec_device(n, node_modes.get(n.source, 0o666)) for n in nodes],
        rules=[{"allow": True, "type": "c", "major": r.major, "minor": r.minor,
                "access": r.access} for r in rules])
