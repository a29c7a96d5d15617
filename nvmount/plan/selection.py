"""Device selection: which GPUs and MIG devices a container gets (libnvc-spec §6.2). Pure.

`select_devices` takes the inventory's GPUs and the `--device` list (NVIDIA_VISIBLE_DEVICES
after the hook resolved `none`/`void`) and returns a `Selection`. Each token is tried as, in
order: GPU UUID, PCI bus id, index, MIG UUID, `G:M`; the first form that matches wins, so a
PCI-shaped token that names no bus falls through (libnvc's `1:2:3` selects MIG 2 of GPU 1).
"""

from __future__ import annotations

from nvmount.bounds import shorten
from nvmount.errors import SelectionError
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvmount.discover.inventory import Gpu, MigDevice

_HEX = frozenset("0123456789abcdefABCDEF")
_DEC = frozenset("0123456789")
MAX_ID_DIGITS = 18  # a longer number in a device id names nothing (and is not converted)
_HINT = "list the GPUs and MIG devices with 'nvhook info'"


@record
class Selection:
    """The GPUs and MIG devices a request selects, and its MIG access."""

    gpus: tuple[Gpu, ...] = ()  # selected GPUs, plus the parents of selected MIG devices
    mig_devices: tuple[MigDevice, ...] = ()
    mig_config_gpus: tuple[Gpu, ...] = ()  # MIG-capable GPUs that get mig-config access
    mig_monitor_gpus: tuple[Gpu, ...] = ()
    mig_config: bool = False  # `--mig-config all` was requested (global caps are exposed)
    mig_monitor: bool = False

    def parent_of(self, mig: MigDevice) -> Gpu:
        """The selected parent GPU of a selected MIG device."""
        return next(g for g in self.gpus if g.index == mig.gpu_index)


class _Ids:
    """The GPUs and MIG devices by UUID and index, made once per selection: a scan per token
    made a list of 450 MIG UUIDs (64 GPUs x 7) quadratic. The first device with an id wins,
    as a scan in inventory order would find it."""

    def __init__(self, gpus: Sequence[Gpu]) -> None:
        self.gpus = gpus
        self.uuids: dict[str, Gpu] = {}
        self.indexes: dict[int, Gpu] = {}
        self.migs: dict[str, MigDevice] = {}
        for g in gpus:
            self.uuids.setdefault(g.uuid.lower(), g)
            self.indexes.setdefault(g.index, g)
            for m in g.mig_devices:
                self.migs.setdefault(m.uuid.lower(), m)


def _by_gpu_uuid(ids: _Ids, token: str) -> Gpu | None:
    if token[:4].upper() != "GPU-":
        return None
    return ids.uuids.get(token.lower())


def _run(token: str, at: int, chars: frozenset[str]) -> int:
    """The end of the run of `chars` starting at `at`."""
    end = at
    while end < len(token) and token[end] in chars:
        end += 1
    return end


def _spaces(token: str, at: int) -> int:
    while at < len(token) and token[at].isspace():
        at += 1
    return at


