"""The requirement DSL (libnvc-spec §6.1): every operator and key, the quirks, the errors."""

from __future__ import annotations

import pytest

from nvmount.discover.inventory import DeviceNode, DriverInventory, Gpu, MigDevice
from nvmount.errors import RequirementError
from nvmount.plan.requirements import (
    Facts,
    check_requirement,
    check_requirements,
    compare_versions,
    parse_requirement,
    requirement_facts,
)
from nvmount.plan.selection import select_devices

FACTS = Facts(cuda="12.4", driver="550.54.15", arch="8.0", brand="Tesla", device="GPU 0 (GPU-x)")


def holds(expr: str, facts: Facts = FACTS) -> bool:
    try:
        check_requirement(parse_requirement(expr), facts)
    except RequirementError as err:
        assert "not met" in str(err)
        return False
    return True


TABLE = {
    # every operator on each version key
    "cuda-eq": ("cuda=12.4", True), "cuda-eq-false": ("cuda=12.3", False),
    "cuda-ne": ("cuda!=12.3", True), "cuda-ne-false": ("cuda!=12.4", False),
    "cuda-lt": ("cuda<12.5", True), "cuda-lt-false": ("cuda<12.4", False),
    "cuda-le": ("cuda<=12.4", True), "cuda-le-false": ("cuda<=12.3", False),
    "cuda-gt": ("cuda>12.3", True), "cuda-gt-false": ("cuda>12.4", False),
    "cuda-ge": ("cuda>=12.4", True), "cuda-ge-false": ("cuda>=12.6", False),
    "driver-ge": ("driver>=550", True), "driver-lt": ("driver<550.54.16", True),
    "driver-eq-3-parts": ("driver=550.54.15", True),
    "driver-gt-false": ("driver>550.54.15", False),
    "arch-ge": ("arch>=7.0", True), "arch-eq": ("arch=8.0", True),
    "arch-lt-false": ("arch<8", False),
    # brand: case-insensitive, only = and !=
    "brand-eq": ("brand=tesla", True), "brand-eq-upper": ("BRAND=TESLA", True),
    "brand-eq-false": ("brand=geforce", False), "brand-ne": ("brand!=geforce", True),
    "brand-ne-false": ("brand!=Tesla", False),
    # keys are case-insensitive
    "key-case": ("CUDA>=12.0", True),
    # the numeric compare: 12 == 12.0, 12.10 > 12.9, 12.0.1 > 12
    "trailing-zero": ("cuda=12.4.0", True), "numeric-not-lexical": ("cuda<12.10", True),
    "longer-is-bigger": ("cuda<12.4.1", True), "trailing-dot": ("cuda=12.4.", True),
    # OR (space) and AND (comma)
    "or-second": ("cuda>=13 brand=tesla", True), "or-none": ("cuda>=13 brand=quadro", False),
    "and-all": ("brand=tesla,driver>=470,cuda>=12", True),
    "and-one-false": ("brand=tesla,driver<470", False),
    "spec-example": ("cuda>=12.6 brand=tesla,driver>=550,driver<551", True),
    # empty pieces are skipped, an empty expression holds
    "empty": ("", True), "spaces": ("   ", True), "empty-atoms": (",cuda>=12,,", True),
    # QUIRK: a lone ! means !=
    "bang-alone": ("cuda!12.3", True), "bang-alone-false": ("cuda!12.4", False),
    # QUIRK: a term of commas only keeps the previous term's result
    "commas-first-term": (",, cuda>=99", True), "commas-after-false": ("cuda>=99 ,,", False),
}


@pytest.mark.parametrize("expr,expected", list(TABLE.values()), ids=list(TABLE))
def test_table(expr: str, expected: bool) -> None:
    assert holds(expr) is expected


@pytest.mark.parametrize("expr", [
    "cuda>=99", "driver>=999", "arch>=9.0", "brand=geforce", "brand!=tesla",
], ids=["cuda", "driver", "arch", "brand", "brand-ne"])
def test_unknown_facts_hold(expr: str) -> None:
    assert holds(expr, Facts())


INVALID = {
    "double-equals": ("cuda==12.4", "unknown operator '=='"),
    "arrow": ("cuda=>12.4", "unknown operator '=>'"),
    "diamond": ("cuda<>12.4", "unknown operator '<>'"),
    "bang-bang": ("cuda!!12", "unknown operator '!!'"),
    "no-operator": ("cuda", "missing operator"),
    "no-key": (">=12.4", "missing key"),
    "no-value": ("cuda>=", "missing value"),
    "unknown-key": ("vram>=40", "unknown key 'vram'"),
    "letters-in-version": ("cuda>=12.4a", "cuda wants a version"),
    "negative-version": ("driver>=-1", "driver wants a version"),
    "non-ascii-digits": ("cuda>=\u0661\u0662", "cuda wants a version"),  # Unicode digits
    "space-in-version": ("cuda>=12.\t4", "cuda wants a version"),
    "brand-ordering": ("brand>=tesla", "brand only supports = and !="),
    "bad-atom-after-false": ("cuda>=99,foo=1", "unknown key 'foo'"),
    "bad-term-after-true": ("cuda>=1 foo=1", "unknown key 'foo'"),
}


