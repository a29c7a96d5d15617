"""The simulated driver's pure parts: GPU topology, MIG placement and specs, proc texts."""

from __future__ import annotations

import re

import pytest

from nvhook.dev.sim import SimSpec, catalog, procfs
from nvhook.dev.sim.build import cuda_version_int
from nvhook.dev.sim.topology import (
    build_gpus,
    caps_ci_minor,
    caps_gi_minor,
    parse_mig_spec,
    place_mig,
)
from nvhook.errors import SimError

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_RE = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.mark.parametrize("count", [0, 1, 8, 9, 64], ids=lambda n: f"{n}-gpus")
def test_gpus_have_unique_ids_in_bus_order(count: int) -> None:
    gpus = build_gpus(SimSpec(gpus=count))
    assert [g.index for g in gpus] == list(range(count))
    assert [g.minor for g in gpus] == list(range(count))
    assert len({g.uuid for g in gpus}) == count
    assert all(UUID_RE.match(g.uuid) for g in gpus)
    assert [g.bus_id for g in gpus] == sorted(g.bus_id for g in gpus)
    for gpu in gpus:
        assert re.match(r"^[0-9a-f]{8}:[0-9a-f]{2}:00\.0$", gpu.bus_id)
        assert gpu.proc_bus_id == gpu.bus_id[4:]  # 16-bit domain, as the driver names dirs
        assert gpu.nvml_bus_id == gpu.bus_id.upper()


def test_eight_gpus_sit_on_the_dgx_buses_and_more_span_domains() -> None:
    assert [g.bus_id for g in build_gpus(SimSpec(gpus=8))][:2] == [
        "00000000:07:00.0", "00000000:0f:00.0"]
    many = build_gpus(SimSpec(gpus=64))
    assert many[31].bus_id.startswith("00000000:") and many[32].bus_id.startswith("00000001:")


def test_ids_are_deterministic() -> None:
    assert build_gpus(SimSpec(gpus=3)) == build_gpus(SimSpec(gpus=3))


def test_models_cycle_and_carry_their_facts() -> None:
    gpus = build_gpus(SimSpec(gpus=3, models=("Tesla T4", "NVIDIA H100 80GB HBM3")))
    assert [g.model for g in gpus] == ["Tesla T4", "NVIDIA H100 80GB HBM3", "Tesla T4"]
    assert (gpus[0].brand, gpus[0].architecture, gpus[0].mig_capable) == ("Tesla", "7.5", False)
    assert (gpus[1].brand, gpus[1].architecture, gpus[1].mig_capable) == ("Nvidia", "9.0", True)


def test_explicit_minors() -> None:
    gpus = build_gpus(SimSpec(gpus=3, minors=(2, 0, 5)))
    assert [g.minor for g in gpus] == [2, 0, 5]


@pytest.mark.parametrize(
    ("profiles", "gis"),
    [
        (("7g.80gb",), [0]),
        (("4g.40gb", "3g.40gb"), [1, 2]),
        (("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"), [2, 3, 9, 10]),
        (("3g.40gb", "3g.40gb"), [1, 2]),
        (("1g.10gb",) * 7, [7, 8, 9, 10, 11, 12, 13]),
        (("2g.20gb",) * 3, [3, 4, 5]),
        ((), []),
    ],
    ids=["7g", "4g+3g", "3g+2g+1g+1g", "3g+3g", "7x1g", "3x2g", "none"],
)
def test_mig_placement(profiles: tuple[str, ...], gis: list[int]) -> None:
    placed = place_mig(0, profiles)
    assert [gi for _, gi in placed] == gis
    assert sorted(p for p, _ in placed) == sorted(profiles)


@pytest.mark.parametrize(
    "profiles",
    [("7g.80gb", "1g.10gb"), ("4g.40gb", "4g.40gb"), ("2g.20gb",) * 4, ("1g.10gb",) * 8],
    ids=["7g+1g", "4g+4g", "4x2g", "8x1g"],
)
def test_mig_placement_rejects_what_does_not_fit(profiles: tuple[str, ...]) -> None:
    with pytest.raises(SimError, match="do not fit"):
        place_mig(0, profiles)


