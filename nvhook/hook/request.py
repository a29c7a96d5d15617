"""Stage 2 of the hook: from the spec and the config to a GPU request (hook-spec 1.5-1.14). Pure.

`derive_request` decides exactly as NVIDIA's `nvidia-container-runtime-hook` v1.17.8 does, in the
same order (so the same error wins), with the deviations listed in docs/hook.md. It
returns None for a container that does not want GPUs. The only effect is logging: NVIDIA's
"Ignoring devices ..." line (warning) and the mode line (info).
"""

from __future__ import annotations

from nvhook.config.basics import go_trim_space
from nvhook.config.model import HookConfig
from nvhook.errors import RequestError, SpecError
from nvhook.hook import semver
from nvhook.hook.device_lists import (
    check_ids,
    dedupe,
    device_list_mounts,
    only_cdi_names,
    select_imex_channels,
    visible_devices,
)
from nvhook.hook.oci import Spec, field, json_kind
from nvhook.hook.request_env import CUDA_VERSION
from nvmount.api import DriverCapability
from nvmount.bounds import MAX_DIGITS, long_number, shorten
from nvmount.log import get_logger
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

log = get_logger(__name__)

DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
MIG_CONFIG_DEVICES = "NVIDIA_MIG_CONFIG_DEVICES"
MIG_MONITOR_DEVICES = "NVIDIA_MIG_MONITOR_DEVICES"
DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
REQUIRE_JETPACK = "NVIDIA_REQUIRE_JETPACK"
DEFAULT_CAPABILITIES = DriverCapability.COMPUTE | DriverCapability.UTILITY

MODE_ERROR = (
    "invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus "
    "flag) is not supported. Please use the NVIDIA Container Runtime (e.g. specify the "
    "--runtime=nvidia flag) instead."
)
_GO_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
_CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


@record
class ContainerRef:
    """The container the hook was called for: its init pid, bundle and absolute rootfs path."""

    pid: int
    bundle: str
    rootfs: str

    def to_json(self) -> dict[str, object]:
        return {"pid": self.pid, "bundle": self.bundle, "rootfs": self.rootfs}


@record
class ContainerRequest:
    """What a GPU container asked for. `devices == ()` means `none`: driver files, no GPUs;
    `("all",)` means every GPU; otherwise ids, UUIDs, MIG ids or names, verbatim."""

    devices: tuple[str, ...]
    mig_config_devices: tuple[str, ...]
    mig_monitor_devices: tuple[str, ...]
    imex_channels: tuple[str, ...]
    driver_capabilities: DriverCapability
    requirements: tuple[str, ...]
    disable_require: bool
    features: tuple[str, ...] = ()  # gated device families: gds, mofed, nvswitch, gdrcopy

    def to_json(self) -> dict[str, object]:
        """The `request` object of `nvhook prestart --dry-run`."""
        return {
            "devices": list(self.devices),
            "mig_config_devices": list(self.mig_config_devices),
            "mig_monitor_devices": list(self.mig_monitor_devices),
            "imex_channels": list(self.imex_channels),
            "driver_capabilities": list(self.driver_capabilities.names()),
            "requirements": list(self.requirements),
            "disable_require": self.disable_require,
            **({"features": list(self.features)} if self.features else {}),
        }


def derive_request(spec: Spec, config: HookConfig) -> ContainerRequest | None:
    """The container's GPU request, or None when it is not a GPU container."""
    env = parse_env(spec.env)
    if config.disable_require:
        env[DISABLE_REQUIRE] = "true"
    privileged = is_privileged(spec)
    legacy = is_legacy(env)
    mount_entries = device_list_mounts(spec.mounts)
    devices = visible_devices(env, mount_entries, config, privileged, legacy)
    if devices is None:
        return None
    mig_config = _mig_devices(env, MIG_CONFIG_DEVICES, privileged)
    mig_monitor = _mig_devices(env, MIG_MONITOR_DEVICES, privileged)
    imex = select_imex_channels(env, mount_entries, config, privileged, legacy)
    capabilities = driver_capabilities(env, config.supported_driver_capabilities, legacy)
    disabled = requirements_disabled(env)
    requirements = () if disabled else collect_requirements(env, legacy)
    check_mode(devices, config)
    return ContainerRequest(
        devices=devices,
        mig_config_devices=mig_config,
        mig_monitor_devices=mig_monitor,
        imex_channels=imex,
        driver_capabilities=capabilities,
        requirements=requirements,
        disable_require=disabled,
        features=gated_features(env),
    )


