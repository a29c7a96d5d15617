"""One plan, two deliveries: what an OCI runtime can do itself, and what is left for the hook.

Stage: plan (pure; no I/O). A `MountPlan` is delivered either entirely by the prestart hook
(legacy mode) or split (spec mode): the runtime wrapper writes the runtime's share into the
bundle's `config.json` before runc/crun reads it, and the hook applies the rest.

- The runtime's share (`runtime_share`): bind mounts of host driver files (binaries,
  libraries, firmware, IPC sockets, the MPS dir, the /dev/nvidia-caps dir) become `mounts`;
  device nodes become `linux.devices`; every device rule goes to `linux.resources.devices`.
  runc and crun mount, create and allow these themselves, so systemd and the runtime own the
  device rules (they survive `systemctl daemon-reload`).
- The hook's share (`hook_share`): everything a runtime cannot express in a spec: the procfs
  view (runc refuses mounts inside /proc), files written into our tmpfs mounts, symlinks, and
  ldconfig (from `MountPlan.ldconfig_dirs`, unchanged).

`hook_share(plan, delivered)` drops exactly the entries and rules that `delivered` (read by the
hook from the container's own `config.json`) shows the runtime will already do: the same
source at the same target, the same node at the same path, the same rule. So it is correct
whoever edited the spec, and a spec that was not edited leaves the plan whole.
"""

from __future__ import annotations

from nvmount.fs.paths import SourceKind
from nvmount.plan.types import Bind, DeviceRule, MountPlan, PlanEntry

# Bind labels (`Bind.what`) of host files a runtime can bind-mount from the spec's `mounts`.
RUNTIME_MOUNTS = frozenset({"binary", "library", "library32", "firmware", "ipc",
                            "mig caps dev", "graphics", "gated", "driver file"})


class Delivered:
    """What the container's spec already makes the runtime do (the hook's view of it).

    mounts: (source, destination) pairs of bind mounts; devices: (path, major, minor) of
    character devices; rules: (major, minor) of `c M:m` allow rules that grant read and write;
    all_devices: every device node is made by someone else (nvidia-container-cli's
    `--no-devbind`).
    """

    __slots__ = ("all_devices", "devices", "mounts", "rules")

    def __init__(self, mounts: frozenset[tuple[str, str]] = frozenset(),
                 devices: frozenset[tuple[str, int, int]] = frozenset(),
                 rules: frozenset[tuple[int, int]] = frozenset(), *,
                 all_devices: bool = False) -> None:
        self.mounts, self.devices, self.rules = mounts, devices, rules
        self.all_devices = all_devices

    def __bool__(self) -> bool:
        return bool(self.mounts or self.devices or self.rules or self.all_devices)

    def __repr__(self) -> str:
        return (f"Delivered(mounts={len(self.mounts)}, devices={len(self.devices)}, "
                f"rules={len(self.rules)})")


def is_runtime_mount(entry: PlanEntry) -> bool:
    """A bind of a host driver file or directory that a runtime can mount from `mounts`."""
    return isinstance(entry, Bind) and entry.what in RUNTIME_MOUNTS


def is_device_node(entry: PlanEntry) -> bool:
    """A character device node that a runtime can create from `linux.devices`."""
    return isinstance(entry, Bind) and entry.kind == SourceKind.DEVICE and entry.rdev is not None


def runtime_share(plan: MountPlan) -> tuple[tuple[Bind, ...], tuple[Bind, ...],
                                             tuple[DeviceRule, ...]]:
    """(bind mounts, device nodes, device rules) a runtime can deliver, in plan order."""
    mounts = tuple(e for e in plan.entries if isinstance(e, Bind) and is_runtime_mount(e))
    nodes = tuple(e for e in plan.entries if isinstance(e, Bind) and is_device_node(e))
    return mounts, nodes, plan.device_rules


def is_delivered(entry: PlanEntry, delivered: Delivered) -> bool:
    """Whether the runtime already does `entry` (same source and target, or same node)."""
    if not isinstance(entry, Bind):
        return False
    if is_device_node(entry):
        assert entry.rdev is not None
        return delivered.all_devices or (entry.target, *entry.rdev) in delivered.devices
    return is_runtime_mount(entry) and (entry.source, entry.target) in delivered.mounts


def hook_share(plan: MountPlan, delivered: Delivered | None) -> MountPlan:
    """`plan` without what `delivered` shows the runtime does; `plan` itself when nothing is."""
    if not delivered:
        return plan
    entries = tuple(e for e in plan.entries if not is_delivered(e, delivered))
    rules = tuple(r for r in plan.device_rules if (r.major, r.minor) not in delivered.rules)
    if len(entries) == len(plan.entries) and len(rules) == len(plan.device_rules):
        return plan
    return MountPlan(
        entries=entries, device_rules=rules, ldconfig_dirs=plan.ldconfig_dirs,
        libs_dir=plan.libs_dir, libs32_dir=plan.libs32_dir, bins_dir=plan.bins_dir,
        capabilities=plan.capabilities, gpus=plan.gpus, mig_devices=plan.mig_devices,
        warnings=plan.warnings, driver_version=plan.driver_version,
        cuda_version=plan.cuda_version, driver_root=plan.driver_root)
