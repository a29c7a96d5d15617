"""The simulated GPUs: ids, bus ids, minors, MIG placement, derived from a `SimSpec`. Pure.

Everything is deterministic (UUIDs are name-based), so the same spec always yields the same
inventory and tests can compare against fixed values.
"""

from __future__ import annotations

import re
import uuid

from nvhook.dev.sim import catalog
from nvhook.dev.sim.records import MAX_GPUS, MAX_MIG_DEVICES, SimGpu, SimMigDevice, SimSpec
from nvhook.errors import SimError

_UUID_NAMESPACE = uuid.UUID("5f1e3a44-6c1b-4c39-9a8e-6e7673696d00")
_PROFILE_RE = re.compile(r"^([1-7])g\.(\d+)gb$")


def gpu_uuid(index: int) -> str:
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'gpu/{index}')}"


def mig_uuid(gpu_index: int, gi: int, ci: int) -> str:
    return f"MIG-{uuid.uuid5(_UUID_NAMESPACE, f'mig/{gpu_index}/{gi}/{ci}')}"


def pci_location(index: int, count: int) -> tuple[int, int]:
    """(domain, bus) of GPU `index`: a DGX A100's buses up to 8 GPUs, else 32 per domain."""
    if count <= len(catalog.DGX_BUSES):
        return 0, catalog.DGX_BUSES[index]
    return index // 32, 0x04 + (index % 32) * 7


def caps_gi_minor(gpu_minor: int, gi: int) -> int:
    base = 3 + gpu_minor * catalog.CAPS_GIS_PER_GPU * (catalog.CAPS_CIS_PER_GI + 1)
    return base + gi * (catalog.CAPS_CIS_PER_GI + 1)


def caps_ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return caps_gi_minor(gpu_minor, gi) + 1 + ci


def parse_profile(profile: str) -> tuple[int, int]:
    """(compute slices, memory GiB) of a MIG profile name such as "3g.40gb"."""
    match = _PROFILE_RE.match(profile)
    if match is None or int(match.group(1)) not in catalog.GI_PLACEMENTS:
        raise SimError(
            f"parse mig profile {profile!r}: not a profile name "
            "(use <slices>g.<memory>gb with 1, 2, 3, 4 or 7 slices, e.g. 1g.10gb)"
        )
    return int(match.group(1)), int(match.group(2))


