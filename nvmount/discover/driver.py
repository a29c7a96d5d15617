"""Stage: driver discovery: the `DriverInventory` of the host driver (libnvc-spec §1, §5, §7).

Reads, never writes: the driver root's ld.so.cache (parsed once), the ELF headers of the
library candidates, NVML (loaded by absolute path from that cache; `open_nvml` always shuts it
down), `<proc_root>/devices`, the MIG minors file, the driver root's /dev and /proc trees.
Every path inside the driver root is resolved through `DriverRoot`, so a symlink there cannot
lead discovery outside it. No subprocesses, no threads.

    discover_driver(root, ldcache, proc_root) -> DriverInventory
        nvml:  driver version, CUDA version, GPUs and MIG devices   (_nvml)
        files: libraries (64/32-bit), binaries, firmware, IPC       (driver_files)
        nodes: control nodes, GPU nodes, MIG caps, IMEX channels    (driver_devices)
"""

from __future__ import annotations

import os
import posixpath

from nvmount.discover import devices as dev
from nvmount.discover import files, graphics
from nvmount.discover.driver_root import DriverRoot
from nvmount.discover.gated import find_gated
from nvmount.discover.inventory import DriverFile, DriverInventory, FileKind, Gpu
from nvmount.discover.ldcache import MACHINE_ARCHES, LdcacheEntry, read_ldcache
from nvmount.discover.options import DEFAULT_PATH, DiscoveryOptions, ipc_path_list
from nvmount.discover.presence import NVML_SONAME, no_driver_reason  # noqa: F401 (callers)
from nvmount.errors import DriverError, strerror
from nvmount.log import get_logger
from nvmount.records import replace

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover._nvml import Nvml, NvmlDevice

log = get_logger(__name__)

TRIPLETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu",
            "ppc64le": "powerpc64le-linux-gnu"}
def discover_driver(
    root: str = "/",
    ldcache: str = "/etc/ld.so.cache",
    proc_root: str = "/proc",
    *,
    nvml: Nvml | None = None,
    path_env: str | None = None,
    options: DiscoveryOptions | None = None,
) -> DriverInventory:
    """The inventory of the driver installed under `root`.

    `ldcache` is the cache path inside the root. `nvml` replaces the real NVML (tests, or a
    caller that already holds a session); otherwise libnvidia-ml.so.1 is loaded from the
    root's cache. `path_env` is where binaries are searched (default: `DEFAULT_PATH`, never
    the hook's $PATH, which an image may control). Raises `DriverError` (`NvmlError` for NVML
    failures) naming what to fix.
    """
    opts = options or DiscoveryOptions()
    droot = DriverRoot(root)
    machine = opts.machine or os.uname().machine  # platform.machine(), without its import
    arches = MACHINE_ARCHES.get(machine)
    if arches is None:
        raise DriverError(f"discover driver: unsupported architecture {machine} (supported: "
                          f"{', '.join(MACHINE_ARCHES)})")
    entries = _read_cache(droot, ldcache)
    if nvml is not None:
        facts = (nvml.driver_version(), nvml.cuda_version(), nvml.devices())
    else:
        from nvmount.discover.nvml_worker import query_nvml

        facts = query_nvml(_nvml_path(droot, ldcache, entries, arches[0]),
                           timeout=opts.nvml_timeout)
    return _inventory(droot, entries, arches, proc_root, facts, path_env, opts)


def _read_cache(droot: DriverRoot, ldcache: str) -> tuple[LdcacheEntry, ...]:
    host = droot.host(droot.resolve(ldcache).path)
    try:
        return read_ldcache(host, prefixes=files.library_names() + files.COMPAT_LIBS
                            + graphics.EXTRA_PREFIXES)
    except OSError as err:
        raise DriverError(
            f"read ld.so.cache {host}: {strerror(err)} (is the NVIDIA "
            f"driver installed in {droot.root}? run 'ldconfig -r {droot.root}', or set "
            f"nvidia-container-cli.ldcache)") from err


def _nvml_path(droot: DriverRoot, ldcache: str, entries: tuple[LdcacheEntry, ...],
               arch: int) -> str:
    """Host path of the cache's first libnvidia-ml.so.1 of this ABI, resolved in the root."""
    for entry in entries:
        if entry.key == NVML_SONAME and entry.is_elf_for(arch):
            hit = droot.resolve(entry.value)
            if hit.exists:
                return droot.host(hit.path)
            log.warning("ld.so.cache entry %s -> %s does not exist", entry.key, entry.value)
    raise DriverError(
        f"load nvml: {NVML_SONAME} is not in {droot.host(ldcache)} (is the NVIDIA driver "
        f"installed in {droot.root}? run 'ldconfig' there, or check nvidia-container-cli.root "
        f"and ldcache)")


