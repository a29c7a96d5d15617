"""Stage 0 of the hook: `config.toml` (NVIDIA's keys and defaults, hook-spec 2.1, plus `[nvhook]`).

The schema, its defaults and the validation of a parsed document (`config_from_document`);
finding and reading the file is `nvhook.config.load`. Pure but for two host-dependent
defaults (`/etc/os-release`, whether `/sbin/ldconfig.real` exists).

Dotted keys and tables are equivalent (TOML itself makes them so), unknown keys are ignored, a
value of the wrong type is an error naming the key, the value and the expected type.
"""

from __future__ import annotations

import os

from nvhook.config.basics import DEFAULT_RUNTIMES, go_trim_space
from nvhook.config.host import default_ldconfig, default_user, normalise_ldconfig
from nvhook.errors import ConfigError
from nvmount.api import KNOWN_CAPABILITIES, DriverCapability
from nvmount.bounds import shorten
from nvmount.records import field, record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any


MODES = ("auto", "cdi", "csv", "jit-cdi", "legacy")
RUNTIME_MODES = ("auto", "legacy", "spec")  # [nvhook] runtime-mode (nvhook.runtime.modes)
CUDA_COMPAT_MODES = ("", "disabled", "hook", "ldconfig", "mount")
LDCACHE_MODES = ("write", "ldconfig")
DRIVER_CONTAINER_ROOT = "/run/nvidia/driver"  # where the GPU Operator's driver container is


@record
class CliConfig:
    """`[nvidia-container-cli]`: what nvidia-container-cli got; nvmount's engine settings."""

    root: str = ""
    path: str = ""
    environment: tuple[str, ...] = ()
    debug: str = ""
    ldcache: str = ""
    load_kmods: bool = True
    no_pivot: bool = False
    no_cgroups: bool = False
    user: str = ""
    ldconfig: str = "@/sbin/ldconfig"  # normalised (hook-spec 1.16): "@<host path>" or verbatim
    root_origin: str = ""  # "config" (root named), "detected" (a driver container), "" (/)


@record
class RuntimeConfig:
    """`[nvidia-container-runtime]`."""

    debug: str = "/dev/null"
    log_level: str = "info"
    runtimes: tuple[str, ...] = DEFAULT_RUNTIMES
    mode: str = "auto"
    modes_csv_mount_spec_path: str = "/etc/nvidia-container-runtime/host-files-for-container.d"
    modes_cdi_default_kind: str = "nvidia.com/gpu"
    modes_cdi_annotation_prefixes: tuple[str, ...] = ("cdi.k8s.io/",)
    modes_cdi_spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
    modes_legacy_cuda_compat_mode: str = "ldconfig"
    modes_csv_compat_container_root: str = ""  # 1.20: the CSV images' CUDA compat dir
    modes_jit_cdi_nvcdi_feature_flags: tuple[str, ...] = ()  # 1.20, jit-cdi only
    modes_jit_cdi_nvcdi_disable_hooks: tuple[str, ...] = ()  # 1.20, jit-cdi only


@record
class RuntimeHookConfig:
    """`[nvidia-container-runtime-hook]`."""

    path: str = "nvidia-container-runtime-hook"
    skip_mode_detection: bool = False


@record
class CtkConfig:
    """`[nvidia-ctk]`."""

    path: str = "nvidia-ctk"


@record
class FeaturesConfig:
    """`[features]`: all off unless explicitly true."""

    allow_cuda_compat_libs_from_container: bool = False
    allow_ldconfig_from_container: bool = False
    disable_cuda_compat_lib_hook: bool = False
    disable_imex_channel_creation: bool = False
    ignore_imex_channel_requests: bool = False
    allow_unknown_oci_spec_fields: bool = False  # 1.20: runtime's strict config.json decoding
    no_additional_gids_for_device_nodes: bool = False  # 1.20: CDI additionalGids


