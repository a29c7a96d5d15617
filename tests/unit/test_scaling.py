"""The hook's work grows linearly with the GPUs and MIG devices (issue 19, class 5).

A privileged container on 64 simulated GPUs with 7 MIG devices each (448 MIG devices, ~8800
device rules with mig-config/mig-monitor `all`) took 16-21 s per start: the plan deduplicated
rules with a scan per rule, `validate_rules` did the same with record comparisons, MIG devices
were matched to their parents with a scan per device. Not a timed test: it counts the Python
calls (`sys.setprofile`: Python and C functions) of every pure step of a start, from the
inventory cache's decoding to the cgroup program, at 16, 32 and 64 GPUs. Linear work doubles
its increment when the GPUs double; quadratic work quadruples it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from nvmount.capabilities import DriverCapability as C
from nvmount.cgroup.bpf import extend_program
from nvmount.cgroup.common import validate_rules
from nvmount.cgroup.v1 import Granted, missing_access, parse_devices_list
from nvmount.discover import cache
from nvmount.discover.inventory import (
    DeviceNode,
    DriverFile,
    DriverInventory,
    FileKind,
    Gpu,
    MigDevice,
)
from nvmount.discover.procfiles import ProcFile
from nvmount.plan.mounts import plan_mounts
from nvmount.plan.requirements import check_requirements, requirement_facts
from nvmount.plan.selection import select_devices
from nvmount.plan.types import ContainerLayout, PlanOptions

ROOT = "/drv"
LIB = "/usr/lib/x86_64-linux-gnu"
MIGS = 7
GIS, CIS = 15, 8  # the lines per GPU of a real driver's mig-minors file: gi0..14, ci0..7
RUNC_LIST = "c *:* m\nb *:* m\nc 1:3 rwm\nc 1:5 rwm\nc 5:0 rwm\nc 136:* rwm\nc 10:200 rwm\n"


def _node(path: str, major: int, minor: int) -> DeviceNode:
    return DeviceNode(ROOT + path, path, major, minor)


def _cap_minor(gpu: int, gi: int, ci: int | None) -> int:
    per_gpu = GIS * (1 + CIS)
    return 3 + gpu * per_gpu + gi * (1 + CIS) + (0 if ci is None else 1 + ci)


def _gpu(n: int) -> Gpu:
    migs = []
    for i in range(MIGS):
        base = f"/proc/driver/nvidia/capabilities/gpu{n}/mig/gi{i + 1}"
        migs.append(MigDevice(
            i, f"MIG-{n:04d}-{i}", i + 1, 0, "1g.10gb", f"{base}/access", f"{base}/ci0/access",
            _node(f"/dev/nvidia-caps/nvidia-cap{_cap_minor(n, i + 1, None)}", 237,
                  _cap_minor(n, i + 1, None)),
            _node(f"/dev/nvidia-caps/nvidia-cap{_cap_minor(n, i + 1, 0)}", 237,
                  _cap_minor(n, i + 1, 0)), gpu_index=n))
    bus = f"00000000:{n + 7:02x}:00.0"
    return Gpu(n, n, f"GPU-{n:08d}", bus, "NVIDIA A100", "Tesla", "8.0",
               _node(f"/dev/nvidia{n}", 195, n), f"{ROOT}/proc/driver/nvidia/gpus/{bus}",
               mig_capable=True, mig_enabled=True, mig_devices=tuple(migs))


def _mig_minors(gpus: int) -> tuple[tuple[str, int], ...]:
    lines = [("config", 1), ("monitor", 2)]
    for n in range(gpus):
        for gi in range(GIS):
            lines.append((f"gpu{n}/gi{gi}/access", _cap_minor(n, gi, None)))
            lines += [(f"gpu{n}/gi{gi}/ci{ci}/access", _cap_minor(n, gi, ci))
                      for ci in range(CIS)]
    return tuple(lines)


def inventory(gpus: int) -> DriverInventory:
    libs = tuple(DriverFile(FileKind.LIBRARY, f"{ROOT}{LIB}/{n}.so.550.54.15",
                            f"{LIB}/{n}.so.550.54.15", gate, f"{n}.so.1")
                 for n, gate in (("libcuda", C.COMPUTE), ("libnvidia-ml", C.UTILITY),
                                 ("libnvidia-glcore", C.GRAPHICS)))
    return DriverInventory(
        root=ROOT, driver_version="550.54.15", cuda_version="12.4",
        gpus=tuple(_gpu(n) for n in range(gpus)), libraries=libs, libraries32=(), firmware=(),
        ipc=(), binaries=(DriverFile(FileKind.BINARY, f"{ROOT}/usr/bin/nvidia-smi",
                                     "/usr/bin/nvidia-smi", C.UTILITY),),
        control_nodes=(_node("/dev/nvidiactl", 195, 255), _node("/dev/nvidia-uvm", 510, 0)),
        proc_driver_dir=f"{ROOT}/proc/driver/nvidia", caps_major=237,
        mig_minors=_mig_minors(gpus),
        mig_config_cap=_node("/dev/nvidia-caps/nvidia-cap1", 237, 1),
        mig_monitor_cap=_node("/dev/nvidia-caps/nvidia-cap2", 237, 2))


def start(inv_encoded: object) -> int:
    """Every pure step of a 64x7-style start; returns the number of device rules."""
    inv = cache.decode(inv_encoded)
    assert isinstance(inv, DriverInventory)
    selection = select_devices(inv.gpus, "all", mig_config="all", mig_monitor="all")
    check_requirements(["cuda>=12.0 brand=tesla"], requirement_facts(inv, selection))
    listed = ",".join(m.uuid for g in inv.gpus for m in g.mig_devices)
    by_uuid = select_devices(inv.gpus, listed)
    check_requirements(["cuda>=12.0"], requirement_facts(inv, by_uuid))
    layout = ContainerLayout("/usr/bin", LIB, "/usr/lib/i386-linux-gnu")
    options = PlanOptions(proc_files=(ProcFile("params", b"ModifyDeviceFiles: 1\n", 0o444),))
    plan = plan_mounts(inv, selection, C.all(), layout, options)
    plan_mounts(inv, by_uuid, C.all(), layout, options)
    rules = validate_rules(plan.device_rules)
    granted = Granted(parse_devices_list(RUNC_LIST))
    assert all(missing_access(granted, r) == "rw" for r in rules if r.major == 237)
    extend_program(rules, ())
    return len(rules)


def calls(fn: Callable[[], object]) -> int:
    """Function calls (Python and C) made while `fn` runs."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


@pytest.fixture(scope="module")
def encoded() -> dict[int, object]:
    return {n: cache.encode(inventory(n)) for n in (16, 32, 64)}


def test_a_start_grows_linearly_with_gpus_and_mig_devices(encoded: dict[int, object]) -> None:
    counts = {n: calls(lambda n=n: start(encoded[n])) for n in encoded}  # type: ignore[misc]
    small, medium = counts[32] - counts[16], counts[64] - counts[32]
    assert medium <= 2.3 * small, counts  # linear: 2; quadratic: 4
    assert counts[64] <= 64 * 12_000, counts  # ~9800 per GPU: 7 MIG devices, 136 cap rules


def test_rules_per_gpu_with_mig_config(encoded: dict[int, object]) -> None:
    """The rules themselves are what NVIDIA grants (every cap of a MIG-capable GPU in
    mig-minors, libnvc-spec 5.4): linear by construction, one write (v1) or 3 instructions
    (v2) each."""
    per_gpu = 1 + GIS * (1 + CIS)  # its /dev/nvidia<N> and its caps
    for n, value in encoded.items():
        assert start(value) == n * per_gpu + 4  # + nvidiactl, nvidia-uvm, config, monitor
