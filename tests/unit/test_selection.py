"""Device selection (libnvc-spec §6.2): every id form, duplicates, MIG parents, mig-config."""

from __future__ import annotations

import pytest

from nvmount.discover.inventory import DeviceNode, Gpu, MigDevice
from nvmount.errors import SelectionError
from nvmount.plan.selection import Selection, select_devices


def _gpu(index: int, bus: int, migs: int = 0, domain: int = 0) -> Gpu:
    uuid = f"GPU-{index:08x}-aaaa-bbbb-cccc-{bus:012x}"
    mig_devices = tuple(
        MigDevice(index=i, uuid=f"MIG-{index:04x}{i:04x}-1111-2222-3333-444455556666", gi=i + 1,
                  ci=0, profile="1g.10gb", gi_access="", ci_access="", gpu_index=index)
        for i in range(migs))
    return Gpu(index=index, minor=index, uuid=uuid, bus_id=f"{domain:08x}:{bus:02x}:00.0",
               model="NVIDIA A100-SXM4-40GB", brand="Tesla", architecture="8.0",
               node=DeviceNode(f"/dev/nvidia{index}", f"/dev/nvidia{index}", 195, index),
               proc_dir="", mig_capable=migs > 0, mig_enabled=migs > 0, mig_devices=mig_devices)


# GPU 0 (bus 07), GPU 1 (bus 0f, 2 MIGs), GPU 2 (bus 3b), GPU 3 (bus 8a in domain 0001, 1 MIG)
GPUS = (_gpu(0, 0x07), _gpu(1, 0x0F, migs=2), _gpu(2, 0x3B), _gpu(3, 0x8A, migs=1, domain=1))
MIG10, MIG11 = GPUS[1].mig_devices
MIG30 = GPUS[3].mig_devices[0]


def _ids(sel: Selection) -> tuple[list[int], list[str]]:
    return [g.index for g in sel.gpus], [f"{m.gpu_index}:{m.index}" for m in sel.mig_devices]


CASES = {
    "nothing": ("", [], []),
    "only-commas": (",,", [], []),
    "all": ("all", [0, 1, 2, 3], ["1:0", "1:1", "3:0"]),
    "ALL-any-case": ("All", [0, 1, 2, 3], ["1:0", "1:1", "3:0"]),
    "all-stops-parsing": ("2,all,bogus", [0, 1, 2, 3], ["1:0", "1:1", "3:0"]),
    "index": ("2", [2], []),
    "indices-in-order": ("3,0", [3, 0], []),
    "index-leading-zero": ("02", [2], []),
    "uuid": (GPUS[2].uuid, [2], []),
    "uuid-lowercase": (GPUS[2].uuid.lower(), [2], []),
    "uuid-uppercase": (GPUS[2].uuid.upper(), [2], []),
    "pci-8-digit": ("00000000:3b:00.0", [2], []),
    "pci-4-digit": ("0000:3b:00.0", [2], []),
    "pci-no-function": ("0000:3B:00", [2], []),
    "pci-other-function": ("00000000:3b:00.1", [2], []),
    "pci-short-domain": ("0:3b:0", [2], []),
    "pci-domain-1": ("0001:8a:00.0", [3], []),
    "pci-upper-hex": ("00000001:8A:00.0", [3], []),
    "mig-uuid": (MIG11.uuid, [1], ["1:1"]),
    "mig-uuid-lower": (MIG30.uuid.lower(), [3], ["3:0"]),
    "gpu-mig-pair": ("1:0", [1], ["1:0"]),
    "mig-adds-parent-once": ("1:0,1:1,1", [1], ["1:0", "1:1"]),
    "parent-before-mig": ("3,3:0", [3], ["3:0"]),
    "duplicates": ("0,0,00000000:07:00.0," + GPUS[0].uuid, [0], []),
    "mixed": (f"2,{MIG10.uuid},0000:07:00.0", [2, 1, 0], ["1:0"]),
    "list-form": (["1", "2"], [1, 2], []),
    # QUIRK: a PCI-shaped id naming no bus falls through to G:M (MIG 1 of GPU 1)
    "pci-shape-falls-to-pair": ("1:1:0", [1], ["1:1"]),
}


@pytest.mark.parametrize("devices,gpus,migs", list(CASES.values()), ids=list(CASES))
def test_select(devices: str | list[str], gpus: list[int], migs: list[str]) -> None:
    assert _ids(select_devices(GPUS, devices)) == (gpus, migs)


UNKNOWN = {
    "index-out-of-range": "4",
    "negative": "-1",
    "unknown-uuid": "GPU-deadbeef",
    "uuid-prefix": GPUS[0].uuid[:-1],
    "unknown-bus": "0000:99:00.0",
    "unknown-mig": "MIG-00000000-0000-0000-0000-000000000000",
    "mig-of-non-mig-gpu": "0:0",
    "mig-index-out-of-range": "1:2",
    "pair-gpu-out-of-range": "9:0",
    "none-not-understood": "none",
    "void-not-understood": "void",
    "garbage": "nvidia0",
    "unknown-before-all": "bogus,all",
}


@pytest.mark.parametrize("token", list(UNKNOWN.values()), ids=list(UNKNOWN))
def test_unknown_device_names_the_id(token: str) -> None:
    bad = token.split(",")[0]
    with pytest.raises(SelectionError) as err:
        select_devices(GPUS, f"0,{token}")
    msg = str(err.value)
    assert msg.startswith(f"device error: {bad}: unknown device")
    assert "nvhook info" in msg and "4 GPU(s)" in msg


def test_no_gpus_at_all() -> None:
    assert select_devices((), "all") == Selection()
    with pytest.raises(SelectionError, match="0: unknown device"):
        select_devices((), "0")


def test_parent_of() -> None:
    sel = select_devices(GPUS, "3:0")
    assert sel.parent_of(MIG30) is GPUS[3]


@pytest.mark.parametrize("devices,kind,expect", [
    ("all", "config", [1, 3]),
    ("0,1", "config", [1]),
    ("0,2", "config", []),
    ("all", "monitor", [1, 3]),
    ("3", "monitor", [3]),
], ids=["all-config", "gpus-config", "no-mig-capable", "all-monitor", "one-monitor"])
def test_mig_access_gpus(devices: str, kind: str, expect: list[int]) -> None:
    sel = select_devices(GPUS, devices, **{f"mig_{kind}": "all"})
    got = sel.mig_config_gpus if kind == "config" else sel.mig_monitor_gpus
    assert [g.index for g in got] == expect
    assert (sel.mig_config, sel.mig_monitor) == (kind == "config", kind == "monitor")


def test_mig_access_not_requested() -> None:
    sel = select_devices(GPUS, "all", mig_config="", mig_monitor=None)
    assert (sel.mig_config, sel.mig_config_gpus, sel.mig_monitor) == (False, (), False)


@pytest.mark.parametrize("kind", ["config", "monitor"])
def test_mig_access_only_all(kind: str) -> None:
    with pytest.raises(SelectionError,
                       match=f"mig-{kind} error: 0: only 'all' devices are currently supported"):
        select_devices(GPUS, "all", **{f"mig_{kind}": "0"})


@pytest.mark.parametrize("kind", ["config", "monitor"])
def test_mig_access_with_specific_migs(kind: str) -> None:
    with pytest.raises(SelectionError, match=f"cannot enable mig-{kind} with specific MIG"):
        select_devices(GPUS, "1:0", **{f"mig_{kind}": "all"})
