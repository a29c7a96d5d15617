"""Driver device nodes, GPUs, MIG capabilities and IMEX channels (libnvc-spec §1.6, §5.4, §5.5).

Majors of the dynamic devices come from `<proc_root>/devices`; the MIG minors list from
`<proc_root>/driver/nvidia-caps/mig-minors`; cap files, device nodes and the per-GPU proc dirs
from the driver root (confined through `DriverRoot`). Reads only.
"""

from __future__ import annotations

import os
import re
import stat

from nvmount.capabilities import DriverCapability as Cap
from nvmount.discover.inventory import DeviceNode, Gpu, MigDevice
from nvmount.errors import DriverError, strerror
from nvmount.log import get_logger
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Collection

    from nvmount.discover._nvml import NvmlDevice, NvmlMig
    from nvmount.discover.driver_root import DriverRoot

log = get_logger(__name__)

NV_MAJOR = 195
CTL_MINOR = 255
MODESET_MINOR = 254
PROC_DRIVER = "/proc/driver/nvidia"
PROC_CAPS = PROC_DRIVER + "/capabilities"
CAPS_DEV_DIR = "/dev/nvidia-caps"
IMEX_DIR = "/dev/nvidia-caps-imex-channels"
MAX_IMEX_CHANNEL = 1 << 20
_CAP_LINE = re.compile(r"([^:]{1,31}):\s*([+-]?\d+)")
_CHANNEL = re.compile(r"channel([0-9]{1,7})")  # bounded: below 2^20


def read_char_majors(proc_root: str) -> dict[str, int]:
    """name -> major of the "Character devices:" section of <proc_root>/devices."""
    path = os.path.join(proc_root, "devices")
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError as err:
        raise DriverError(f"read {path}: {strerror(err)} (is proc "
                          f"mounted, and is [nvhook] proc-root right?)") from err
    majors: dict[str, int] = {}
    in_char = False
    for line in text.splitlines():
        if line.strip().endswith(":"):
            in_char = line.strip() == "Character devices:"
            continue
        fields = line.split()
        if in_char and len(fields) == 2 and fields[0].isdigit():
            majors.setdefault(fields[1], int(fields[0]))
    return majors


def read_mig_minors(proc_root: str, gpu_minors: Collection[int] | None = None) -> tuple[
        tuple[str, int], ...]:
    """(cap name, minor) lines of <proc_root>/driver/nvidia-caps/mig-minors.

    The kernel lists every possible GI and CI of 32 GPUs (~4300 lines); only `config`,
    `monitor` and the lines of `gpu_minors` (all GPUs when None) are kept, matched by one
    multi-line regex so that discovery stays fast.
    """
    if gpu_minors is not None and not gpu_minors:
        return ()  # no MIG-capable GPU: nothing will ever use these minors
    path = os.path.join(proc_root, "driver/nvidia-caps/mig-minors")
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read(4 << 20)
    except FileNotFoundError:
        return ()
    except OSError as err:
        raise DriverError(f"read {path}: {strerror(err)}") from err
    gpus = r"\d+" if gpu_minors is None else "|".join(str(m) for m in sorted(set(gpu_minors)))
    pattern = re.compile(
        rf"^(gpu(?:{gpus})/gi\d+(?:/ci\d+)?/access|config|monitor) (\d+)$", re.MULTILINE)
    return tuple((name, int(minor)) for name, minor in pattern.findall(text))


@record
class NodeOptions:
    """Which optional control nodes to leave out (libnvc's no-uvm, no-modeset)."""

    no_uvm: bool = False
    no_modeset: bool = False


def _stat_node(root: DriverRoot, path: str, expected: tuple[int, int] | None,
               warnings: list[str]) -> DeviceNode | None:
    """A stat'ed driver node; missing or wrong-type nodes give a warning and None."""
    hit = root.resolve(path)
    host = root.host(hit.path)
    try:
        st = os.stat(host, follow_symlinks=False) if hit.exists else None
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise DriverError(f"stat {host}: {strerror(err)}") from err
    if st is None:
        warnings.append(f"missing device {path}")
        return None
    if not stat.S_ISCHR(st.st_mode):
        warnings.append(f"skipping device {path}: {host} is not a character device")
        return None
    rdev = (os.major(st.st_rdev), os.minor(st.st_rdev))
    if expected is not None and rdev != expected:
        warnings.append(f"skipping device {path}: it is {rdev[0]}:{rdev[1]}, the driver says "
                        f"{expected[0]}:{expected[1]} (recreate the node, e.g. nvidia-modprobe)")
        return None
    return DeviceNode(host, path, rdev[0], rdev[1])


