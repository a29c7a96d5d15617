"""Stage discover: whether there is a driver to discover at all. Reads one ld.so.cache.

Light on purpose (no `re`, nothing of the discovery itself): the runtime wrapper's spec
delivery asks this before every plan (`nvmount.pipeline.plan_only`), and a current inventory
cache then spares it the whole discovery.
"""

from __future__ import annotations

from nvmount.discover.driver_root import DriverRoot
from nvmount.discover.ldcache import read_ldcache
from nvmount.errors import DriverError

NVML_SONAME = "libnvidia-ml.so.1"


def no_driver_reason(root: str, ldcache: str) -> str | None:
    """Why there is no driver under the driver root at all (None: there is one to inspect):
    no ld.so.cache, or no libnvidia-ml.so.1 in it. Anything else is a broken driver."""
    droot = DriverRoot(root)
    cache = droot.host(droot.resolve(ldcache).path)
    try:
        entries = read_ldcache(cache, prefixes=(NVML_SONAME,))
    except FileNotFoundError:
        return f"{cache} does not exist"
    except (OSError, DriverError):
        return None  # let discovery report it
    if not any(e.key == NVML_SONAME for e in entries):
        return f"{NVML_SONAME} is not in {cache}"
    return None