# NVIDIA_<NAME>=enabled turns a device family on (NVIDIA's gated modifiers, v1.17)
GATED = (("NVIDIA_GDS", "gds"), ("NVIDIA_MOFED", "mofed"), ("NVIDIA_NVSWITCH", "nvswitch"),
         ("NVIDIA_GDRCOPY", "gdrcopy"))


def gated_features(env: dict[str, str]) -> tuple[str, ...]:
    """The device families the image turns on (exactly "enabled", as NVIDIA compares)."""
    return tuple(name for var, name in GATED if env.get(var) == "enabled")


def parse_env(entries: Iterable[str]) -> dict[str, str]:
    """`process.env` as a dict: split at the first "=", the last duplicate wins (1.5)."""
    env: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if not sep:
            shown = entry if len(entry) <= 200 else entry[:200] + "..."
            raise RequestError(
                f"invalid environment variable: {shown} (process.env entries must be NAME=VALUE)"
            )
        env[name] = value
    return env


def is_legacy(env: dict[str, str]) -> bool:
    """A legacy CUDA image: CUDA_VERSION non-empty and NVIDIA_REQUIRE_CUDA empty or unset."""
    return bool(env.get(CUDA_VERSION)) and not env.get(REQUIRE_CUDA)


def _capability_error(spec: Spec, detail: str) -> SpecError:
    return SpecError(
        f"could not decode Process.Capabilities in OCI spec: json: {detail} (in {spec.path})"
    )


def _string_list(spec: Spec, value: object, name: str) -> list[str]:
    """A JSON array of strings (null elements read as "") or raise Go's decoder error."""
    where = f"Go struct field LinuxCapabilities.{name}" if name else "Go value"
    if value is None:
        return []
    if not isinstance(value, list):
        raise _capability_error(
            spec, f"cannot unmarshal {json_kind(value)} into {where} of type []string"
        )
    for item in value:
        if item is not None and not isinstance(item, str):
            raise _capability_error(
                spec, f"cannot unmarshal {json_kind(item)} into {where} of type string"
            )
    return [item or "" for item in value]


def is_privileged(spec: Spec) -> bool:
    """CAP_SYS_ADMIN in the bounding set (or in the list of the old rc1..rc4 format) (1.6)."""
    caps = spec.capabilities
    if caps is None:
        return False
    version = "v" + spec.oci_version
    old_format = (
        semver.compare(version, "v1.0.0-rc1") >= 0 and semver.compare(version, "v1.0.0-rc5") < 0
    )
    if old_format:
        names = _string_list(spec, caps, "")
    else:
        if not isinstance(caps, dict):
            raise _capability_error(
                spec,
                f"cannot unmarshal {json_kind(caps)} into Go value of type "
                "specs.LinuxCapabilities",
            )
        sets = {name: _string_list(spec, field(caps, name), name) for name in _CAP_SETS}
        names = sets["bounding"]
    return "CAP_SYS_ADMIN" in names


def _mig_devices(env: dict[str, str], name: str, privileged: bool) -> tuple[str, ...]:
    """MIG config/monitor devices; a non-empty value needs a privileged container (1.9)."""
    value = env.get(name, "")
    if value and not privileged:
        short = name.removeprefix("NVIDIA_")
        raise RequestError(
            f"cannot set {short} in non privileged container (unset {name}, or run the "
            "container privileged)"
        )
    return check_ids(dedupe(e for e in (go_trim_space(p) for p in value.split(",")) if e), name)


