"""Stage discover: the driver inventory, discovered once and reused while the driver is unchanged.

Discovery runs NVML in a child process (~30 ms, seconds on a GPU without persistence mode);
the inventory it produces only changes when the driver does. `cached_inventory` keeps it in
a root-only cache (`nvmount.cachefile`, /run/nvhook) and, on every start, trusts it only if
a fresh *stamp* of what it was derived from equals the stored one:

- the discovery key: driver root, ld.so.cache path, proc root, machine, options, the PATH
  searched for binaries and the MPS pipe directory;
- (dev, inode, size, mtime, ctime) of the driver root's ld.so.cache, of every library,
  binary, firmware file, IPC path and device node in the inventory (st_rdev for nodes), of the
  IPC candidates that were absent, the firmware directory and the PATH directories (a new
  binary or socket appears there);
- the driver's proc facts: `<proc>/devices` (the dynamic majors), the version file, the GPU
  directories and each GPU's `information`, the MIG capability tree (MIG layout changes) and
  the mig-minors file.

Any difference - a driver upgrade, a reloaded module, a MIG change, a new GPU, a replaced
library - is a miss: the driver is discovered again (NVML) and the cache rewritten. A cache
that is absent, foreign or unreadable is a miss too; it is never an error. The stamp costs
about a hundred stat calls, a fraction of a millisecond.
"""

from __future__ import annotations

import os

from nvmount import cachefile
from nvmount.capabilities import DriverCapability
from nvmount.discover import inventory as inv
from nvmount.log import get_logger
from nvmount.records import record_fields

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

log = get_logger(__name__)

CACHE_NAME = "inventory"  # {key: (stamp, encoded inventory)} of the last few driver roots
_KEPT = 4
_MAX_TREE = 4096  # entries of the MIG capability tree taken into the stamp
_RECORDS = {c.__name__: c for c in (inv.DriverInventory, inv.Gpu, inv.MigDevice,
                                     inv.DeviceNode, inv.DriverFile)}


def lookup(directory: str, key: tuple[object, ...], proc_root: str,
           watch: tuple[str, ...]) -> inv.DriverInventory | None:
    """The cached inventory for `key` if its stamp is still true, else None."""
    entries = cachefile.load(directory, CACHE_NAME, _FORMAT) if directory else None
    hit = entries.get(key) if isinstance(entries, dict) else None
    if hit is None:
        return None
    try:
        found = decode(hit[1])
    except (KeyError, TypeError, ValueError, IndexError, RecursionError):
        return None
    if isinstance(found, inv.DriverInventory) and inventory_stamp(found, proc_root,
                                                                  watch) == hit[0]:
        return found
    return None


def refresh(directory: str, key: tuple[object, ...], proc_root: str, watch: tuple[str, ...],
            discover: Callable[[], inv.DriverInventory]) -> tuple[inv.DriverInventory, str]:
    """Discover now (`nvhook info`), rewrite the cache, and say what the cache held:
    "current" (it matched), "refreshed" (absent or stale: the stamp saw the change) or
    "inconsistent" (its stamp matched but the driver says otherwise: report it)."""
    before = lookup(directory, key, proc_root, watch)
    fresh = discover()
    entries = cachefile.load(directory, CACHE_NAME, _FORMAT)
    table = entries if isinstance(entries, dict) else {}
    kept = {k: v for k, v in list(table.items())[-(_KEPT - 1):] if k != key}
    cachefile.store(directory, CACHE_NAME, _FORMAT,
                    {**kept, key: (inventory_stamp(fresh, proc_root, watch), encode(fresh))})
    if before is None:
        return fresh, "refreshed"
    return fresh, "current" if before == fresh else "inconsistent"


def cached_inventory(directory: str, key: tuple[object, ...], proc_root: str,
                     watch: tuple[str, ...],
                     discover: Callable[[], inv.DriverInventory]) -> tuple[inv.DriverInventory,
                                                                            bool]:
    """(inventory, whether it came from the cache). `key` names the discovery (root, paths,
    options); `watch` are more host paths whose stat enters the stamp (IPC candidates, the
    PATH directories); `discover` runs on a miss. `directory` "" disables the cache."""
    entries = cachefile.load(directory, CACHE_NAME, _FORMAT) if directory else None
    table = entries if isinstance(entries, dict) else {}
    hit = table.get(key)
    if hit is not None:
        stamp, encoded = hit if isinstance(hit, tuple) and len(hit) == 2 else (None, None)
        try:
            found = decode(encoded)
        except (KeyError, TypeError, ValueError, IndexError, RecursionError):
            found = None
        if (isinstance(found, inv.DriverInventory)
                and inventory_stamp(found, proc_root, watch) == stamp):
            log.debug("driver inventory from the cache in %s", directory)
            return found, True
        log.debug("driver inventory cache is stale: discovering again")
    fresh = discover()
    if directory:
        kept = {k: v for k, v in list(table.items())[-(_KEPT - 1):] if k != key}
        cachefile.store(directory, CACHE_NAME, _FORMAT,
                        {**kept, key: (inventory_stamp(fresh, proc_root, watch), encode(fresh))})
    return fresh, False


