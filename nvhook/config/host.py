"""The host-dependent parts of config.toml's defaults and values (stage 0 of the hook):
`nvidia-container-cli.ldconfig`'s '@' rule and `.real` preference, and the default `user` of
SUSE hosts. Re-exported by `nvhook.config.model`, which applies them.
"""

from __future__ import annotations

import os

from nvhook.errors import ConfigError
from nvmount.bounds import shorten

__all__ = ["default_ldconfig", "default_user", "normalise_ldconfig"]


def normalise_ldconfig(value: str, allow_from_container: bool, *, checked: bool) -> str:
    """The '@' rule and normalisation of `nvidia-container-cli.ldconfig` (hook-spec 1.16).

    "@<path>" names a host binary: one trailing ".real" is dropped, then "@<path>.real" is used
    if that file exists on the host. Other values are container paths, allowed only with
    `features.allow-ldconfig-from-container` (the check applies to loaded files only).
    """
    if value.startswith("@"):
        host_path = value[1:].removesuffix(".real")
        return f"@{host_path}.real" if os.path.exists(host_path + ".real") else f"@{host_path}"
    if checked and not allow_from_container:
        raise ConfigError(
            f'nvidia-container-cli.ldconfig value "{shorten(value, 200)}" is not host-relative '
            "(does not start with a '@'): invalid config value (use '@/sbin/ldconfig', or set "
            "features.allow-ldconfig-from-container = true to run the container's own)"
        )
    return value


def default_ldconfig() -> str:
    return "@/sbin/ldconfig.real" if os.path.exists("/sbin/ldconfig.real") else "@/sbin/ldconfig"


def default_user(os_release: str = "/etc/os-release") -> str:
    """"root:video" on SUSE hosts (ID_LIKE names suse or opensuse), else ""."""
    try:
        with open(os_release, encoding="utf-8", errors="replace") as stream:
            lines = stream.read(65536).splitlines()
    except OSError:
        return ""
    for line in lines:
        if line.startswith("ID_LIKE="):
            words = line[len("ID_LIKE=") :].strip().strip("\"'").split()
            if "suse" in words or "opensuse" in words:
                return "root:video"
    return ""
