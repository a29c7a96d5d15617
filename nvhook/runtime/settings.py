"""The runtime wrapper's settings: the few config.toml keys every `runc` call needs.

Stage: the wrapper's fast path (no dataclasses, typing, logging or tomllib unless the file is
outside the simple TOML subset, `toml_subset`). The file is found as `nvhook.config.find_config`
finds it (NVIDIA_CTK_CONFIG_FILE_PATH > $XDG_CONFIG_HOME/nvidia-container-runtime/config.toml
> /etc/nvidia-container-runtime/config.toml; a test keeps the two in step). Only the keys
read here are checked here; a GPU container's `create` then loads the whole file with
`nvhook.config.load_config`, which checks everything (so `state`, `delete` or `kill` of a
container keep working while a broken key elsewhere in the file fails GPU creates only).
"""

from __future__ import annotations

import os

from nvhook.errors import ConfigError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

CONFIG_PATH_ENV = "NVIDIA_CTK_CONFIG_FILE_PATH"
DEFAULT_CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
DEFAULT_RUNTIMES = ("runc", "crun")
MAX_CONFIG_BYTES = 4 * 1024 * 1024
LOG_LEVELS = ("trace", "debug", "info", "warning", "error")

# (dotted key, attribute, kind) of the keys the wrapper reads
_KEYS = (
    ("nvidia-container-runtime.runtimes", "runtimes", "list"),
    ("nvidia-container-runtime.debug", "debug_file", "str"),
    ("nvidia-container-runtime.log-level", "log_level", "str"),
    ("nvidia-container-runtime-hook.path", "hook_path", "str"),
    ("nvhook.runtime-mode", "runtime_mode", "str"),
    ("swarm-resource", "swarm_resource", "str"),
    ("accept-nvidia-visible-devices-as-volume-mounts", "volume_mounts", "bool"),
)


class Settings:
    """What the wrapper needs from config.toml; `path` is None for built-in defaults."""

    __slots__ = ("debug_file", "hook_path", "log_level", "path", "runtime_mode", "runtimes",
                 "swarm_resource", "volume_mounts")

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.runtimes: tuple[str, ...] = DEFAULT_RUNTIMES
        self.debug_file = "/dev/null"
        self.log_level = "info"
        self.hook_path = "nvidia-container-runtime-hook"
        self.runtime_mode = "legacy"
        self.swarm_resource = ""
        self.volume_mounts = False

    def swarm_variables(self) -> tuple[str, ...]:
        """`swarm-resource` split as NVIDIA does (comma-separated, trimmed, no empties)."""
        return tuple(v for v in (p.strip() for p in self.swarm_resource.split(",")) if v)


def find_config_path(environ: Mapping[str, str]) -> tuple[str | None, bool]:
    """(the config file to read or None, whether it must exist)."""
    named = environ.get(CONFIG_PATH_ENV)
    if named:
        return named, True
    xdg = environ.get("XDG_CONFIG_HOME", "")
    for candidate in ((f"{xdg}/nvidia-container-runtime/config.toml",) if xdg else ()) + (
            DEFAULT_CONFIG_PATH,):
        if os.path.exists(candidate):
            return candidate, False
    return None, False


def load_settings(environ: Mapping[str, str]) -> Settings:
    """The wrapper's settings from the config file `find_config_path` names (or defaults)."""
    path, required = find_config_path(environ)
    if path is None:
        return Settings()
    text = _read(path, required)
    if text is None:
        return Settings()
    return settings_from_document(_parse(text, path), path)


def _read(path: str, required: bool) -> str | None:
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError as err:
        if not required:
            return None
        raise ConfigError(f"error loading config: couldn't open required configuration file "
                          f"{path}: file does not exist (named by {CONFIG_PATH_ENV})") from err
    except OSError as err:
        raise ConfigError(f"error loading config: open {path}: {err.strerror}") from err
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"error loading config: {path} is larger than 4 MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"error loading config: {path}: not UTF-8 ({err})") from err


def _parse(text: str, path: str) -> dict[str, Any]:
    from nvhook.config.toml_subset import parse_simple

    doc = parse_simple(text)
    if doc is not None:
        return doc
    from nvhook.config.toml_read import loads as toml_loads

    try:
        return toml_loads(text)
    except ValueError as err:
        raise ConfigError(f"error loading config: couldn't parse configuration file {path}: "
                          f"{err} (fix the TOML syntax)") from err


def settings_from_document(doc: dict[str, Any], path: str | None) -> Settings:
    """Overlay the keys the wrapper reads on the defaults, checking their types. Pure."""
    settings = Settings(path)
    for key, attr, kind in _KEYS:
        value = _lookup(doc, key)
        if value is None:
            continue
        if not _is_kind(value, kind):
            raise ConfigError(f"error loading config: invalid config {path}: {key} = "
                              f"{value!r} is not {_KINDS[kind]}")
        setattr(settings, attr, tuple(value) if kind == "list" else value)
    if not settings.runtimes:
        raise ConfigError("error loading config: at least one runtime candidate must be "
                          f"specified (nvidia-container-runtime.runtimes in {path})")
    if settings.runtime_mode not in ("legacy", "spec"):
        raise ConfigError(f"error loading config: invalid config {path}: nvhook.runtime-mode = "
                          f"{settings.runtime_mode!r} (allowed: legacy, spec)")
    return settings


_KINDS = {"str": "a string", "bool": "a boolean", "list": "an array of strings"}


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, bool if kind == "bool" else str)


def _lookup(doc: dict[str, Any], dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
