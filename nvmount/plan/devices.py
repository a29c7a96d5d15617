"""Plan device nodes, MIG capabilities, IMEX channels and their cgroup rules. Pure.

libnvc-spec §1.6 (control nodes and their gates), §5.4 (MIG), §5.5 (IMEX). Every exposed
node gets exactly one `c major:minor rw` rule; rules are never wildcards. A MIG selection's
parent GPU arrives in `gpus` (see `plan.selected_gpus`).
"""

from __future__ import annotations

import posixpath

from nvmount.capabilities import UNGATED, DriverCapability
from nvmount.errors import SelectionError
from nvmount.fs.paths import SourceKind
from nvmount.plan.types import RO_DEV, RO_PROC, Bind, DeviceRule, MountFlag, PlanOptions

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover.inventory import DeviceNode, DriverInventory, Gpu, MigDevice
    from nvmount.plan.selection import Selection

PROC_DRIVER = "/proc/driver/nvidia"
PROC_CAPS = PROC_DRIVER + "/capabilities"
DEV_CAPS = "/dev/nvidia-caps"
IMEX_DIR = "/dev/nvidia-caps-imex-channels"
# The caps dir is bound read-only: nodes stay usable (a read-only mount does not stop opening
# a char device for writing) but container root cannot add or unlink host capability nodes.
RO_CAPS_DIR = MountFlag.RDONLY | MountFlag.NOSUID | MountFlag.NOEXEC

# §1.6 gates of the control nodes (the C code tests "major != 195" and "minor == 254").
CONTROL_GATES: dict[str, DriverCapability] = {
    "/dev/nvidiactl": UNGATED,
    "/dev/nvidia-uvm": DriverCapability.COMPUTE | DriverCapability.VIDEO,
    "/dev/nvidia-uvm-tools": DriverCapability.COMPUTE | DriverCapability.VIDEO,
    "/dev/nvidia-modeset": DriverCapability.DISPLAY,
}

Planned = tuple[tuple[Bind, ...], tuple[DeviceRule, ...]]


class _Devices:
    """Accumulates binds and rules, one of each per node (a set keeps it linear: 64 GPUs
    with MIG config make ~9000 rules)."""

    def __init__(self) -> None:
        self.binds: list[Bind] = []
        self.rules: list[DeviceRule] = []
        self._ruled: set[tuple[int, int]] = set()

    def node(self, node: DeviceNode, what: str, gate: DriverCapability) -> None:
        self.binds.append(Bind(node.host_path, node.container_path, SourceKind.DEVICE, RO_DEV,
                               what, rdev=(node.major, node.minor), gate=gate))
        self.rule(node.major, node.minor, node.container_path)

    def rule(self, major: int, minor: int, what: str) -> None:
        if (major, minor) not in self._ruled:
            self._ruled.add((major, minor))
            self.rules.append(DeviceRule(major, minor, "rw", what))


def plan_devices(
    inventory: DriverInventory,
    gpus: tuple[Gpu, ...],
    selection: Selection,
    capabilities: DriverCapability,
    options: PlanOptions,
) -> Planned:
    """Control nodes, GPU nodes, MIG caps and IMEX channels, with one rule per node."""
    out = _Devices()
    for node in inventory.control_nodes:
        gate = CONTROL_GATES.get(node.container_path, node.capabilities)
        if not gate or gate & capabilities:
            out.node(node, "device", gate)
    graphics = DriverCapability.GRAPHICS | DriverCapability.DISPLAY
    for gpu in gpus:
        out.node(gpu.node, "gpu device", UNGATED)
        if capabilities & graphics:  # the GPU's DRM nodes (/dev/dri/card*, renderD*)
            for dri in gpu.dri_nodes:
                out.node(dri, "dri device", graphics)
    if selection.mig_config or selection.mig_monitor:
        _plan_mig_all(inventory, selection, out)
    else:
        for mig in selection.mig_devices:
            _plan_mig_device(inventory, mig, out)
    for channel in options.imex_channels:
        out.node(_imex_node(inventory, channel), "imex channel", UNGATED)
    for family, node in inventory.gated_nodes:  # NVIDIA_GDS=enabled and the like
        if family in options.features:
            out.node(node, f"{family} device", UNGATED)
    return tuple(out.binds), tuple(out.rules)


def proc_paths(inventory: DriverInventory, path: str) -> tuple[str, str]:
    """(host source, container target) of a /proc/driver/nvidia path given either way."""
    host_dir = inventory.proc_driver_dir.rstrip("/")
    if host_dir and path.startswith(host_dir + "/"):
        return path, PROC_DRIVER + path[len(host_dir):]
    if path.startswith(PROC_DRIVER + "/"):
        return host_dir + path[len(PROC_DRIVER):], path
    return path, path


def _plan_mig_device(inventory: DriverInventory, mig: MigDevice, out: _Devices) -> None:
    """§5.4 default case: GI then CI `access` file, each followed by its cap node."""
    for access, cap in ((mig.gi_access, mig.gi_cap), (mig.ci_access, mig.ci_cap)):
        host, target = proc_paths(inventory, access)
        out.binds.append(Bind(host, target, SourceKind.FILE, RO_PROC, "mig access"))
        if cap is not None and inventory.caps_major is not None:
            out.node(cap, "mig device", UNGATED)


def _plan_mig_all(inventory: DriverInventory, selection: Selection, out: _Devices) -> None:
    """§5.4 mig-config/mig-monitor `all`: the caps trees plus rules for every GPU cap.

    Both asked: the trees are bound once; the GPUs are those of both lists.
    """
    host_caps, _ = proc_paths(inventory, PROC_CAPS)
    out.binds.append(Bind(host_caps, PROC_CAPS, SourceKind.DIRECTORY, RO_PROC, "mig caps"))
    if inventory.caps_major is None:
        return
    caps: list[tuple[bool, DeviceNode | None]] = [
        (selection.mig_config, inventory.mig_config_cap),
        (selection.mig_monitor, inventory.mig_monitor_cap),
    ]
    nodes = [node for wanted, node in caps if wanted and node is not None]
    if nodes:
        host_dev = posixpath.dirname(nodes[0].host_path)
        out.binds.append(Bind(host_dev, DEV_CAPS, SourceKind.DIRECTORY, RO_CAPS_DIR,
                              "mig caps dev"))
    for node in nodes:
        out.rule(node.major, node.minor, node.container_path)
    heads = dict.fromkeys(f"gpu{g.minor}" for g in (*selection.mig_config_gpus,
                                                     *selection.mig_monitor_gpus)
                          if g.mig_capable)
    by_gpu: dict[str, list[int]] = {}  # one pass over the ~4300 lines, not one per GPU
    for name, minor in inventory.mig_minors:
        head, sep, _ = name.partition("/")
        if sep and head in heads:
            by_gpu.setdefault(head, []).append(minor)
    for head in heads:
        for minor in by_gpu.get(head, ()):
            out.rule(inventory.caps_major, minor, f"{DEV_CAPS}/nvidia-cap{minor}")


def _imex_node(inventory: DriverInventory, channel: int) -> DeviceNode:
    path = f"{IMEX_DIR}/channel{channel}"
    for node in inventory.imex_channels:
        if node.container_path == path:
            return node
    raise SelectionError(f"missing IMEX channel {channel}: {path} does not exist on the host "
                         "(create it, or drop the channel from NVIDIA_IMEX_CHANNELS)")
