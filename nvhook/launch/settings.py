"""The runtime wrapper's settings: the few config.toml keys every `runc` call needs.

Stage: the wrapper's fast path (no dataclasses, typing, logging or tomllib unless the file is
outside the simple TOML subset, `toml_subset`). The file is found in the one lookup order,
`nvhook.config.basics.candidates` (NVIDIA_CTK_CONFIG_FILE_PATH > the config its launcher
recorded with `nvhook install --config` > $XDG_CONFIG_HOME/nvidia-container-runtime/config.toml
> /etc/nvidia-container-runtime/config.toml), and every error says which file and what named
it. Only the keys
read here are checked here; a GPU container's `create` then loads the whole file with
`nvhook.config.load_config`, which checks everything (so `state`, `delete` or `kill` of a
container keep working while a broken key elsewhere in the file fails GPU creates only).
"""

from __future__ import annotations

import os
import stat

from nvhook.config.basics import (
    CONFIG_PATH_ENV,
    DEFAULT_CONFIG_PATH,
    DEFAULT_RUNTIMES,
    RECORDED,
    swarm_names,
)
from nvhook.config.basics import candidates as config_candidates
from nvhook.errors import ConfigError
from nvhook.hook.request_env import needles as request_needles

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ("CONFIG_PATH_ENV", "DEFAULT_CONFIG_PATH", "DEFAULT_RUNTIMES")  # re-exported
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
    ("nvidia-container-runtime.modes.cdi.annotation-prefixes", "annotation_prefixes", "list"),
)
RUNTIME_MODES = ("auto", "legacy", "spec")  # nvhook.config.model.RUNTIME_MODES


class Settings:
    """What the wrapper needs from config.toml; `path` is None for built-in defaults."""

    __slots__ = ("annotation_prefixes", "debug_file", "document", "hook_path", "log_level",
                 "origin", "path", "runtime_mode", "runtimes", "stamp", "swarm_resource",
                 "volume_mounts")

    def __init__(self, path: str | None = None, origin: str = "") -> None:
        self.path = path
        self.origin = origin  # what named the file (for messages; "" for the default path)
        self.stamp: tuple[int, ...] | None = None  # (dev, inode, size, mtime, ctime) as read
        self.document: dict[str, Any] = {}  # the whole parsed file (a create validates it all)
        self.runtimes: tuple[str, ...] = DEFAULT_RUNTIMES
        self.debug_file = "/dev/null"
        self.log_level = "info"
        self.hook_path = "nvidia-container-runtime-hook"
        self.runtime_mode = "auto"
        self.swarm_resource = ""
        self.volume_mounts = False
        self.annotation_prefixes: tuple[str, ...] = ("cdi.k8s.io/",)

    def swarm_variables(self) -> tuple[str, ...]:
        """`swarm-resource` split as NVIDIA does (`nvhook.config.basics.swarm_names`)."""
        return swarm_names(self.swarm_resource)

    def needles(self) -> tuple[str, ...]:
        """Strings at least one of which a config.json that may want GPUs contains: the GPU
        variables, JSON escapes, the CDI annotation prefixes, the swarm variables and, when
        volume-mount lists count, their directory's name."""
        return request_needles(self.annotation_prefixes, self.swarm_variables(),
                               self.volume_mounts)


def find_config_path(environ: Mapping[str, str], recorded: str | None = None,
                     launcher: str = "") -> tuple[str | None, bool, str]:
    """(the config file to read or None, whether it must exist, what named it). `recorded`:
    the file the launcher `launcher` was written for (`nvhook install --config`)."""
    for path, origin, required in config_candidates(environ, recorded=recorded):
        if origin == RECORDED:
            origin = (f"the launcher {launcher or '?'} written by `nvhook install --config "
                      f"{recorded}`")
        if required or os.path.exists(path):
            return path, required, origin
    return None, False, ""


def load_settings(environ: Mapping[str, str], recorded: str | None = None,
                  launcher: str = "") -> Settings:
    """The wrapper's settings from the config file `find_config_path` names (or defaults)."""
    path, required, origin = find_config_path(environ, recorded, launcher)
    if path is None:
        return Settings()
    read = _read(path, required, origin)
    if read is None:
        return Settings()
    text, stamp = read
    document = _parse(text, path, origin)
    settings = settings_from_document(document, path, origin)
    settings.stamp, settings.document = stamp, document
    return settings


def named_by(origin: str) -> str:
    """" (named by ...)" for messages, "" for the default path."""
    return f" (named by {origin})" if origin else ""


def _read(path: str, required: bool, origin: str) -> tuple[str, tuple[int, ...]] | None:
    """(the file's text, its stamp), or None when an optional file is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError(f"error loading config: {path}{named_by(origin)}: not a "
                                  "regular file")
            data = _read_fd(fd)
        finally:
            os.close(fd)
    except FileNotFoundError as err:
        if not required:
            return None
        raise ConfigError(f"error loading config: couldn't open required configuration file "
                          f"{path}: file does not exist{named_by(origin)} (restore it, or name "
                          "an existing file)") from err
    except OSError as err:
        raise ConfigError(f"error loading config: open {path}{named_by(origin)}: "
                          f"{err.strerror}") from err
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"error loading config: {path}{named_by(origin)} is larger than 4 MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"error loading config: {path}{named_by(origin)}: not UTF-8 "
                          f"({err})") from err
    return text, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_CONFIG_BYTES and (chunk := os.read(fd, MAX_CONFIG_BYTES + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _parse(text: str, path: str, origin: str = "") -> dict[str, Any]:
    from nvhook.config.toml_read import loads as toml_loads  # the simple subset first

    try:
        return toml_loads(text)
    except ValueError as err:
        raise ConfigError(f"error loading config: couldn't parse configuration file {path}"
                          f"{named_by(origin)}: {err} (fix the TOML syntax)") from err


def settings_from_document(doc: dict[str, Any], path: str | None,
                           origin: str = "") -> Settings:
    """Overlay the keys the wrapper reads on the defaults, checking their types. Pure."""
    settings = Settings(path, origin)
    where = f"{path}{named_by(origin)}"
    for key, attr, kind in _KEYS:
        value = _lookup(doc, key)
        if value is None:
            continue
        if not _is_kind(value, kind):
            raise ConfigError(f"error loading config: invalid config {where}: {key} = "
                              f"{value!r} is not {_KINDS[kind]}")
        setattr(settings, attr, tuple(value) if kind == "list" else value)
    if not settings.runtimes:
        raise ConfigError("error loading config: at least one runtime candidate must be "
                          f"specified (nvidia-container-runtime.runtimes in {where})")
    if settings.runtime_mode not in RUNTIME_MODES:
        raise ConfigError(f"error loading config: invalid config {where}: nvhook.runtime-mode = "
                          f"{settings.runtime_mode!r} (allowed: {', '.join(RUNTIME_MODES)})")
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
