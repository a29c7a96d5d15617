"""Plan what to expose in a container: pure, deterministic (libnvc-spec §1, §2, §5.4, §5.5).

Stage: plan. Input: the driver inventory, the device selection, the requested capabilities,
the container's layout and `PlanOptions`; output: a `MountPlan` whose entries `apply` runs in
order. No I/O here: everything the plan needs from the host (the procfs files) was read
before and arrives in the options.

Order (libnvc-spec §2.1, with the per-GPU steps of `nvc_device_mount` folded in):

1. procfs view: tmpfs at /proc/driver/nvidia, `params` (first `ModifyDeviceFiles: 1` -> 0),
   `version`, `registry`, then a bind of `gpus/<bus-id>` per selected GPU;
2. application profile (graphics/display): tmpfs + `10-container.conf`;
3. binaries -> bins_dir; 4. libraries -> libs_dir (flattened); 5. 32-bit libraries ->
   libs32_dir (compat32); 6. the special symlinks (§2.6) and the SONAME links;
7. CUDA forward compat: nothing is mounted, the compat dir may lead `ldconfig_dirs`;
8. firmware; 9. IPC; 10. control device nodes; 11. GPU nodes; 12. MIG; 13. IMEX.

Deliberate differences from libnvidia-container (each is also noted where it is decided):

- both tmpfs mounts (procfs view, application profiles) end up read-only, not writable;
- SONAME links are created here, so a container without ldconfig (musl) resolves them;
- compat libraries from the image are never mounted: `mount` mode is treated as `ldconfig`
  (CVE-2024-0132 and its TOCTOU bypass CVE-2025-23359 both came from mounting them), and the
  "is it newer" test compares majors as numbers, not as strings;
- the /dev/nvidia-caps directory (mig-config/mig-monitor `all`) is bound read-only: a
  writable bind would let container root create or unlink the host's capability nodes;
- a missing IMEX channel node is an error, never an uninitialised node;
- application profile bits exist for minors 0..63 only (a 64-bit mask); larger minors are
  left out with a warning instead of NVIDIA's undefined `1 << minor`.
"""

from __future__ import annotations

import posixpath

