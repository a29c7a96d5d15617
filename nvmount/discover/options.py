"""Stage discover: what a discovery depends on besides the files it finds - its options, the
PATH it searches, the IPC paths it looks at - and the key and watched paths of the inventory
cache (`nvmount.discover.cache`). Light: a container start whose inventory comes from the
cache imports this, not the discovery itself (`nvmount.discover.driver`).
"""

from __future__ import annotations

import os

from nvmount.capabilities import DriverCapability as Cap
from nvmount.discover.driver_root import DriverRoot
from nvmount.records import record

PERSISTENCED_SOCKET = "/var/run/nvidia-persistenced/socket"
FABRICMANAGER_SOCKET = "/var/run/nvidia-fabricmanager/socket"
MPS_PIPE_DIR = "/tmp/nvidia-mps"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@record
class DiscoveryOptions:
    """libnvc's driver options (§1.1); what libnvc reads from its environment comes from the
    config here (the hook's environment is an input an image may control: issue 8)."""

    no_glvnd: bool = False
    no_uvm: bool = False
    no_modeset: bool = False
    no_mps: bool = False
    no_persistenced: bool = False
    no_fabricmanager: bool = False
    no_gsp_firmware: bool = False
    mps_pipe_dir: str = MPS_PIPE_DIR  # from [nvhook] mps-pipe-directory, never the env
    # read <proc_root>/driver/nvidia-caps/mig-minors (only mig-config/mig-monitor `all` uses
    # it; the kernel lists ~4300 lines, so a container start that does not ask can skip it)
    mig_minors: bool = True
    machine: str | None = None  # None: this machine (selects the ld.so.cache ABI flags)
    nvml_timeout: float = 30.0  # seconds for the NVML helper process (nvml_worker)
    sys_root: str = "/sys"  # sysfs: the DRM nodes of each GPU (simulation: <sim>/sys)


def binary_search_path() -> str:
    """Where driver binaries are searched: the standard PATH, never the hook's $PATH."""
    return DEFAULT_PATH


def discovery_key(root: str, ldcache: str, proc_root: str, opts: DiscoveryOptions,
                  path_env: str) -> tuple[object, ...]:
    """Everything a discovery depends on besides the files it finds (the cache key)."""
    machine = opts.machine or os.uname().machine
    return (root, ldcache, proc_root, opts.sys_root, machine, path_env,
            tuple(p for p, _ in ipc_path_list(opts)),
            tuple((f, getattr(opts, f)) for f in ("no_glvnd", "no_uvm", "no_modeset", "no_mps",
                                                   "no_persistenced", "no_fabricmanager",
                                                   "no_gsp_firmware", "mig_minors")))


def watched_paths(root: str, opts: DiscoveryOptions, path_env: str) -> tuple[str, ...]:
    """Host paths whose appearance changes a discovery: the IPC candidates, PATH dirs."""
    droot = DriverRoot(root)
    ipc = [droot.host(path) for path, _ in ipc_path_list(opts)]
    dirs = [droot.host(d) for d in path_env.split(":") if d.startswith("/")]
    devs = [droot.host(d) for d in ("/dev", "/dev/infiniband")]  # gated families' nodes
    return tuple(ipc + dirs + devs)


def ipc_path_list(opts: DiscoveryOptions) -> tuple[tuple[str, Cap], ...]:
    mps = opts.mps_pipe_dir or MPS_PIPE_DIR
    return ipc_paths(no_persistenced=opts.no_persistenced,
                           no_fabricmanager=opts.no_fabricmanager, no_mps=opts.no_mps,
                           mps_pipe_dir=mps)


def ipc_paths(*, no_persistenced: bool, no_fabricmanager: bool, no_mps: bool,
              mps_pipe_dir: str) -> tuple[tuple[str, Cap], ...]:
    """§1.5: which IPC paths to look up and their gates (utility sockets, compute MPS dir)."""
    out: list[tuple[str, Cap]] = []
    if not no_persistenced:
        out.append((PERSISTENCED_SOCKET, Cap.UTILITY))
    if not no_fabricmanager:
        out.append((FABRICMANAGER_SOCKET, Cap.UTILITY))
    if not no_mps:
        out.append((mps_pipe_dir or MPS_PIPE_DIR, Cap.COMPUTE | Cap.VIDEO))
    return tuple(out)