def _graphics(droot: DriverRoot, gpus: tuple[Gpu, ...], libs: tuple[DriverFile, ...],
              entries: tuple[LdcacheEntry, ...], arch: int, nvrm: str, opts: DiscoveryOptions,
              warnings: list[str]) -> tuple[tuple[Gpu, ...], tuple[DriverFile, ...]]:
    """The GPUs with their DRM nodes, and the graphics/display files (`discover.graphics`)."""
    gpus = tuple(replace(g, dri_nodes=graphics.dri_nodes(droot, opts.sys_root, g.bus_id))
                 for g in gpus)
    gpus = tuple(replace(g, dri_links=graphics.dri_links(droot, g.bus_id, g.dri_nodes))
                 for g in gpus)
    lib_dirs = tuple(dict.fromkeys(posixpath.dirname(f.container_path) for f in libs))
    cached = {e.key: e.value for e in entries
              if e.key.startswith(graphics.EXTRA_PREFIXES) and e.is_elf_for(arch)}
    extra = graphics.find_graphics(droot, lib_dirs, nvrm, warnings, cached,
                                   TRIPLETS.get(opts.machine or os.uname().machine, ""))
    if any(posixpath.basename(f.host_path).startswith("libvdpau_nvidia.so") for f in libs):
        # libnvc's video list found it in the ld.so.cache: it is mounted with the libraries
        extra = tuple(f for f in extra if "/vdpau/libvdpau_nvidia" not in f.container_path)
    return gpus, extra


def _inventory(droot: DriverRoot, entries: tuple[LdcacheEntry, ...],
               arches: tuple[int, int | None], proc_root: str,
               facts: tuple[str, str, tuple[NvmlDevice, ...]], path_env: str | None,
               opts: DiscoveryOptions) -> DriverInventory:
    nvrm, cuda, devices = facts
    warnings: list[str] = []
    names = files.library_names(opts.no_glvnd)
    libs = files.find_libraries(droot, entries, arches[0], names, nvrm, FileKind.LIBRARY,
                                warnings)
    libs32 = () if arches[1] is None else files.find_libraries(
        droot, entries, arches[1], names, nvrm, FileKind.LIBRARY32, warnings)
    bins = files.find_binaries(
        droot, files.UTILITY_BINS + (() if opts.no_mps else files.COMPUTE_BINS),
        DEFAULT_PATH if path_env is None else path_env, warnings)
    firmware = () if opts.no_gsp_firmware else files.find_firmware(droot, nvrm, warnings)
    majors = dev.read_char_majors(proc_root)
    control = dev.control_nodes(droot, majors, dev.NodeOptions(opts.no_uvm, opts.no_modeset),
                                warnings)
    ipc = files.find_ipc(droot, ipc_path_list(opts), warnings)
    caps_major = majors.get("nvidia-caps")
    imex_major = majors.get("nvidia-caps-imex-channels")
    gated = find_gated(droot)
    gpus, extra = _graphics(droot, dev.build_gpus(droot, devices, caps_major, warnings), libs,
                            entries, arches[0], nvrm, opts, warnings)
    mig_minors = dev.read_mig_minors(
        proc_root, [g.minor for g in gpus if g.mig_capable and opts.mig_minors])
    for w in warnings:
        log.debug("%s", w)
    return DriverInventory(
        root=droot.root, driver_version=nvrm, cuda_version=cuda, gpus=gpus, libraries=libs,
        libraries32=libs32, binaries=bins, firmware=firmware, ipc=ipc, control_nodes=control,
        proc_driver_dir=droot.host(droot.resolve(dev.PROC_DRIVER).path),
        caps_major=caps_major, imex_major=imex_major,
        mig_config_cap=dev.cap_node(droot, f"{dev.PROC_CAPS}/mig/config", caps_major),
        mig_monitor_cap=dev.cap_node(droot, f"{dev.PROC_CAPS}/mig/monitor", caps_major),
        mig_minors=mig_minors, imex_channels=dev.imex_channels(droot, imex_major),
        warnings=tuple(warnings), graphics=extra, gated_nodes=gated[0], gated_files=gated[1])


def nvml_path(root: str = "/", ldcache: str = "/etc/ld.so.cache") -> str:
    """Host path of the driver root's libnvidia-ml.so.1 (its ld.so.cache entry, resolved in
    the root; this machine's ABI)."""
    droot = DriverRoot(root)
    arches = MACHINE_ARCHES.get(os.uname().machine)
    if arches is None:
        raise DriverError(f"load nvml: unsupported architecture {os.uname().machine}")
    return _nvml_path(droot, ldcache, _read_cache(droot, ldcache), arches[0])
