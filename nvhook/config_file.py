"""Where the hook's config.toml is, and its parsed document (stage 0 of the hook, its I/O).

Lookup order (`find_config`): `--config` > `NVIDIA_CTK_CONFIG_FILE_PATH` >
`$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml` -> `/etc/nvidia-container-runtime/
config.toml`. A missing explicit file is an error; missing default files mean built-in
defaults. The TOML document is parsed once per change of the file: it is kept in a root-only
cache (`nvmount.cachefile`, /run/nvhook) keyed by the file's dev/inode/size/mtime/ctime and
nvhook's version, so a container start with an unchanged config imports no TOML parser. The
document is validated every time (`nvhook.config.config_from_document`).
"""

from __future__ import annotations

import os

from nvhook import __version__
from nvhook.errors import ConfigError
from nvmount.bounds import shorten
from nvmount.cachefile import DEFAULT_DIR, file_stamp, load, store

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from nvhook.config import HookConfig

DEFAULT_CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
CONFIG_PATH_ENV = "NVIDIA_CTK_CONFIG_FILE_PATH"
_MAX_CONFIG_BYTES = 4 * 1024 * 1024
_CACHE_NAME = "config"  # {path: (file stamp, document)} of the last few files parsed
_CACHED_FILES = 8


def find_config(
    explicit_path: str | None, environ: Mapping[str, str], cwd: str | None = None
) -> tuple[str | None, str]:
    """(path to load or None for built-in defaults, what named it: "--config",
    "NVIDIA_CTK_CONFIG_FILE_PATH", or "" for the default search, whose files are optional).
    Relative explicit paths are taken relative to `cwd` (the hook's original directory)."""
    named = ((explicit_path, "--config"), (environ.get(CONFIG_PATH_ENV), CONFIG_PATH_ENV))
    for path, origin in named:
        if path:
            return (os.path.join(cwd, path) if cwd else path), origin
    xdg = environ.get("XDG_CONFIG_HOME", "")
    candidates = [os.path.join(xdg, "nvidia-container-runtime", "config.toml")] if xdg else []
    candidates.append(DEFAULT_CONFIG_PATH)
    for candidate in candidates:
        if os.path.exists(candidate):
            return candidate, ""
    return None, ""


def load_config(
    explicit_path: str | None, environ: Mapping[str, str], *, cwd: str | None = None
) -> HookConfig:
    """The hook's configuration: from the file `find_config` names, else built-in defaults.

    The parsed document is cached with what `nvhook.gate` needs of the validated config."""
    from nvhook.config import config_from_document

    path, origin = find_config(explicit_path, environ, cwd)
    if path is None:
        return config_from_document({}, None)
    stamp = file_stamp(path)
    entries = cached_entries()
    hit = entries.get(path)
    if hit is not None and hit[0] == stamp and len(hit) == 3:
        return config_from_document(dict(hit[1]), path)
    document = dict(hit[1]) if hit is not None and hit[0] == stamp else _read_toml(path, origin)
    if document is None:
        return config_from_document({}, None)
    config = config_from_document(document, path)
    if stamp is not None:  # cached only once it validated
        kept = {k: v for k, v in list(entries.items())[-(_CACHED_FILES - 1):] if k != path}
        store(DEFAULT_DIR, _CACHE_NAME, __version__,
              {**kept, path: (stamp, document, gate_facts(config))})
    return config


def cached_entries() -> dict[str, Any]:
    """{path: (file stamp, document, gate facts)} of the config cache ({} when none)."""
    cached = load(DEFAULT_DIR, _CACHE_NAME, __version__)
    return cached if isinstance(cached, dict) else {}


def gate_facts(config: HookConfig) -> tuple[tuple[str, ...], bool, bool]:
    """What `nvhook.gate` needs of a validated config: the swarm-resource variable names,
    whether /dev/null volume mounts can request devices, and whether a debug log is kept
    (then every container goes through the hook, which logs its decision)."""
    from nvhook.device_lists import swarm_variables

    return (swarm_variables(config), config.accept_nvidia_visible_devices_as_volume_mounts,
            bool(config.cli.debug))


def _read_toml(path: str, origin: str) -> dict[str, Any] | None:
    """The parsed file; None when an optional (default) file vanished after the lookup."""
    try:
        with open(path, "rb") as stream:
            data = stream.read(_MAX_CONFIG_BYTES + 1)
    except FileNotFoundError as err:
        if not origin:
            return None
        raise ConfigError(
            f"couldn't open required configuration file {path}: file does not exist "
            f"(named by {origin}; create it or name an existing file)"
        ) from err
    except OSError as err:
        raise ConfigError(f"couldn't open configuration file {path}: {err.strerror}") from err
    if len(data) > _MAX_CONFIG_BYTES:
        raise ConfigError(f"couldn't load configuration file {path}: larger than 4 MiB")
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
    try:
        return tomllib.loads(data.decode("utf-8"))
    except ValueError as err:  # UnicodeDecodeError, TOMLDecodeError, int()'s digit limit
        raise ConfigError(
            f"couldn't parse configuration file {path}: {shorten(str(err), 200)} (fix the TOML "
            "syntax)"
        ) from err