@record
class NvhookConfig:
    """`[nvhook]`: nvhook's own settings."""

    proc_root: str = "/proc"
    timing_log: str = ""
    ldconfig_required: bool = False
    cache_dir: str = "/run/nvhook"  # root-only caches (driver inventory); "" = none
    ldcache: str = "write"  # how the container's ld.so.cache is updated: write | ldconfig
    runtime_mode: str = "auto"  # the wrapper's delivery: follow `mode`, or force legacy | spec
    narrow_procfs: bool = False  # spec delivery: a hook narrows /proc/driver/nvidia as well
    nvml_timeout: float = 30.0  # seconds the NVML helper may take before it is killed
    sim_procfs: bool = False  # simulated driver: the hook mounts a tmpfs on /proc/driver
    # the legacy hook sets NVML's CUDA memory limits from NVIDIA_GPU_MEMORY_REQUEST(S)/LIMIT(S)
    # (as nvidia-cdi-hook apply-cuda-memory-limits; NVML 13.4, cgroup v2)
    cuda_memory_limits: bool = False
    mps_pipe_directory: str = "/tmp/nvidia-mps"  # libnvc: $CUDA_MPS_PIPE_DIRECTORY (not read)
    test_faults: bool = False  # tests only: NVHOOK_FAULT (with --debug) arms fault injection
    # the driver root used when nvidia-container-cli.root names none and a driver container
    # (GPU Operator) has put its root here; "" turns the detection off
    driver_container_root: str = DRIVER_CONTAINER_ROOT
    sys_root: str = "/sys"  # sysfs (the simulated driver has its own)


@record
class HookConfig:
    """The whole configuration; `path` is the file it was loaded from (None: built-in defaults)."""

    path: str | None = None
    disable_require: bool = False
    swarm_resource: str = ""
    accept_nvidia_visible_devices_envvar_when_unprivileged: bool = True
    accept_nvidia_visible_devices_as_volume_mounts: bool = False
    supported_driver_capabilities: DriverCapability = field(default_factory=DriverCapability.all)
    cli: CliConfig = field(default_factory=CliConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    runtime_hook: RuntimeHookConfig = field(default_factory=RuntimeHookConfig)
    ctk: CtkConfig = field(default_factory=CtkConfig)
    features: FeaturesConfig = field(default_factory=FeaturesConfig)
    nvhook: NvhookConfig = field(default_factory=NvhookConfig)
    unknown_keys: tuple[str, ...] = ()  # keys of the file nvhook does not know (`config check`)


# (TOML key path, group attribute or "" for top level, attribute, expected type)
_STR, _BOOL, _LIST, _NUM = "string", "boolean", "array of strings", "number"
_SCHEMA: tuple[tuple[str, str, str, str], ...] = (
    ("disable-require", "", "disable_require", _BOOL),
    ("swarm-resource", "", "swarm_resource", _STR),
    ("accept-nvidia-visible-devices-envvar-when-unprivileged", "",
     "accept_nvidia_visible_devices_envvar_when_unprivileged", _BOOL),
    ("accept-nvidia-visible-devices-as-volume-mounts", "",
     "accept_nvidia_visible_devices_as_volume_mounts", _BOOL),
    ("supported-driver-capabilities", "", "supported_driver_capabilities", _STR),
    ("nvidia-container-cli.root", "cli", "root", _STR),
    ("nvidia-container-cli.path", "cli", "path", _STR),
    ("nvidia-container-cli.environment", "cli", "environment", _LIST),
    ("nvidia-container-cli.debug", "cli", "debug", _STR),
    ("nvidia-container-cli.ldcache", "cli", "ldcache", _STR),
    ("nvidia-container-cli.load-kmods", "cli", "load_kmods", _BOOL),
    ("nvidia-container-cli.no-pivot", "cli", "no_pivot", _BOOL),
    ("nvidia-container-cli.no-cgroups", "cli", "no_cgroups", _BOOL),
    ("nvidia-container-cli.user", "cli", "user", _STR),
    ("nvidia-container-cli.ldconfig", "cli", "ldconfig", _STR),
    ("nvidia-container-runtime.debug", "runtime", "debug", _STR),
    ("nvidia-container-runtime.log-level", "runtime", "log_level", _STR),
    ("nvidia-container-runtime.runtimes", "runtime", "runtimes", _LIST),
    ("nvidia-container-runtime.mode", "runtime", "mode", _STR),
    ("nvidia-container-runtime.modes.csv.mount-spec-path", "runtime",
     "modes_csv_mount_spec_path", _STR),
    ("nvidia-container-runtime.modes.cdi.default-kind", "runtime", "modes_cdi_default_kind", _STR),
    ("nvidia-container-runtime.modes.cdi.annotation-prefixes", "runtime",
     "modes_cdi_annotation_prefixes", _LIST),
    ("nvidia-container-runtime.modes.cdi.spec-dirs", "runtime", "modes_cdi_spec_dirs", _LIST),
    ("nvidia-container-runtime.modes.legacy.cuda-compat-mode", "runtime",
     "modes_legacy_cuda_compat_mode", _STR),
    ("nvidia-container-runtime.modes.csv.compat-container-root", "runtime",
     "modes_csv_compat_container_root", _STR),
    ("nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags", "runtime",
     "modes_jit_cdi_nvcdi_feature_flags", _LIST),
    ("nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks", "runtime",
     "modes_jit_cdi_nvcdi_disable_hooks", _LIST),
    ("nvidia-container-runtime-hook.path", "runtime_hook", "path", _STR),
    ("nvidia-container-runtime-hook.skip-mode-detection", "runtime_hook",
     "skip_mode_detection", _BOOL),
    ("nvidia-ctk.path", "ctk", "path", _STR),
    ("features.allow-cuda-compat-libs-from-container", "features",
     "allow_cuda_compat_libs_from_container", _BOOL),
    ("features.allow-ldconfig-from-container", "features", "allow_ldconfig_from_container", _BOOL),
    ("features.disable-cuda-compat-lib-hook", "features", "disable_cuda_compat_lib_hook", _BOOL),
    ("features.disable-imex-channel-creation", "features", "disable_imex_channel_creation", _BOOL),
    ("features.ignore-imex-channel-requests", "features", "ignore_imex_channel_requests", _BOOL),
    ("features.allow-unknown-oci-spec-fields", "features", "allow_unknown_oci_spec_fields", _BOOL),
    ("features.no-additional-gids-for-device-nodes", "features",
     "no_additional_gids_for_device_nodes", _BOOL),
    ("nvhook.proc-root", "nvhook", "proc_root", _STR),
    ("nvhook.timing-log", "nvhook", "timing_log", _STR),
    ("nvhook.ldconfig-required", "nvhook", "ldconfig_required", _BOOL),
    ("nvhook.cache-dir", "nvhook", "cache_dir", _STR),
    ("nvhook.ldcache", "nvhook", "ldcache", _STR),
    ("nvhook.runtime-mode", "nvhook", "runtime_mode", _STR),
    ("nvhook.narrow-procfs", "nvhook", "narrow_procfs", _BOOL),
    ("nvhook.nvml-timeout", "nvhook", "nvml_timeout", _NUM),
    ("nvhook.sim-procfs", "nvhook", "sim_procfs", _BOOL),
    ("nvhook.cuda-memory-limits", "nvhook", "cuda_memory_limits", _BOOL),
    ("nvhook.mps-pipe-directory", "nvhook", "mps_pipe_directory", _STR),
    ("nvhook.test-faults", "nvhook", "test_faults", _BOOL),
    ("nvhook.driver-container-root", "nvhook", "driver_container_root", _STR),
    ("nvhook.sys-root", "nvhook", "sys_root", _STR),
)  # fmt: skip

_GROUPS: dict[str, type[Any]] = {
    "cli": CliConfig,
    "runtime": RuntimeConfig,
    "runtime_hook": RuntimeHookConfig,
    "ctk": CtkConfig,
    "features": FeaturesConfig,
    "nvhook": NvhookConfig,
}


_TYPE_NAMES = ((bool, "boolean"), (str, "string"), (int, "integer"), (float, "float"),
               (list, "array"), (dict, "table"))


def _type_name(value: Any) -> str:
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)),
                type(value).__name__)


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _lookup(document: dict[str, Any], dotted: str, where: str) -> Any:
    """The value at a dotted key path, None when absent; a non-table on the way is an error."""
    node: Any = document
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, dict):
            parent = ".".join(parts[:depth])
            raise ConfigError(
                f"invalid config {where}: {parent} = {shorten(repr(node), 200)} is "
                f"{_a(_type_name(node))}, expected a table"
            )
        if part not in node:
            return None
        node = node[part]
    return node