def test_mig_devices_get_caps_minors_of_the_gpu_minor() -> None:
    gpus = build_gpus(SimSpec(gpus=2, minors=(1, 0), mig=((0, ("3g.40gb", "1g.10gb")),)))
    first = gpus[0].mig_devices
    assert [(m.index, m.gi, m.ci) for m in first] == [(0, 1, 0), (1, 11, 0)]
    assert first[0].gi_minor == caps_gi_minor(1, 1) == 3 + 135 + 9
    assert first[0].ci_minor == caps_ci_minor(1, 1, 0) == first[0].gi_minor + 1
    assert all(MIG_RE.match(m.uuid) for m in first)
    assert gpus[0].mig_enabled and not gpus[1].mig_enabled


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0=3g.40gb", ((0, ("3g.40gb",)),)),
        ("0=3g.40gb+2x2g.20gb", ((0, ("3g.40gb", "2g.20gb", "2g.20gb")),)),
        ("all=7g.80gb", tuple((i, ("7g.80gb",)) for i in range(3))),
        ("0,2=1g.10gb;1=", ((0, ("1g.10gb",)), (1, ()), (2, ("1g.10gb",)))),
        ("1-2=7x1g.10gb", ((1, ("1g.10gb",) * 7), (2, ("1g.10gb",) * 7))),
    ],
    ids=["one", "count", "all", "list-and-empty", "range"],
)
def test_parse_mig_spec(text: str, expected: tuple[tuple[int, tuple[str, ...]], ...]) -> None:
    assert parse_mig_spec(text, 3) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [("0", "has no '='"), ("x=1g.10gb", "bad gpu selector"), ("0=8g.80gb", "not a profile"),
     ("0=1g.10", "not a profile")],
    ids=["no-equals", "bad-selector", "bad-slices", "bad-memory"],
)
def test_parse_mig_spec_errors(text: str, message: str) -> None:
    with pytest.raises(SimError, match=message):
        parse_mig_spec(text, 3)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (SimSpec(gpus=65), "out of range"),
        (SimSpec(gpus=2, minors=(0,)), "distinct minors"),
        (SimSpec(gpus=2, minors=(0, 255)), "254/255"),
        (SimSpec(gpus=2, mig=((2, ("1g.10gb",)),)), "no such gpu"),
        (SimSpec(gpus=1, models=("Tesla T4",), mig=((0, ()),)), "not MIG-capable"),
        (SimSpec(gpus=1, mig=((0, ("1g.10gb",) * 8),)), "at most 7"),
    ],
    ids=["too-many", "minor-count", "reserved-minor", "mig-gpu", "mig-model", "mig-count"],
)
def test_spec_errors(spec: SimSpec, message: str) -> None:
    with pytest.raises(SimError, match=message):
        build_gpus(spec)


@pytest.mark.parametrize(("text", "value"), [("12.4", 12040), ("11.8", 11080), ("13.0", 13000)])
def test_cuda_version_int(text: str, value: int) -> None:
    assert cuda_version_int(text) == value


@pytest.mark.parametrize("text", ["12", "12.4.1", "twelve", "12.10"])
def test_cuda_version_rejects(text: str) -> None:
    with pytest.raises(SimError, match=r"MAJOR\.MINOR"):
        cuda_version_int(text)


def test_information_text_is_the_driver_format() -> None:
    gpu = build_gpus(SimSpec(gpus=1))[0]
    fields = dict(line.split(":", 1) for line in procfs.information_text(gpu).splitlines())
    assert list(fields) == ["Model", "IRQ", "GPU UUID", "Video BIOS", "Bus Type", "DMA Size",
                            "DMA Mask", "Bus Location", "Device Minor", "GPU Excluded"]
    assert fields["GPU UUID"].strip() == gpu.uuid
    assert fields["Bus Location"].strip() == "0000:07:00.0"
    assert fields["Device Minor"].strip() == "0"


def test_devices_text_lists_the_majors_in_the_character_section() -> None:
    text = procfs.devices_text()
    chars = text.split("Block devices:")[0]
    assert "\n195 nvidia\n" in chars
    assert "\n506 nvidia-uvm\n" in chars
    assert "\n507 nvidia-caps\n" in chars
    assert "\n508 nvidia-caps-imex-channels\n" in chars


def test_mig_minors_cover_32_gpus_in_the_driver_layout() -> None:
    lines = procfs.mig_minors_text(build_gpus(SimSpec(gpus=2))).splitlines()
    assert lines[:4] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4"]
    assert "gpu0/gi1/access 12" in lines and "gpu0/gi1/ci0/access 13" in lines
    assert len(lines) == 2 + catalog.CAPS_DRIVER_GPUS * 15 * 9
    assert len({int(line.split()[1]) for line in lines}) == len(lines)


def test_params_allow_device_file_modification() -> None:
    text = procfs.params_text()
    for line in ("ModifyDeviceFiles: 1", "DeviceFileUID: 0", "DeviceFileGID: 0",
                 "DeviceFileMode: 438"):
        assert f"\n{line}\n" in f"\n{text}"


def test_catalog_covers_every_libnvc_library() -> None:
    names = {lib.name for lib in catalog.LIBRARIES}
    assert len(names) == len(catalog.LIBRARIES)
    for name in ("libnvidia-ml.so", "libcuda.so", "libnvidia-tls.so", "libGLX_nvidia.so",
                 "libnvidia-ngx.so", "libGL.so", "libnvidia-tileiras.so", "libnvcuvid.so"):
        assert name in names
