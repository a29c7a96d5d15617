"""The `nvidia-container-cli.ldconfig` setting, checked before anything is changed (pure but
for one existence test of the host path). Stage: ldcache.
"""

from __future__ import annotations

import os

from nvmount.errors import LdcacheError


def resolve_ldconfig(value: str) -> str:
    """The host path to run for config `nvidia-container-cli.ldconfig` (hook-spec §1.16).

    "@/sbin/ldconfig" is a host path: strip '@' and one trailing ".real", then prefer
    "<path>.real" when that exists on the host. A value without '@' names the image's own
    ldconfig and is refused.
    """
    if not value.startswith("@"):
        raise LdcacheError(
            f"use ldconfig {value!r}: not host-relative, and running the container image's "
            "ldconfig is not supported (set nvidia-container-cli.ldconfig = \"@/sbin/ldconfig\")"
        )
    path = value[1:].removesuffix(".real")
    if not os.path.isabs(path) or "\0" in path:
        raise LdcacheError(
            f"use ldconfig {value!r}: the host path must be absolute "
            "(e.g. nvidia-container-cli.ldconfig = \"@/sbin/ldconfig\")"
        )
    real = path + ".real"
    return real if os.path.isfile(real) else path
