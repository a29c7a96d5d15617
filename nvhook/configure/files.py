"""The files `runtime configure` reads and writes: the engines' default paths, bounded UTF-8
reads, TOML parsing that refuses a broken file, atomic replacement keeping the mode.
"""

from __future__ import annotations

import os
from typing import Any

from nvhook.errors import ConfigureError

DEFAULTS = {
    "docker": "/etc/docker/daemon.json",
    "containerd": "/etc/containerd/config.toml",
    "crio": "/etc/crio/crio.conf",
}
DROP_INS = {"containerd": "/etc/containerd/conf.d/99-nvidia.toml",
            "crio": "/etc/crio/crio.conf.d/99-nvidia.toml"}
HOOKS_DIRS = {"podman": "/etc/containers/oci/hooks.d", "crio": "/usr/share/containers/oci/hooks.d"}
MAX_BYTES = 4 * 1024 * 1024


def read_text(path: str) -> str | None:
    """The file's text, None when it does not exist."""
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ConfigureError(f"read {path}: {err.strerror}") from err
    if len(data) > MAX_BYTES:
        raise ConfigureError(f"refuse to edit {path}: larger than 4 MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigureError(f"refuse to edit {path}: not UTF-8 ({err})") from err


def read_toml(path: str) -> dict[str, Any] | None:
    from nvhook.config.toml_read import loads as toml_loads

    text = read_text(path)
    if text is None:
        return None
    try:
        return toml_loads(text)
    except ValueError as err:
        raise ConfigureError(f"refuse to use {path}: not valid TOML: {err} (fix the file "
                             "first; nothing was written)") from err


def write_atomic(path: str, text: str) -> None:
    """Replace `path` with `text` via a new file in its directory (mode kept; new: 0644)."""
    directory = os.path.dirname(path) or "."
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    tmp = os.path.join(directory, f".{os.path.basename(path)}.nvhook-{os.getpid()}")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as err:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise ConfigureError(f"write {path}: {err.strerror}") from err