def driver_capabilities(
    env: dict[str, str], supported: DriverCapability, legacy: bool
) -> DriverCapability:
    """NVIDIA_DRIVER_CAPABILITIES against `supported-driver-capabilities` (1.12)."""
    if DRIVER_CAPABILITIES not in env:
        return supported if legacy else supported & DEFAULT_CAPABILITIES
    value = env[DRIVER_CAPABILITIES]
    if not value:
        return supported & DEFAULT_CAPABILITIES
    requested = {n for n in (go_trim_space(part) for part in value.split(",")) if n}
    if "all" in requested:
        return supported
    supported_names = supported.names()
    allowed = sorted(n for n in requested if n in supported_names)
    if len(allowed) != len(requested):
        raise RequestError(_capabilities_problem(sorted(requested), supported_names))
    return DriverCapability.from_names(allowed)


def _capabilities_problem(requested: list[str], supported: tuple[str, ...]) -> str:
    """NVIDIA's "unsupported capabilities found in '...'", then which words and what to do: a
    typo gets the nearest valid name (difflib, as a spell checker) and the valid values."""
    from difflib import get_close_matches

    from nvmount.api import KNOWN_CAPABILITIES

    head = f"unsupported capabilities found in '{shorten(','.join(requested), 200)}'"
    unknown = [n for n in requested if n not in KNOWN_CAPABILITIES][:8]
    if unknown:
        words = []
        for word in unknown:
            near = get_close_matches(word.lower(), (*KNOWN_CAPABILITIES, "all"), n=1)
            words.append((f"'{shorten(word, 40)}'", f" (did you mean '{near[0]}'?)"
                          if near else ""))
        what = (f"{words[0][0]} is not a driver capability{words[0][1]}" if len(words) == 1
                else "not driver capabilities: " + ", ".join(w + h for w, h in words))
        return (f"{head}: {what}; valid: {', '.join(KNOWN_CAPABILITIES)} or all (fix "
                "NVIDIA_DRIVER_CAPABILITIES)")
    excluded = [n for n in requested if n not in supported]
    return (f"{head}: {', '.join(repr(n) for n in excluded)} not in "
            "supported-driver-capabilities "
            f"'{','.join(supported)}' of the config (add it there, or leave it out of "
            "NVIDIA_DRIVER_CAPABILITIES)")


def requirements_disabled(env: dict[str, str]) -> bool:
    """NVIDIA_DISABLE_REQUIRE parsed as a Go bool (1, t, T, TRUE, true, True)."""
    return env.get(DISABLE_REQUIRE) in _GO_TRUE


def collect_requirements(env: dict[str, str], legacy: bool) -> tuple[str, ...]:
    """NVIDIA_REQUIRE_* values (not NVIDIA_REQUIRE_JETPACK*), by variable name, then the legacy
    `cuda>=MAJOR.MINOR` (1.11). Values are not validated here."""
    names = sorted(
        n for n in env if n.startswith(REQUIRE_PREFIX) and not n.startswith(REQUIRE_JETPACK)
    )
    if names:  # requirements are imported only when asked (the hook's common path)
        check_requirement_budgets(names, env)
    requirements = [env[n] for n in names]
    if legacy:
        version = env[CUDA_VERSION]
        try:
            major_minor = semver.parse_major_minor(version)
        except ValueError as err:
            raise RequestError(
                f"failed to get requirements failed to get version: invalid CUDA version "
                f"{shorten(version)}: {err} (fix CUDA_VERSION, or set "
                "NVIDIA_DISABLE_REQUIRE=true)"
            ) from None
        requirements.append(f"cuda>={major_minor}")
    return tuple(requirements)