def parse_pci(token: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a token that starts like libnvc's sscanf of "%x:%x:%x" (regex
    `\\s*(0x)?HEX+:\\s*HEX{1,2}:\\s*HEX{1,2}`, matched as a prefix), else None."""
    at = _spaces(token, 0)
    start = at + 2 if token[at:at + 2] in ("0x", "0X") and token[at + 2:at + 3] in _HEX else at
    end = _run(token, start, _HEX)
    if end == start or token[end:end + 1] != ":" or end - start > MAX_ID_DIGITS:
        return None
    domain = int(token[start:end], 16)
    at = _spaces(token, end + 1)
    end = _run(token, at, _HEX)
    if not at < end <= at + 2 or token[end:end + 1] != ":":
        return None
    bus = int(token[at:end], 16)
    at = _spaces(token, end + 1)
    end = min(_run(token, at, _HEX), at + 2)
    if end == at:
        return None
    return domain, bus, int(token[at:end], 16)


def _by_pci(gpus: Sequence[Gpu], token: str) -> Gpu | None:
    found = parse_pci(token)
    if found is None:
        return None
    domain, bus, dev = found
    want = f"{domain:08x}:{bus:02x}:{dev:02x}.0"
    return next((g for g in gpus if g.bus_id.lower().startswith(want)), None)


def _by_index(ids: _Ids, token: str) -> Gpu | None:
    if not token or _run(token, 0, _DEC) != len(token) or len(token) > MAX_ID_DIGITS:
        return None
    return ids.indexes.get(int(token))


def _mig_by_uuid(ids: _Ids, token: str) -> MigDevice | None:
    if token[:4].upper() != "MIG-":
        return None
    return ids.migs.get(token.lower())


def parse_gpu_mig(token: str) -> tuple[int, int] | None:
    """(gpu, mig) of a token starting like `\\s*+?DIGITS:\\s*+?DIGITS` (libnvc's "%u:%u")."""
    numbers = []
    at = 0
    for first in (True, False):
        at = _spaces(token, at)
        if token[at:at + 1] == "+":
            at += 1
        end = _run(token, at, _DEC)
        if end == at or end - at > MAX_ID_DIGITS or (first and token[end:end + 1] != ":"):
            return None
        numbers.append(int(token[at:end]))
        at = end + 1
    return numbers[0], numbers[1]


def _mig_by_pair(ids: _Ids, token: str) -> MigDevice | None:
    pair = parse_gpu_mig(token)
    if pair is None:
        return None
    gpu_index, mig_index = pair
    gpu = ids.indexes.get(gpu_index)
    if gpu is None:
        return None
    return next((d for d in gpu.mig_devices if d.index == mig_index), None)


def _tokens(devices: str | Sequence[str]) -> list[str]:
    joined = devices if isinstance(devices, str) else ",".join(devices)
    return [t for t in joined.split(",") if t]


def _select_tokens(gpus: Sequence[Gpu], tokens: list[str]) -> tuple[
        list[Gpu], list[MigDevice], bool]:
    """(GPUs, MIG devices, whether `all` was seen); `all` ends parsing, ids before it count."""
    chosen: dict[str, Gpu] = {}  # by UUID, in order
    migs: dict[str, MigDevice] = {}
    ids = _Ids(gpus)
    for token in tokens:
        if token.lower() == "all":
            return list(gpus), [m for g in gpus for m in g.mig_devices], True
        gpu = _by_gpu_uuid(ids, token) or _by_pci(gpus, token) or _by_index(ids, token)
        if gpu is None:
            mig = _mig_by_uuid(ids, token) or _mig_by_pair(ids, token)
            if mig is None:
                raise SelectionError(
                    f"device error: {shorten(token)}: unknown device "
                    f"(this host has {len(gpus)} GPU(s); {_HINT})")
            migs.setdefault(mig.uuid, mig)
            gpu = ids.indexes[mig.gpu_index]
        chosen.setdefault(gpu.uuid, gpu)
    return list(chosen.values()), list(migs.values()), False


def _mig_access(kind: str, value: str | None, everything: bool, gpus: list[Gpu],
                migs: list[MigDevice]) -> tuple[bool, tuple[Gpu, ...]]:
    if not value:
        return False, ()
    if value.strip().lower() != "all":
        raise SelectionError(
            f"{kind} error: {shorten(value)}: only 'all' devices are currently supported "
            f"(set NVIDIA_{kind.upper().replace('-', '_')}_DEVICES=all)")
    if migs and not everything:
        raise SelectionError(
            f"{kind} error: cannot enable {kind} with specific MIG devices selected "
            f"(select the whole GPUs, or use NVIDIA_VISIBLE_DEVICES=all)")
    return True, tuple(g for g in gpus if g.mig_capable)


def select_devices(
    gpus: Sequence[Gpu],
    devices: str | Sequence[str],
    *,
    mig_config: str | None = None,
    mig_monitor: str | None = None,
) -> Selection:
    """Resolve `devices` (comma-separated ids, or a list of them) against `gpus`.

    An empty list selects nothing (the driver files are still exposed). `all` (any case)
    selects every GPU and every MIG device and ends parsing. Duplicates are ignored; a MIG
    device also selects its parent GPU. Raises `SelectionError` naming the first unknown id.
    """
    chosen, migs, everything = _select_tokens(gpus, _tokens(devices))
    config, config_gpus = _mig_access("mig-config", mig_config, everything, chosen, migs)
    monitor, monitor_gpus = _mig_access("mig-monitor", mig_monitor, everything, chosen, migs)
    return Selection(tuple(chosen), tuple(migs), config_gpus, monitor_gpus, config, monitor)