_FORMAT = ("inventory", 3)  # 3: graphics from the ld.so.cache, vdpau


# -- the stamp ------------------------------------------------------------------------------
def inventory_stamp(found: inv.DriverInventory, proc_root: str,
                    watch: tuple[str, ...] = ()) -> tuple[object, ...]:
    """What `found` was derived from, as it is now (see the module docstring)."""
    paths = [os.path.join(found.root, "etc/ld.so.cache"), *watch]
    for group in (found.libraries, found.libraries32, found.binaries, found.firmware,
                  found.ipc, found.graphics, tuple(f for _, f in found.gated_files)):
        paths.extend(f.host_path for f in group)
    paths.extend(n.host_path for n in _nodes(found))
    paths.extend(os.path.dirname(f.host_path) for f in found.firmware[:1])
    proc = found.proc_driver_dir
    return (
        tuple(_stat(p) for p in paths),
        _read(os.path.join(proc_root, "devices")),
        _stat(os.path.join(proc, "version")),
        tuple((g.bus_id, _read(os.path.join(g.proc_dir, "information")) if g.proc_dir else "")
              for g in found.gpus),
        _listing(os.path.join(proc, "gpus")),
        _tree(os.path.join(proc, "capabilities")),
        _stat(os.path.join(proc_root, "driver/nvidia-caps/mig-minors")),
    )


def _nodes(found: inv.DriverInventory) -> list[inv.DeviceNode]:
    nodes = [*found.control_nodes, *found.imex_channels]
    nodes += [n for n in (found.mig_config_cap, found.mig_monitor_cap) if n is not None]
    for gpu in found.gpus:
        nodes.append(gpu.node)
        nodes += gpu.dri_nodes
        for mig in gpu.mig_devices:
            nodes += [n for n in (mig.gi_cap, mig.ci_cap) if n is not None]
    return nodes + [n for _, n in found.gated_nodes]


def _stat(path: str) -> tuple[object, ...] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (path, st.st_dev, st.st_ino, st.st_mode, st.st_rdev, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns)


def _read(path: str, limit: int = 65536) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _listing(path: str) -> tuple[str, ...] | None:
    try:
        return tuple(sorted(os.listdir(path)))
    except OSError:
        return None


def _tree(path: str) -> tuple[str, ...]:
    """Relative paths under `path` (directories walked, symlinks not followed), bounded."""
    out: list[str] = []
    todo = [""]
    while todo and len(out) < _MAX_TREE:
        rel = todo.pop()
        try:
            entries = list(os.scandir(os.path.join(path, rel) if rel else path))
        except OSError:
            continue
        for entry in entries[:_MAX_TREE]:
            name = f"{rel}/{entry.name}" if rel else entry.name
            out.append(name)
            if entry.is_dir(follow_symlinks=False):
                todo.append(name)
    return tuple(sorted(out))


# -- encoding: plain values only (marshal), records by whitelisted name ----------------------
def encode(value: object) -> object:
    """A record tree as plain tuples: ("R", name, fields), ("F", int) for capabilities,
    ("K", str) for a file kind; tuples as ("T", items); plain values as themselves."""
    if isinstance(value, DriverCapability):
        return ("F", int(value))
    if isinstance(value, inv.FileKind):
        return ("K", str.__str__(value))
    name = type(value).__name__
    if name in _RECORDS and type(value) is _RECORDS[name]:
        return ("R", name, tuple(encode(getattr(value, f)) for f in record_fields(value)))
    if isinstance(value, tuple):
        return ("T", tuple(encode(v) for v in value))
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    raise TypeError(f"cannot cache a {type(value).__name__}")


def decode(value: object) -> object:
    """The inverse of `encode`; only the inventory's record classes are built."""
    if not isinstance(value, tuple):
        return value
    tag = value[0]
    if tag == "R":
        cls: Any = _RECORDS[value[1]]
        return cls(*(decode(v) for v in value[2]))
    if tag == "T":
        return tuple(decode(v) for v in value[1])
    if tag == "F":
        return DriverCapability(value[1])
    if tag == "K":
        return inv.FileKind(value[1])
    raise ValueError(f"unknown cache tag {tag!r}")