def _checked(value: Any, key: str, kind: str, where: str) -> Any:
    ok = {
        _STR: isinstance(value, str),
        _BOOL: isinstance(value, bool),
        _LIST: isinstance(value, list) and all(isinstance(v, str) for v in value),
        _NUM: isinstance(value, (int, float)) and not isinstance(value, bool)
        and 0 < value <= 3600,  # seconds: positive, at most an hour
    }[kind]
    if not ok:
        raise ConfigError(
            f"invalid config {where}: {key} = {shorten(repr(value), 200)} is "
            f"{_a(_type_name(value))}, expected {_a(kind)}"
            + (" of seconds (more than 0, at most 3600)" if kind == _NUM else "")
        )
    return tuple(value) if kind == _LIST else float(value) if kind == _NUM else value


def config_from_document(document: dict[str, Any], path: str | None) -> HookConfig:
    """Overlay a parsed TOML document on the defaults, validate and post-process. Pure but for
    the two host-dependent defaults (`default_ldconfig`, `default_user`) and `normalise_ldconfig`.
    """
    where = path or "(built-in defaults)"
    top: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {name: {} for name in _GROUPS}
    groups["cli"].update(ldconfig=default_ldconfig(), user=default_user())
    for key, group, attr, kind in _SCHEMA:
        value = _lookup(document, key, where)
        if value is not None:
            (groups[group] if group else top)[attr] = _checked(value, key, kind, where)
    _check_choice(groups["runtime"], "mode", "nvidia-container-runtime.mode", MODES, where)
    _check_choice(groups["runtime"], "modes_legacy_cuda_compat_mode",
                  "nvidia-container-runtime.modes.legacy.cuda-compat-mode", CUDA_COMPAT_MODES,
                  where)
    _check_choice(groups["nvhook"], "runtime_mode", "nvhook.runtime-mode", RUNTIME_MODES, where)
    features = FeaturesConfig(**groups["features"])
    groups["cli"]["ldconfig"] = normalise_ldconfig(
        groups["cli"]["ldconfig"], features.allow_ldconfig_from_container, checked=path is not None
    )
    _check_choice(groups["nvhook"], "ldcache", "nvhook.ldcache", LDCACHE_MODES, where)
    for attr in ("proc_root", "timing_log", "cache_dir", "mps_pipe_directory",
                 "driver_container_root", "sys_root"):
        _check_absolute(groups["nvhook"], attr, f"nvhook.{attr.replace('_', '-')}", where)
    _choose_root(groups["cli"], groups["nvhook"].get("driver_container_root",
                                                     DRIVER_CONTAINER_ROOT))
    top["supported_driver_capabilities"] = parse_supported_capabilities(
        top.get("supported_driver_capabilities", ",".join(KNOWN_CAPABILITIES))
    )
    built = {name: cls(**groups[name]) for name, cls in _GROUPS.items() if name != "features"}
    return HookConfig(path=path, features=features, unknown_keys=unknown_keys(document), **top,
                      **built)