def control_nodes(root: DriverRoot, majors: dict[str, int], opts: NodeOptions,
                  warnings: list[str]) -> tuple[DeviceNode, ...]:
    """nvidiactl (always, not stat'ed), nvidia-uvm and -tools, nvidia-modeset; in that order."""
    ctl = root.resolve("/dev/nvidiactl")
    nodes = [DeviceNode(root.host(ctl.path), "/dev/nvidiactl", NV_MAJOR, CTL_MINOR, Cap(0))]
    uvm = majors.get("nvidia-uvm")
    wanted: list[tuple[str, tuple[int, int] | None, Cap]] = []
    if not opts.no_uvm:
        compute = Cap.COMPUTE | Cap.VIDEO
        wanted += [("/dev/nvidia-uvm", None if uvm is None else (uvm, 0), compute),
                   ("/dev/nvidia-uvm-tools", None if uvm is None else (uvm, 1), compute)]
    if not opts.no_modeset:
        wanted.append(("/dev/nvidia-modeset", (NV_MAJOR, MODESET_MINOR), Cap.DISPLAY))
    for path, expected, gate in wanted:
        node = _stat_node(root, path, expected, warnings)
        if node is not None:
            nodes.append(DeviceNode(node.host_path, path, node.major, node.minor, gate))
    return tuple(nodes)


def cap_node(root: DriverRoot, proc_path: str, caps_major: int | None) -> DeviceNode | None:
    """The /dev/nvidia-caps node of a cap file (its first `DeviceFileMinor: N`), or None."""
    if caps_major is None:
        return None
    hit = root.resolve(proc_path)
    if not hit.exists:
        return None
    try:
        with open(root.host(hit.path), encoding="ascii", errors="replace") as f:
            text = f.read(64 << 10)
    except OSError as err:
        log.debug("read %s: %s", root.host(hit.path), err)
        return None
    for line in text.splitlines():
        m = _CAP_LINE.match(line)
        if m and m.group(1) == "DeviceFileMinor":
            minor = int(m.group(2))
            path = f"{CAPS_DEV_DIR}/nvidia-cap{minor}"
            return DeviceNode(root.host(root.resolve(path).path), path, caps_major, minor)
    return None


def imex_channels(root: DriverRoot, imex_major: int | None) -> tuple[DeviceNode, ...]:
    """The IMEX channel nodes present under the driver root, by channel number."""
    if imex_major is None:
        return ()
    hit = root.resolve(IMEX_DIR)
    if not hit.exists:
        return ()
    try:
        names = os.listdir(root.host(hit.path))
    except (FileNotFoundError, NotADirectoryError):
        return ()
    except OSError as err:
        raise DriverError(f"list {root.host(hit.path)}: {strerror(err)}"
                          ) from err
    channels = sorted(int(m.group(1)) for m in map(_CHANNEL.fullmatch, names)
                      if m and int(m.group(1)) < MAX_IMEX_CHANNEL)
    return tuple(
        DeviceNode(root.host(root.resolve(f"{IMEX_DIR}/channel{n}").path),
                   f"{IMEX_DIR}/channel{n}", imex_major, n)
        for n in channels)


def gpu_proc_dir(root: DriverRoot, bus_id: str) -> str:
    """Host path of /proc/driver/nvidia/gpus/<bus id>, trying the 8- then the 4-digit domain."""
    for form in (bus_id, bus_id[4:]):
        hit = root.resolve(f"{PROC_DRIVER}/gpus/{form}")
        if hit.exists:
            return root.host(hit.path)
    return ""


def _mig_device(root: DriverRoot, gpu: NvmlDevice, m: NvmlMig,
                caps_major: int | None) -> MigDevice:
    """A MIG device with its GI/CI access files (by the GPU's minor) and their cap nodes."""
    gi_access = f"{PROC_CAPS}/gpu{gpu.minor}/mig/gi{m.gi}/access"
    ci_access = f"{PROC_CAPS}/gpu{gpu.minor}/mig/gi{m.gi}/ci{m.ci}/access"
    return MigDevice(index=m.index, uuid=m.uuid, gi=m.gi, ci=m.ci, profile=m.profile,
                     gi_access=gi_access, ci_access=ci_access,
                     gi_cap=cap_node(root, gi_access, caps_major),
                     ci_cap=cap_node(root, ci_access, caps_major), gpu_index=gpu.index)


def build_gpus(root: DriverRoot, devices: tuple[NvmlDevice, ...], caps_major: int | None,
               warnings: list[str]) -> tuple[Gpu, ...]:
    """`Gpu` records from NVML's view, with their /dev node, proc dir and MIG cap nodes."""
    gpus = []
    for d in devices:
        path = f"/dev/nvidia{d.minor}"
        node = DeviceNode(root.host(root.resolve(path).path), path, NV_MAJOR, d.minor)
        proc_dir = gpu_proc_dir(root, d.bus_id)
        if not proc_dir:
            warnings.append(f"missing proc dir {PROC_DRIVER}/gpus/{d.bus_id} of gpu {d.uuid}")
        migs = tuple(_mig_device(root, d, m, caps_major) for m in d.migs)
        gpus.append(Gpu(index=d.index, minor=d.minor, uuid=d.uuid, bus_id=d.bus_id,
                        model=d.name, brand=d.brand, architecture=d.architecture, node=node,
                        proc_dir=proc_dir, mig_capable=d.mig_capable,
                        mig_enabled=d.mig_enabled, mig_devices=migs))
    return tuple(gpus)