def check_requirement_budgets(names: Sequence[str], env: dict[str, str]) -> None:
    """RequestError naming the variable when the NVIDIA_REQUIRE_* values exceed the engine's
    budgets (`nvmount.plan.requirements`): count, characters and conditions (atoms)."""
    from nvmount.api import requirements as R

    hint = "(shorten the value, or set NVIDIA_DISABLE_REQUIRE=true)"
    if len(names) > R.MAX_REQUIREMENTS:
        raise RequestError(f"too many NVIDIA_REQUIRE_* variables: {len(names)} (at most "
                           f"{R.MAX_REQUIREMENTS}; unset some, or set NVIDIA_DISABLE_REQUIRE=true)")
    total = 0
    for name in names:
        value = env[name]
        if len(value) > R.MAX_REQUIREMENT_CHARS:
            raise RequestError(f"{name}: value of {len(value)} characters, more than "
                               f"{R.MAX_REQUIREMENT_CHARS} {hint}")
        atoms = R.count_atoms(value)
        if atoms > R.MAX_ATOMS:
            raise RequestError(f"{name}: {atoms} conditions, more than {R.MAX_ATOMS} {hint}")
        number = long_number(value)
        if number is not None:
            raise RequestError(f"{name}: number {shorten(number)!r} has more than "
                               f"{MAX_DIGITS} digits (versions are numbers of at most "
                               f"{MAX_DIGITS} digits per component)")
        total += atoms
    if total > R.MAX_TOTAL_ATOMS:
        raise RequestError(f"NVIDIA_REQUIRE_*: {total} conditions in all, more than "
                           f"{R.MAX_TOTAL_ATOMS} {hint}")


def check_mode(devices: Sequence[str], config: HookConfig) -> None:
    """NVIDIA's mode check (1.14): nvhook is the legacy hook, so any other mode fails."""
    if config.runtime_hook.skip_mode_detection:
        return
    mode = resolve_mode(devices, config)
    if mode not in ("legacy", "csv"):  # csv: the engine reads the Tegra mount specs
        raise RequestError(MODE_ERROR)


def resolve_mode(devices: Sequence[str] | None, config: HookConfig) -> str:
    """`nvidia-container-runtime.mode`, with `auto` resolved as NVIDIA 1.20's hook does from
    the devices in effect (after the policy: an ignored mount or variable counts for nothing):
    `cdi` when they are all fully qualified CDI names, `csv` on a Tegra root, else `legacy`
    (nvhook probes no platform: NVML, WSL and unknown hosts are `legacy` for the hook)."""
    mode = config.runtime.mode
    if mode == "auto":
        mode = "cdi" if only_cdi_names(devices) else (
            "csv" if csv_mode(config) else "legacy")
        log.info("Auto-detected mode as '%s'", mode)
    else:
        log.info("Using requested mode '%s'", mode)
    return mode


def cdi_request(spec: Spec, annotations: object, config: HookConfig) -> tuple[str, ...] | None:
    """The CDI device names the runtime wrapper resolves for this container, decided by the
    same policy as every other request (`visible_devices`: privilege, accept-* settings,
    swarm variables, volume mounts, annotation prefixes), as NVIDIA 1.20's runtime does in
    `cdi` mode: None when the mode is not `cdi` (the hook's legacy path decides then).
    Annotations count only in `cdi` mode; a plain id gets `modes.cdi.default-kind`."""
    from nvhook.hook.device_lists import annotation_requests

    env = parse_env(spec.env)
    privileged = is_privileged(spec)
    legacy = is_legacy(env)
    mounts = device_list_mounts(spec.mounts)
    asked = annotation_requests(annotations, config.runtime.modes_cdi_annotation_prefixes)
    devices = visible_devices(env, mounts, config, privileged, legacy, asked, quiet=True)
    if asked and resolve_mode(devices, config) != "cdi":  # then as if there were none
        devices = visible_devices(env, mounts, config, privileged, legacy, quiet=True)
    if devices is None or resolve_mode(devices, config) != "cdi":
        return None  # the hook's decision (derive_request) says why, once
    kind = config.runtime.modes_cdi_default_kind
    return dedupe(d if only_cdi_names((d,)) else f"{kind}={d or 'none'}"
                  for d in devices or ("none",))


def csv_mode(config: HookConfig) -> bool:
    """Tegra CSV mode: asked for, or `auto` on a driver root with /etc/nv_tegra_release.
    With `skip-mode-detection` NVIDIA's hook proceeds as legacy whatever the mode says."""
    import os

    if config.runtime_hook.skip_mode_detection:
        return False
    mode = config.runtime.mode
    return mode == "csv" or (mode == "auto" and os.path.isfile(
        os.path.join(config.cli.root or "/", "etc/nv_tegra_release")))


