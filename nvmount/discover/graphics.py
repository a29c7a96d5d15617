"""Graphics and display files beyond libnvc's library lists, and the DRM nodes of each GPU.

What NVIDIA's toolkit (v1.17, `internal/discover/graphics.go`) mounts for the graphics and
display capabilities, read from the driver root (first match wins, as its locators do):

    config dirs /etc, /usr/local/share, /usr/share:
        glvnd/egl_vendor.d/10_nvidia.json, egl/egl_external_platform.d/15_nvidia_gbm.json,
        egl/egl_external_platform.d/10_nvidia_wayland.json, nvidia/nvoptix.bin,
        X11/xorg.conf.d/10-nvidia.conf, X11/xorg.conf.d/nvidia-drm-outputclass.conf
                                                 -> at the same path in the container
    vulkan/icd.d/nvidia_icd.json, vulkan/icd.d/nvidia_layers.json,
    vulkan/implicit_layer.d/nvidia_layers.json (config dirs, then the driver root itself, as
    on GKE)                                      -> always under /etc in the container
    OpenCL/vendors/nvidia.icd (/etc)             -> /etc/OpenCL/vendors/nvidia.icd (compute)
    Xorg modules nvidia_drv.so, libglxserver_nvidia.so.<version> (the driver's lib dir's
    nvidia/xorg and xorg/modules/{,updates/}{drivers,extensions}, then /usr/lib{,64}/xorg/...)
                                                 -> at the same path (display)
    libnvidia-egl-gbm.so.*.*, libnvidia-egl-wayland.so.*.*, libnvidia-vulkan-producer.so.<v>
    next to the driver's libraries               -> libraries (graphics)

DRM nodes: the entries `card*` and `renderD*` of <sys>/bus/pci/devices/<bus id>/drm, whose
nodes /dev/dri/<name> in the driver root are character devices of major 226; and udev's
/dev/dri/by-path/pci-<bus id>-card and -render links to them, recreated in the container
(some Vulkan and EGL loaders pick a GPU by its PCI path).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import stat

from nvmount.capabilities import DriverCapability as Cap
from nvmount.discover.inventory import DeviceNode, DriverFile, FileKind

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover.driver_root import DriverRoot

DRM_MAJOR = 226
GRAPHICS = Cap.GRAPHICS | Cap.DISPLAY
CONFIG_DIRS = ("/etc", "/usr/local/share", "/usr/share")
CONFIGS = ("glvnd/egl_vendor.d/10_nvidia.json", "egl/egl_external_platform.d/15_nvidia_gbm.json",
           "egl/egl_external_platform.d/10_nvidia_wayland.json",
           # newer drivers' platforms (NVIDIA's toolkit after 1.17 mounts them too)
           "egl/egl_external_platform.d/09_nvidia_wayland2.json",
           "egl/egl_external_platform.d/20_nvidia_xcb.json",
           "egl/egl_external_platform.d/20_nvidia_xlib.json", "nvidia/nvoptix.bin",
           "X11/xorg.conf.d/10-nvidia.conf", "X11/xorg.conf.d/nvidia-drm-outputclass.conf")
VULKAN = ("vulkan/icd.d/nvidia_icd.json", "vulkan/icd.d/nvidia_layers.json",
          "vulkan/implicit_layer.d/nvidia_layers.json")
OPENCL = "/etc/OpenCL/vendors/nvidia.icd"
XORG_MODULES = ("nvidia_drv.so", "libglxserver_nvidia.so.{v}")
EXTRA_LIBS = ("libnvidia-egl-gbm.so.*.*", "libnvidia-egl-wayland.so.*.*",
              "libnvidia-vulkan-producer.so.{v}")
# Not mounted (a deviation from NVIDIA's CDI spec, which mounts them): the driver's non-GLVND
# libGL/libEGL/libGLES.so.<version> next to the GLVND ones. Once in the library directory,
# ldconfig (NVIDIA's update-ldcache hook, or a later ldconfig in the container) makes
# libGL.so.1 -> libGL.so.<version> and the image's GLVND dispatcher is replaced. libnvc mounts
# them only with no-glvnd, as nvhook does (they are then the libraries of the graphics gate).
MAX_DIR_ENTRIES = 4096


def find_graphics(root: DriverRoot, lib_dir: str, nvrm: str,
                  warnings: list[str]) -> tuple[DriverFile, ...]:
    """Every graphics/display file of the module docstring found in the driver root;
    `lib_dir` is the driver root path of the 64-bit driver libraries ("" when unknown)."""
    out: list[DriverFile] = []
    for rel in CONFIGS:
        found = _first(root, [f"{d}/{rel}" for d in CONFIG_DIRS])
        if found:
            out.append(_file(root, found, found, GRAPHICS))
    for rel in VULKAN:
        found = _first(root, [f"{d}/{rel}" for d in (*CONFIG_DIRS, "")])
        if found:
            out.append(_file(root, found, f"/etc/{rel}", GRAPHICS))
    if _exists(root, OPENCL):
        out.append(_file(root, OPENCL, OPENCL, Cap.COMPUTE))
    for name in XORG_MODULES:
        found = _first(root, [f"{d}/{name.format(v=nvrm)}" for d in _xorg_dirs(lib_dir)])
        if found:
            out.append(_file(root, found, found, Cap.DISPLAY))
        else:
            warnings.append(f"missing xorg module {name.format(v=nvrm)}")
    if lib_dir:
        for pattern in EXTRA_LIBS:
            for name in _matching(root, lib_dir, pattern.format(v=nvrm)):
                out.append(DriverFile(FileKind.LIBRARY, root.host(root.resolve(
                    f"{lib_dir}/{name}").path), f"{lib_dir}/{name}", GRAPHICS, _soname(name, nvrm)))
    return tuple(out)


def _xorg_dirs(lib_dir: str) -> list[str]:
    subdirs = ("modules/drivers", "modules/extensions", "modules/updates/drivers",
               "modules/updates/extensions")
    dirs = [f"{lib_dir}/nvidia/xorg"] + [f"{lib_dir}/xorg/{s}" for s in subdirs] if lib_dir \
        else []
    return dirs + [f"{base}/xorg/{s}" for base in ("/usr/lib", "/usr/lib64") for s in subdirs]


def _soname(name: str, nvrm: str) -> str:
    """`libnvidia-egl-gbm.so.1.1.1` -> `libnvidia-egl-gbm.so.1`; a name versioned with the
    driver's version is its own SONAME (`libnvidia-vulkan-producer.so.550.54.15`)."""
    base, sep, version = name.partition(".so.")
    if version == nvrm:
        return name
    return f"{base}.so.{version.split('.')[0]}" if sep and version else ""


