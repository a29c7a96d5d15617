"""Device lists (hook-spec 1.8, 1.10, 1.14, as NVIDIA 1.20 decides them): CDI annotations (the
runtime wrapper's), `/dev/null` volume mounts under /var/run/nvidia-container-devices (ids and
CDI names), swarm resource variables and NVIDIA_VISIBLE_DEVICES, IMEX channels: one policy for
every way to ask (`visible_devices`), and the CDI-name test of the mode check. Pure (the
unprivileged policy logs NVIDIA's line).
"""

from __future__ import annotations

from nvhook.config.basics import go_trim_space, swarm_names
from nvhook.config.model import HookConfig
from nvhook.errors import RequestError
from nvhook.hook.oci import go_clean
from nvhook.hook.request_env import DEVICE_LIST_ROOT, VISIBLE_DEVICES
from nvmount.bounds import MAX_DIGITS, is_decimal, shorten
from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

log = get_logger(__name__)

IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
MAX_ID_CHARS = 256  # a MIG UUID is 60, a CDI name at most ~250
# NVIDIA 1.20's lines (Go's %v of the variable names: "[A B]")
UNPRIVILEGED_LOG = "Ignoring devices requested by environment variable(s) in unprivileged " \
    "container: [%s]"
UNPRIVILEGED_IMEX_LOG = "Ignoring request by environment variable(s) in unprivileged " \
    "container: [%s]"


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
    """The `swarm-resource` variable names (`nvhook.config.basics.swarm_names`)."""
    return swarm_names(config.swarm_resource)


def visible_devices(
    env: dict[str, str],
    mount_entries: Sequence[str],
    config: HookConfig,
    privileged: bool,
    legacy: bool,
    annotations: Sequence[str] = (),
    *,
    quiet: bool = False,
) -> tuple[str, ...] | None:
    """Every way a container asks for devices, through one policy, in NVIDIA 1.20's order
    (`VisibleDevices`): CDI annotation requests (the runtime wrapper's, already filtered by
    the configured prefixes), then `/dev/null` volume mounts when accepted (plain ids, and
    `cdi/<vendor>/<class>/<name>` or `cdi/<vendor>/<class>=<name>` as CDI names), then the
    swarm variables or NVIDIA_VISIBLE_DEVICES, only for a privileged container or with
    `accept-nvidia-visible-devices-envvar-when-unprivileged` (else NVIDIA's warning). Ids,
    indexes and CDI names alike. None means "not a GPU container". `quiet`: no warning (the
    wrapper's CDI look, before the hook's own decision logs them)."""
    if annotations:
        return check_ids(dedupe(annotations), "CDI annotations")
    if config.accept_nvidia_visible_devices_as_volume_mounts:
        listed = mount_requests(mount_entries, quiet=quiet)
        if listed:
            return check_ids(dedupe(listed), f"volume mounts under {DEVICE_LIST_ROOT}")
    names = visible_variables(env, config)
    devices = parse_device_list([env.get(name) for name in names], legacy)
    if devices is None:
        return None
    if privileged or config.accept_nvidia_visible_devices_envvar_when_unprivileged:
        return check_ids(devices, ", ".join(names))
    if not quiet:
        log.warning(UNPRIVILEGED_LOG, " ".join(names))
    return None


def visible_variables(env: dict[str, str], config: HookConfig) -> tuple[str, ...]:
    """The swarm-resource variables that are set, else NVIDIA_VISIBLE_DEVICES."""
    swarm = tuple(name for name in swarm_variables(config) if name in env)
    return swarm or (VISIBLE_DEVICES,)


def mount_requests(mount_entries: Sequence[str], *, quiet: bool = False) -> list[str]:
    """The device requests of the volume-mount entries: `imex/` skipped, `cdi/` as a CDI
    name (NVIDIA 1.20: `cdi/v/c/n` is `v/c=n`; an entry of neither form is ignored with a
    warning)."""
    devices = []
    for entry in mount_entries:
        if entry.startswith("imex/"):
            continue
        if entry.startswith("cdi/"):
            name = entry[len("cdi/"):]
            if not is_qualified_cdi_name(name):
                parts = name.split("/", 2)
                if len(parts) != 3:
                    if quiet:
                        continue
                    log.warning("Ignoring invalid mount request for CDI device %s: invalid "
                                "mount CDI device request: %s", shorten(entry, 200),
                                shorten(entry, 200))
                    continue
                name = f"{parts[0]}/{parts[1]}={parts[2]}"
            devices.append(name)
        else:
            devices.append(entry)
    return devices


def annotation_requests(annotations: object, prefixes: Sequence[str]) -> list[str]:
    """CDI device names in the annotations whose key starts with a prefix (keys sorted, values
    split on ","; NVIDIA 1.20's `cdiDeviceRequestsFromAnnotations`, empty entries dropped)."""
    if not isinstance(annotations, dict) or not prefixes:
        return []
    names: list[str] = []
    for key in sorted(k for k in annotations if isinstance(k, str)):
        value = annotations[key]
        if isinstance(value, str) and any(key.startswith(p) for p in prefixes):
            names += [v.strip() for v in value.split(",") if v.strip()]
    return names


def cli_devices(values: Sequence[str]) -> tuple[str, ...]:
    """nvidia-container-cli's `--device` values (its callers, the hook and containerd's
    `--gpus`, decided the request): ids split on ",", de-duplicated, within the input budgets;
    a CDI name is refused (a CDI runtime resolves those, never the CLI)."""
    ids = dedupe(d for value in values for d in value.split(",") if d)
    for device in ids:
        if is_qualified_cdi_name(device):
            raise RequestError(f"--device={shorten(device, 200)}: a CDI device name (the CLI "
                               "takes indexes, UUIDs, MIG ids or all; a CDI runtime resolves "
                               "CDI names: podman --device, nvhook-runtime)")
    return check_ids(ids, "--device")


def only_cdi_names(devices: Sequence[str] | None) -> bool:
    """NVIDIA's `OnlyFullyQualifiedCDIDevices` on the devices in effect: at least one, all
    qualified CDI names."""
    return bool(devices) and all(is_qualified_cdi_name(d) for d in devices or ())


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
    log.warning(UNPRIVILEGED_IMEX_LOG, IMEX_CHANNELS)
    return ()


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