@pytest.mark.parametrize("expr,why", list(INVALID.values()), ids=list(INVALID))
def test_invalid_expression_names_it(expr: str, why: str) -> None:
    with pytest.raises(RequirementError) as err:
        check_requirements([expr], [FACTS])
    msg = str(err.value)
    assert msg.startswith(f"requirement error: invalid expression {expr!r}")
    assert why in msg


def test_invalid_found_version_is_an_error() -> None:
    with pytest.raises(RequirementError, match="the driver version '550-custom' is not made"):
        check_requirements(["driver>=500"], [Facts(driver="550-custom")])


@pytest.mark.parametrize("a,b,cmp", [
    ("12", "12.0", 0), ("12.0.1", "12", 1), ("9.2", "10.0", -1), ("470.82.01", "470.82.1", 0),
    ("", "0", 0), ("1..2", "1.0.2", 0),
])
def test_compare_versions(a: str, b: str, cmp: int) -> None:
    assert compare_versions(a, b) == cmp
    assert compare_versions(b, a) == -cmp


MESSAGES = {
    "cuda": ("cuda>=12.6", "requirement cuda>=12.6 not met: the driver supports CUDA 12.4 "
             "(please update your driver to a newer version, or use an earlier cuda container)"),
    "driver": ("driver>=560", "requirement driver>=560 not met: the driver version is 550.54.15"),
    "arch": ("arch>=9.0",
             "requirement arch>=9.0 not met: GPU 0 (GPU-x) has compute capability 8.0"),
    "brand": ("brand=geforce", "requirement brand=geforce not met: GPU 0 (GPU-x) has brand Tesla"),
    "or": ("cuda>=13 brand=quadro,arch>=7",
           "requirement cuda>=13 brand=quadro,arch>=7 not met: cuda>=13: the driver supports "
           "CUDA 12.4; brand=quadro: GPU 0 (GPU-x) has brand Tesla (please update your driver"),
}


@pytest.mark.parametrize("expr,msg", list(MESSAGES.values()), ids=list(MESSAGES))
def test_failure_message_names_requirement_and_value(expr: str, msg: str) -> None:
    with pytest.raises(RequirementError) as err:
        check_requirements([expr], [FACTS])
    assert str(err.value).startswith(msg)


def test_all_requirements_must_hold_on_every_device() -> None:
    volta = Facts(cuda="12.4", driver="550.54.15", arch="7.0", brand="Tesla", device="GPU 1")
    check_requirements(["cuda>=12", "arch>=7.0"], [FACTS, volta])
    with pytest.raises(RequirementError, match=r"GPU 1 has compute capability 7\.0"):
        check_requirements(["cuda>=12", "arch>=8.0"], [FACTS, volta])


def test_too_many_requirements() -> None:
    check_requirements(["cuda>=1"] * 32, [FACTS])
    with pytest.raises(RequirementError, match="too many requirements"):
        check_requirements(["cuda>=1"] * 33, [FACTS])


def _inventory() -> DriverInventory:
    def gpu(i: int, arch: str, brand: str, migs: int) -> Gpu:
        mig = tuple(MigDevice(j, f"MIG-{i}-{j}", j + 1, 0, "", "", "", gpu_index=i)
                    for j in range(migs))
        return Gpu(i, i, f"GPU-{i}", f"00000000:0{i}:00.0", "m", brand, arch,
                   DeviceNode(f"/dev/nvidia{i}", f"/dev/nvidia{i}", 195, i), "",
                   mig_capable=bool(migs), mig_enabled=bool(migs), mig_devices=mig)
    return DriverInventory("/", "550.54.15", "12.4", (gpu(0, "8.0", "Tesla", 0),
                           gpu(1, "9.0", "Nvidia", 1)), (), (), (), (), (), (), "")


def test_requirement_facts_per_gpu_and_mig() -> None:
    inv = _inventory()
    facts = requirement_facts(inv, select_devices(inv.gpus, "0,1:0"))
    assert [(f.arch, f.brand, f.device) for f in facts] == [
        ("8.0", "Tesla", "GPU 0 (GPU-0)"), ("9.0", "Nvidia", "GPU 1 (GPU-1)"),
        ("9.0", "Nvidia", "MIG device 1:0 (MIG-1-0)")]
    assert all((f.cuda, f.driver) == ("12.4", "550.54.15") for f in facts)


def test_requirement_facts_without_devices_is_global() -> None:
    inv = _inventory()
    (only,) = requirement_facts(inv, select_devices(inv.gpus, ""))
    assert (only.cuda, only.driver, only.arch, only.brand) == ("12.4", "550.54.15", "", "")
    check_requirements(["arch>=99", "brand=quadro"], [only])  # no device: arch/brand hold
    with pytest.raises(RequirementError, match=r"the driver supports CUDA 12\.4"):
        check_requirements(["cuda>=12.6"], [only])