def _file(root: DriverRoot, path: str, container_path: str, gate: Cap) -> DriverFile:
    return DriverFile(FileKind.CONFIG, root.host(root.resolve(path).path), container_path, gate)


def _exists(root: DriverRoot, path: str) -> bool:
    hit = root.resolve(path)
    return hit.exists and os.path.isfile(root.host(hit.path))


def _first(root: DriverRoot, paths: list[str]) -> str | None:
    return next((p for p in paths if _exists(root, p)), None)


def _matching(root: DriverRoot, directory: str, pattern: str) -> list[str]:
    hit = root.resolve(directory)
    if not hit.exists:
        return []
    try:
        with os.scandir(root.host(hit.path)) as entries:
            names = [e.name for _, e in zip(range(MAX_DIR_ENTRIES), entries)]
    except OSError:
        return []
    return sorted(n for n in names if fnmatch.fnmatchcase(n, pattern))


def dri_links(root: DriverRoot, bus_id: str,
              nodes: tuple[DeviceNode, ...]) -> tuple[tuple[str, str], ...]:
    """(path, link text) of the by-path links to `nodes` that udev made in the driver root."""
    pci = _sysfs_bus(bus_id)
    links = []
    for node in nodes:
        name = posixpath.basename(node.container_path)
        kind = "card" if name.startswith("card") else "render"
        path = f"/dev/dri/by-path/pci-{pci}-{kind}"
        try:
            text = os.readlink(root.host(path))
        except OSError:
            continue
        if text in (f"../{name}", f"/dev/dri/{name}"):
            links.append((path, f"../{name}"))
    return tuple(links)


def _sysfs_bus(bus_id: str) -> str:
    """NVML's "00000000:07:00.0" as sysfs and udev spell it: "0000:07:00.0"."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def dri_nodes(root: DriverRoot, sys_root: str, bus_id: str) -> tuple[DeviceNode, ...]:
    """The DRM nodes of the GPU at NVML bus id `bus_id` ("00000000:07:00.0")."""
    sysfs = posixpath.join(sys_root, "bus/pci/devices", _sysfs_bus(bus_id), "drm")
    try:
        with os.scandir(sysfs) as entries:
            names = sorted(e.name for _, e in zip(range(64), entries)
                           if e.name.startswith(("card", "renderD")) and e.name[-1:].isdigit())
    except OSError:
        return ()
    nodes = []
    for name in names:
        path = f"/dev/dri/{name}"
        hit = root.resolve(path)
        try:
            st = os.stat(root.host(hit.path), follow_symlinks=False) if hit.exists else None
        except OSError:
            st = None
        if st is not None and stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == DRM_MAJOR:
            nodes.append(DeviceNode(root.host(hit.path), path, DRM_MAJOR,
                                    os.minor(st.st_rdev), GRAPHICS))
    return tuple(nodes)