def _choose_root(cli: dict[str, Any], driver_container: str) -> None:
    """The driver root: the configured one, else a driver container's (hook-spec 2.2), else /."""
    if cli.get("root"):
        cli["root_origin"] = "config"
    elif driver_container and is_driver_root(driver_container):
        cli.update(root=driver_container, root_origin="detected")


def is_driver_root(path: str) -> bool:
    """Whether `path` holds a driver's user space (its nvidia-smi): an empty mount point, where
    a driver container has not started yet, is not one."""
    return os.path.isfile(os.path.join(path, "usr/bin/nvidia-smi")) or os.path.isfile(
        os.path.join(path, "bin/nvidia-smi"))


def known_keys() -> tuple[str, ...]:
    """Every dotted key nvhook reads."""
    return tuple(key for key, _, _, _ in _SCHEMA)


def unknown_keys(document: dict[str, Any]) -> tuple[str, ...]:
    """The dotted keys of `document` that name no key nvhook reads (and no table holding one)."""
    known = known_keys()
    tables = {key.rsplit(".", n)[0] for key in known for n in range(1, key.count(".") + 1)}
    found: list[str] = []
    pending: list[tuple[str, Any]] = list(document.items())
    for key, value in pending:  # grows while it is walked: tables nvhook knows are entered
        if len(found) == 64:
            break
        if key in known:
            continue
        if key in tables and isinstance(value, dict):
            pending.extend((f"{key}.{k}", v) for k, v in value.items())
        else:
            found.append(key)
    return tuple(found)


def _check_choice(
    group: dict[str, Any], attr: str, key: str, allowed: tuple[str, ...], where: str
) -> None:
    if attr in group and group[attr] not in allowed:
        shown = ", ".join(a if a else repr(a) for a in allowed)
        raise ConfigError(f"invalid config {where}: {key} = {shorten(repr(group[attr]), 200)} "
                          f"(allowed: {shown})")


def _check_absolute(group: dict[str, Any], attr: str, key: str, where: str) -> None:
    value = group.get(attr)
    if value and not value.startswith("/"):
        raise ConfigError(
            f"invalid config {where}: {key} = {shorten(repr(value), 200)} is not an absolute path"
        )


def parse_supported_capabilities(value: str) -> DriverCapability:
    """`supported-driver-capabilities` post-processing (hook-spec 1.12)."""
    if value == "all":
        return DriverCapability.all()
    names = [n for n in (go_trim_space(part) for part in value.split(",")) if n]
    if any(n not in KNOWN_CAPABILITIES for n in names):
        raise ConfigError(
            "Invalid value for config option 'supported-driver-capabilities'; "
            f"{shorten(value, 200)} (supported: {','.join(KNOWN_CAPABILITIES)})"
        )
    return DriverCapability.from_names(names)

