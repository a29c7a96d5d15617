"""Device lists of the hook (hook-spec 1.8, 1.10, 1.14): NVIDIA_VISIBLE_DEVICES, swarm resource
variables, `/dev/null` volume mounts under /var/run/nvidia-container-devices, IMEX channels, and
the CDI-name test of the mode check. Pure (the unprivileged policy logs NVIDIA's line).
"""

from __future__ import annotations

from nvhook.config.model import HookConfig, go_trim_space
from nvhook.errors import RequestError
from nvhook.oci import go_clean
from nvmount.bounds import MAX_DIGITS, is_decimal, shorten
from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

log = get_logger(__name__)

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"
MAX_ID_CHARS = 256  # a MIG UUID is 60, a CDI name at most ~250
UNPRIVILEGED_LOG = (
    "Ignoring devices specified in NVIDIA_VISIBLE_DEVICES (privileged=false, "
    "accept-nvidia-visible-devices-envvar-when-unprivileged=false) "
)


def device_list_mounts(mounts: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """Device-list entries from `/dev/null` mounts under /var/run/nvidia-container-devices (1.8).

    Plain string prefix (as NVIDIA): `.../nvidia-container-devicesX` yields "X". The entries
    still include `cdi/...` and `imex/...`; callers filter.
    """
    seen: set[str] = set()
    entries: list[str] = []
    for source, destination in mounts:
        if go_clean(source) != "/dev/null":
            continue
        target = go_clean(destination)
        if target in seen:
            continue
        seen.add(target)
        if not target.startswith(DEVICE_LIST_ROOT):
            continue
        entry = target[len(DEVICE_LIST_ROOT) :].strip("/")
        if entry:
            entries.append(entry)
    return tuple(entries)


def check_ids(ids: Sequence[str], source: str) -> tuple[str, ...]:
    """`ids` as a tuple, or RequestError naming `source` (the variable, or the volume mounts)
    for an id longer than `MAX_ID_CHARS` or a number (index, channel) of more than
    `MAX_DIGITS` digits: input budgets, so no stage ever parses a 5000-digit number."""
    for entry in ids:
        if is_decimal(entry) and len(entry) > MAX_DIGITS:
            raise RequestError(f"{source}: number {shorten(entry)!r} has more than "
                               f"{MAX_DIGITS} digits (use a device index or channel number)")
        if len(entry) > MAX_ID_CHARS:
            raise RequestError(f"{source}: device id {shorten(entry)!r} is longer than "
                               f"{MAX_ID_CHARS} characters (list indexes, UUIDs or names)")
    return tuple(ids)


def dedupe(items: Iterable[str]) -> tuple[str, ...]:
    """Unique items in first-seen order (deviation: NVIDIA leaves an empty slot per repeat)."""
    return tuple(dict.fromkeys(items))


def parse_device_list(values: Sequence[str | None], legacy: bool) -> tuple[str, ...] | None:
    """NVIDIA's `DevicesFromEnvvars` on the raw values of the variables (None = unset).

    None = no devices (unset, empty, `void`); () = `none`; ("all",) = `all`; else the ids.
    """
    entries = [
        entry
        for value in values
        if value is not None
        for entry in (go_trim_space(part) for part in value.split(","))
        if entry
    ]
    if not entries and legacy and all(value is None for value in values):
        return ("all",)
    if not entries or "void" in entries:
        return None
    for entry in entries:
        if entry == "all":
            return ("all",)
        if entry == "none":
            return ()
    return dedupe(entries)


def swarm_variables(config: HookConfig) -> tuple[str, ...]:
    """The `swarm-resource` variable names: split on ",", trimmed, empties dropped."""
    names = (go_trim_space(name) for name in config.swarm_resource.split(","))
    return tuple(name for name in names if name)


def select_devices(
    env: dict[str, str],
    mount_entries: Sequence[str],
    config: HookConfig,
    privileged: bool,
    legacy: bool,
) -> tuple[str, ...] | None:
    """The device list by NVIDIA's precedence: volume mounts, then swarm variables or NVD with
    the unprivileged policy (1.8). None means "not a GPU container"."""
    if config.accept_nvidia_visible_devices_as_volume_mounts:
        listed = [e for e in mount_entries if not e.startswith(("cdi/", "imex/"))]
        if listed:
            return check_ids(dedupe(listed), f"volume mounts under {DEVICE_LIST_ROOT}")
    swarm = swarm_variables(config)
    names = swarm if any(name in env for name in swarm) else (VISIBLE_DEVICES,)
    devices = parse_device_list([env.get(name) for name in names], legacy)
    if devices is None:
        return None
    if privileged or config.accept_nvidia_visible_devices_envvar_when_unprivileged:
        return check_ids(devices, ", ".join(names))
    log.warning(UNPRIVILEGED_LOG)
    return None


def select_imex_channels(
    env: dict[str, str],
    mount_entries: Sequence[str],
    config: HookConfig,
    privileged: bool,
    legacy: bool,
) -> tuple[str, ...]:
    """IMEX channels from `imex/` volume mounts or NVIDIA_IMEX_CHANNELS (1.10); `all` is
    ignored, as NVIDIA does."""
    if config.features.ignore_imex_channel_requests:
        return ()
    if config.accept_nvidia_visible_devices_as_volume_mounts:
        channels = [e[len("imex/") :] for e in mount_entries if e.startswith("imex/")]
        channels = [c for c in channels if c]
        if channels:
            return check_ids(dedupe(channels), f"volume mounts under {DEVICE_LIST_ROOT}/imex")
    parsed = parse_device_list([env.get(IMEX_CHANNELS)], legacy)
    if not parsed or parsed == ("all",):
        return ()
    if privileged or config.accept_nvidia_visible_devices_envvar_when_unprivileged:
        return check_ids(parsed, IMEX_CHANNELS)
    return ()


def only_cdi_devices(env: dict[str, str], mount_entries: Sequence[str], legacy: bool) -> bool:
    """Every NVD entry is a qualified CDI name and every volume-mount entry starts with `cdi/`,
    with at least one entry."""
    parsed = parse_device_list([env.get(VISIBLE_DEVICES)], legacy)
    visible = ("",) if parsed == () else parsed or ()
    if not all(is_qualified_cdi_name(d) for d in visible):
        return False
    if not all(e.startswith("cdi/") for e in mount_entries):
        return False
    return bool(visible) or bool(mount_entries)


def _is_alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


def _valid_cdi_part(part: str, first_ok: bool, inner: str) -> bool:
    if not part or not first_ok:
        return False
    return all(_is_alnum(c) or c in inner for c in part[1:-1]) and _is_alnum(part[-1])


def is_qualified_cdi_name(device: str) -> bool:
    """`vendor/class=name` per the CDI parser (container-device-interface pkg/parser)."""
    if not device or device[0] == "/":
        return False
    kind, sep, name = device.partition("=")
    vendor, slash, cls = kind.partition("/")
    if not (sep and slash and vendor and cls and name):
        return False
    return (
        _valid_cdi_part(vendor, vendor[0].isascii() and vendor[0].isalpha(), "_-.")
        and _valid_cdi_part(cls, cls[0].isascii() and cls[0].isalpha(), "_-.")
        and _valid_cdi_part(name, _is_alnum(name[0]), "_-.:")
    )
