"""The files `runtime configure` reads and writes: the engines' default paths, bounded UTF-8
reads, TOML parsing that refuses a broken file, atomic replacement keeping the mode (without
setuid/setgid bits); root reads and writes only paths no other user can change
(`nvmount.fs.trusted`).
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
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import read_file

    try:  # root edits only files root alone can change (nvmount.fs.trusted)
        data = read_file(os.path.abspath(path), "edit", MAX_BYTES)
    except FileNotFoundError:
        return None
    except TrustError as err:
        raise ConfigureError(f"refuse to {err}") from err
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
    """Replace `path` with `text` via a new file in its directory (mode kept without
    setuid/setgid bits, set with fchmod on the new file; new: 0644); every directory on the
    way trusted, missing ones made 0755 (`nvmount.fs.trusted`)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import write_atomic as write_trusted

    try:
        write_trusted(os.path.abspath(path), text.encode("utf-8"), "write", mode=0o644,
                      keep_mode=True, parents=True)
    except TrustError as err:
        raise ConfigureError(str(err)) from err
    except OSError as err:
        raise ConfigureError(f"write {path}: {err.strerror}") from err