from nvmount.bounds import MAX_DIGITS, parse_decimal
from nvmount.capabilities import DriverCapability
from nvmount.discover.inventory import FileKind
from nvmount.fs.paths import SourceKind
from nvmount.plan.devices import plan_devices
from nvmount.plan.graphics import plan_graphics_files, plan_graphics_links
from nvmount.plan.procfs import plan_app_profile, plan_procfs
from nvmount.plan.types import (
    RO_IPC,
    RO_LIB,
    Bind,
    CompatMode,
    MountPlan,
    PlanEntry,
    PlanOptions,
    Symlink,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover.inventory import DriverFile, DriverInventory, Gpu
    from nvmount.plan.selection import Selection
    from nvmount.plan.types import ContainerLayout

COMPUTE_LIBS = DriverCapability.COMPUTE | DriverCapability.VIDEO

# §2.6: (mounted basename prefix, link name, link target; None = the mounted basename)
SPECIAL_LINKS: tuple[tuple[str, str, str | None], ...] = (
    ("libcuda.so", "libcuda.so", "libcuda.so.1"),
    ("libGLX_nvidia.so", "libGLX_indirect.so.0", None),
    ("libnvidia-opticalflow.so", "libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"),
)


def plan_mounts(
    inventory: DriverInventory,
    selection: Selection,
    capabilities: DriverCapability,
    layout: ContainerLayout,
    options: PlanOptions,
) -> MountPlan:
    """The ordered mounts, files, links and device rules for one container."""
    gpus = selected_gpus(inventory, selection)
    warnings: list[str] = []
    entries: list[PlanEntry] = []
    if inventory.proc_driver_dir:  # (a CSV inventory has no /proc/driver/nvidia)
        entries += plan_procfs(inventory, gpus, options.proc_files)
    entries += plan_app_profile(gpus, capabilities, warnings)
    files = _plan_files(inventory, capabilities, layout)
    entries += [bind for bind, _ in files]
    links = plan_links(files)
    entries += links
    drawing = plan_graphics_files(inventory, capabilities)
    entries += drawing
    extra_links = plan_graphics_links([b for b, _ in files] + drawing, capabilities)
    extra_links += [Symlink(path, text, "driver link") for path, text in inventory.links]
    if capabilities & (DriverCapability.GRAPHICS | DriverCapability.DISPLAY):
        extra_links += [Symlink(path, text, "dri link") for g in gpus for path, text in
                        g.dri_links]
    entries += extra_links
    entries += _plan_firmware_ipc(inventory, capabilities)
    binds, rules = plan_devices(inventory, gpus, selection, capabilities, options)
    entries += binds
    entries += [Bind(f.host_path, f.container_path,
                     SourceKind.DIRECTORY if f.container_path == "/run/udev" else SourceKind.FILE,
                     RO_IPC, "gated") for family, f in inventory.gated_files
                if family in options.features]
    return MountPlan(
        entries=_dedupe_targets(entries, warnings),
        device_rules=() if options.no_cgroups else rules,
        ldconfig_dirs=(*compat_dirs(inventory, capabilities, layout, options),
                       layout.libs_dir, layout.libs32_dir,
                       *dict.fromkeys(posixpath.dirname(t) for _, t, _ in csv_entries(
                           drawing, inventory))),
        libs_dir=layout.libs_dir,
        libs32_dir=layout.libs32_dir,
        bins_dir=layout.bins_dir,
        capabilities=capabilities,
        gpus=tuple(g.uuid for g in gpus),
        mig_devices=tuple(m.uuid for m in selection.mig_devices),
        warnings=(*inventory.warnings, *warnings),
        driver_version=inventory.driver_version,
        cuda_version=inventory.cuda_version,
        driver_root=inventory.root,
        ldcache_entries=ldcache_entries(files, [*links, *extra_links]) + csv_entries(drawing,
                                                                                 inventory),
    )


def csv_entries(drawing: list[Bind], inventory: DriverInventory) -> tuple[
        tuple[str, str, bool], ...]:
    """ld.so.cache entries of the CSV libraries planned (their own paths, SONAME keys)."""
    sonames = {f.container_path: f.soname for f in inventory.graphics if f.soname}
    return tuple((sonames[b.target], b.target, False) for b in drawing if b.target in sonames)


def selected_gpus(inventory: DriverInventory, selection: Selection) -> tuple[Gpu, ...]:
    """Selected GPUs plus the parents of selected MIG devices, in inventory order."""
    wanted = {g.uuid for g in selection.gpus}
    migs = {m.uuid for m in selection.mig_devices}
    if migs:  # one pass over the GPUs' MIG devices (not one per selected MIG device)
        wanted.update(g.uuid for g in inventory.gpus
                      if any(m.uuid in migs for m in g.mig_devices))
    return tuple(g for g in inventory.gpus if g.uuid in wanted)


def is_wanted(gate: DriverCapability, capabilities: DriverCapability) -> bool:
    """A file or node gated by `gate` is exposed for `capabilities` (empty gate = always)."""
    return not gate or bool(gate & capabilities)


def _plan_files(
    inventory: DriverInventory,
    capabilities: DriverCapability,
    layout: ContainerLayout,
) -> list[tuple[Bind, str]]:
    """Steps 3-5: binaries, libraries and (compat32) 32-bit libraries, flattened."""
    extra = tuple(f for f in inventory.graphics if f.kind == FileKind.LIBRARY)
    bins = tuple(f for f in inventory.graphics if f.kind == FileKind.BINARY)
    groups: list[tuple[tuple[DriverFile, ...], str, str]] = [
        (inventory.binaries + bins, layout.bins_dir, "binary"),
        (inventory.libraries + extra, layout.libs_dir, "library"),
    ]
    if DriverCapability.COMPAT32 in capabilities:
        groups.append((inventory.libraries32, layout.libs32_dir, "library32"))
    binds: list[tuple[Bind, str]] = []
    for files, directory, what in groups:
        for f in files:
            if is_wanted(f.capabilities, capabilities):
                target = posixpath.join(directory, _subdir(f.container_path),
                                        posixpath.basename(f.container_path))
                bind = Bind(f.host_path, target, SourceKind.FILE, RO_LIB, what,
                            gate=f.capabilities)
                binds.append((bind, f.soname))
    return binds


def _subdir(path: str) -> str:
    """The VDPAU driver keeps its directory under the libraries' (libvdpau's module dir)."""
    return "vdpau" if posixpath.basename(posixpath.dirname(path)) == "vdpau" else ""


def plan_links(mounted: list[tuple[Bind, str]]) -> list[Symlink]:
    """§2.6 special links, then SONAME links (`libcuda.so.1 -> libcuda.so.550.54.15`).

    `mounted` pairs each planned file bind with its DT_SONAME ("" when unknown). Links go
    next to the mounted library; a link never shadows a mounted file, and each link path is
    planned once (the first library that asks for it wins).
    """
    libs = [(b, soname) for b, soname in mounted if b.what in ("library", "library32")]
    taken = {b.target for b, _ in mounted}
    links: list[Symlink] = []

    def add(path: str, link: str, what: str) -> None:
        if path not in taken and posixpath.basename(path) != link:
            taken.add(path)
            links.append(Symlink(path, link, what))

    for bind, _ in libs:
        directory, base = posixpath.split(bind.target)
        for prefix, name, target in SPECIAL_LINKS:
            if base.startswith(prefix):
                add(posixpath.join(directory, name), target or base, "special link")
    for bind, soname in libs:
        directory, base = posixpath.split(bind.target)
        if soname not in ("", ".", "..") and "/" not in soname:
            add(posixpath.join(directory, soname), base, "soname link")
    return links


def ldcache_entries(files: list[tuple[Bind, str]],
                    links: list[Symlink]) -> tuple[tuple[str, str, bool], ...]:
    """What ldconfig would cache for the planned libraries and links (glibc's search_dir):
    a name whose library has SONAME S is keyed S, except a link whose own name N is S, or ends
    in ".so" and starts S (a development link, `libcuda.so`), which is keyed N. The path is
    the key in the same directory. First occurrence wins."""
    libs = {b.target: (soname or posixpath.basename(b.target), b.what == "library32")
            for b, soname in files if b.what in ("library", "library32")
            and not _subdir(b.target)}  # vdpau/ is no ldconfig directory
    hops = {link.target: posixpath.join(posixpath.dirname(link.target), link.link)
            for link in links if "/" not in link.link}

    def library(path: str | None) -> tuple[str, bool] | None:
        for _ in range(8):  # links to links (libcuda.so -> libcuda.so.1 -> the file)
            if path is None or path in libs:
                return None if path is None else libs[path]
            path = hops.get(path)
        return None

    out: dict[tuple[str, bool], tuple[str, str, bool]] = {}
    for path in [*libs, *hops]:
        found = library(path)
        if found is None:
            continue
        soname, is32 = found
        directory, name = posixpath.split(path)
        keep_name = name == soname or (name.endswith(".so") and soname.startswith(name))
        key = name if keep_name else soname
        entry = posixpath.join(directory, key)
        out.setdefault((entry, is32), (key, entry, is32))
    return tuple(out.values())


def _plan_firmware_ipc(
    inventory: DriverInventory, capabilities: DriverCapability
) -> list[Bind]:
    """Steps 8-9: GSP firmware (always), IPC sockets (utility) and the MPS dir (compute)."""
    binds = [
        Bind(f.host_path, f.container_path, SourceKind.FILE, RO_LIB, "firmware")
        for f in inventory.firmware
    ]
    for f in inventory.ipc:
        if is_wanted(f.capabilities, capabilities):
            kind = (SourceKind.SOCKET if posixpath.basename(f.container_path) == "socket"
                    else SourceKind.DIRECTORY)
            binds.append(Bind(f.host_path, f.container_path, kind, RO_IPC, "ipc",
                              gate=f.capabilities))
    return binds


def compat_dirs(
    inventory: DriverInventory,
    capabilities: DriverCapability,
    layout: ContainerLayout,
    options: PlanOptions,
) -> tuple[str, ...]:
    """Container dirs of CUDA compat libraries newer than the driver (§2.7, §2.8).

    Only with compute libraries (compute or video) and a mode other than `disabled`; `mount`
    is handled as `ldconfig`. A library counts when the number after `.so.` is numerically
    greater than the driver's major (NVIDIA compares the strings: "1000" < "999" there).
    """
    if options.compat_mode is CompatMode.DISABLED or not capabilities & COMPUTE_LIBS:
        return ()
    return newer_compat_dirs(inventory.driver_version, layout.cuda_compat_libs)


def newer_compat_dirs(driver_version: str, compat_libs: tuple[str, ...]) -> tuple[str, ...]:
    """The directories of `compat_libs` (container paths) newer than `driver_version`."""
    driver_major = _leading_int(driver_version)
    if driver_major is None:
        return ()
    dirs: list[str] = []
    for path in compat_libs:
        directory, base = posixpath.split(path)
        _, sep, version = base.partition(".so.")
        major = _leading_int(version) if sep else None
        if major is not None and major > driver_major and directory not in dirs:
            dirs.append(directory)
    return tuple(dirs)


def _leading_int(text: str) -> int | None:
    """The number at the start of `text` (a version from an image's file name): None when
    there is none or it has more than `MAX_DIGITS` digits (never a 5000-digit int())."""
    end = 0
    while end < len(text) and end <= MAX_DIGITS and "0" <= text[end] <= "9":
        end += 1
    return parse_decimal(text[:end])


def _dedupe_targets(entries: list[PlanEntry], warnings: list[str]) -> tuple[PlanEntry, ...]:
    """Keep the first entry per target; later ones are reported, not applied twice."""
    seen: dict[str, PlanEntry] = {}
    kept: list[PlanEntry] = []
    for entry in entries:
        first = seen.get(entry.target)
        if first is None:
            seen[entry.target] = entry
            kept.append(entry)
        elif first != entry:
            warnings.append(f"skipping {entry.what} {_source(entry)} at {entry.target}: "
                            f"already planned for {first.what} {_source(first)}")
    return tuple(kept)


def _source(entry: PlanEntry) -> str:
    return entry.source if isinstance(entry, Bind) else entry.what