def place_mig(gpu_index: int, profiles: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """(profile, gi id) per profile, sorted by gi: a placement of all profiles on the 8
    memory slices of a 7-slice GPU (largest first, backtracking, like the driver's table)."""
    order = sorted(profiles, key=lambda p: -parse_profile(p)[0])
    placed = _place(order, frozenset())
    if placed is None:
        raise SimError(
            f"place mig profiles {'+'.join(profiles)} on gpu {gpu_index}: they do not fit "
            "(a GPU has 7 compute and 8 memory slices; use fewer or smaller profiles)"
        )
    return tuple(sorted(placed, key=lambda p: p[1]))


def _place(profiles: list[str], used: frozenset[int]) -> list[tuple[str, int]] | None:
    if not profiles:
        return []
    slices, _ = parse_profile(profiles[0])
    for gi, start in catalog.GI_PLACEMENTS[slices]:
        wanted = frozenset(range(start, start + catalog.GI_SPAN[slices]))
        if wanted & used:
            continue
        rest = _place(profiles[1:], used | wanted)
        if rest is not None:
            return [(profiles[0], gi), *rest]
    return None


def _mig_devices(index: int, minor: int, profiles: tuple[str, ...]) -> tuple[SimMigDevice, ...]:
    devices = []
    for i, (profile, gi) in enumerate(place_mig(index, profiles)):
        slices, memory_gib = parse_profile(profile)
        devices.append(
            SimMigDevice(
                index=i,
                uuid=mig_uuid(index, gi, 0),
                gi=gi,
                ci=0,
                profile=profile,
                memory_mib=memory_gib * 1024 - 512,
                slices=slices,
                gi_minor=caps_gi_minor(minor, gi),
                ci_minor=caps_ci_minor(minor, gi, 0),
            )
        )
    return tuple(devices)


def _check_spec(spec: SimSpec) -> dict[int, tuple[str, ...]]:
    if not 0 <= spec.gpus <= MAX_GPUS:
        raise SimError(f"simulate {spec.gpus} gpus: out of range (use 0 to {MAX_GPUS})")
    if spec.minors and (len(spec.minors) != spec.gpus or len(set(spec.minors)) != spec.gpus):
        raise SimError(f"simulate minors {spec.minors}: need {spec.gpus} distinct minors")
    if any(not 0 <= m < 254 for m in spec.minors):
        raise SimError(f"simulate minors {spec.minors}: minors must be 0..253 (254/255 are "
                       "nvidia-modeset and nvidiactl)")
    if not spec.models:
        raise SimError("simulate gpus: no model given (pass at least one model name)")
    mig = dict(spec.mig)
    for index, profiles in mig.items():
        if not 0 <= index < spec.gpus:
            raise SimError(f"simulate mig on gpu {index}: no such gpu (0..{spec.gpus - 1})")
        if len(profiles) > MAX_MIG_DEVICES:
            raise SimError(f"simulate mig on gpu {index}: {len(profiles)} devices "
                           f"(at most {MAX_MIG_DEVICES})")
    return mig


def build_gpus(spec: SimSpec) -> tuple[SimGpu, ...]:
    """The GPUs of `spec`, in NVML index order (by PCI bus id)."""
    mig = _check_spec(spec)
    gpus = []
    for index in range(spec.gpus):
        model = spec.models[index % len(spec.models)]
        info = catalog.MODELS.get(model, catalog.UNKNOWN_MODEL)
        if index in mig and not info.mig_capable:
            raise SimError(f"simulate mig on gpu {index}: model {model!r} is not MIG-capable "
                           "(use an A100 or H100 model)")
        minor = spec.minors[index] if spec.minors else index
        domain, bus = pci_location(index, spec.gpus)
        gpus.append(
            SimGpu(
                index=index,
                minor=minor,
                uuid=gpu_uuid(index),
                bus_id=f"{domain:08x}:{bus:02x}:00.0",
                proc_bus_id=f"{domain:04x}:{bus:02x}:00.0",
                model=model,
                brand=info.brand,
                brand_code=info.brand_code,
                architecture=info.compute_capability,
                arch_code=info.arch_code,
                memory_mib=info.memory_mib,
                pci_device_id=info.pci_device_id,
                mig_capable=info.mig_capable,
                mig_enabled=index in mig,
                mig_devices=_mig_devices(index, minor, mig.get(index, ())),
            )
        )
    return tuple(gpus)


def parse_mig_spec(text: str, gpus: int) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """Parse `--mig` text: "GPUS=PROFILES[;GPUS=PROFILES...]".

    GPUS is `all`, an index, a list `0,2` or a range `0-3`; PROFILES is `+`-joined
    profile names, each optionally prefixed by a count (`2x1g.10gb`); empty PROFILES
    enables MIG mode without devices. Example: "0=3g.40gb+2x2g.20gb;1-2=7x1g.10gb".
    """
    result: dict[int, tuple[str, ...]] = {}
    for clause in filter(None, (c.strip() for c in text.split(";"))):
        selector, sep, profiles_text = clause.partition("=")
        if not sep:
            raise SimError(f"parse --mig {text!r}: clause {clause!r} has no '=' "
                           "(use GPUS=PROFILES, e.g. 0=3g.40gb+2x2g.20gb)")
        profiles: list[str] = []
        for item in filter(None, (p.strip() for p in profiles_text.split("+"))):
            count, x, name = item.partition("x")
            if x and count.isdigit():
                profiles.extend([name] * int(count))
            else:
                profiles.append(item)
        for profile in profiles:
            parse_profile(profile)
        for index in _parse_gpu_selector(selector.strip(), gpus, text):
            result[index] = tuple(profiles)
    return tuple(sorted(result.items()))


def _parse_gpu_selector(selector: str, gpus: int, text: str) -> list[int]:
    if selector == "all":
        return list(range(gpus))
    indices: list[int] = []
    for part in selector.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise SimError(f"parse --mig {text!r}: bad gpu selector {selector!r} "
                           "(use all, 0, 0,2 or 0-3)")
        indices.extend(range(int(low), int(high if dash else low) + 1))
    return indices
