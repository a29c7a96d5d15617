"""Graphics and display files beyond libnvc's library lists, and the DRM nodes of each GPU.

What NVIDIA's toolkit (v1.17, `internal/discover/graphics.go`) mounts for the graphics and
display capabilities, read from the driver root (first match wins, as its locators do):

    config dirs /etc, /usr/local/share, /usr/share:
        glvnd/egl_vendor.d/10_nvidia.json, egl/egl_external_platform.d/15_nvidia_gbm.json,
        egl/egl_external_platform.d/10_nvidia_wayland.json, nvidia/nvoptix.bin,
        X11/xorg.conf.d/10-nvidia.conf, X11/xorg.conf.d/nvidia-drm-outputclass.conf
                                                 -> at the same path in the container, but
                                                    /usr/local/share -> /usr/share (#1980)
    vulkan/icd.d/nvidia_icd.json, vulkan/icd.d/nvidia_layers.json,
    vulkan/implicit_layer.d/nvidia_layers.json (config dirs, then the driver root itself, as
    on GKE)                                      -> always under /etc in the container
    OpenCL/vendors/nvidia.icd (config dirs)      -> /etc/OpenCL/vendors/nvidia.icd (compute)
    Xorg modules nvidia_drv.so, libglxserver_nvidia.so.<version> (or Debian's unversioned
    name) in nvidia/xorg and xorg/modules/{,updates/}{drivers,extensions} of the driver's
    library directories, then of the standard ones (/usr/lib/<triplet>, /usr/lib64, /usr/lib)
                                                 -> at the same path (display)
    libnvidia-egl-gbm.so.*.*, libnvidia-egl-wayland.so.*.*, libnvidia-egl-xcb.so.*.*,
    libnvidia-egl-xlib.so.*.*, libnvidia-vulkan-producer.so.<v> from the ld.so.cache, else
    the driver's and the standard library directories (Debian's EGL platform packages
    install them apart from the driver)
                                                 -> libraries (graphics)
    nvidia-xconfig (/usr/bin, /usr/sbin, /usr/local/bin, /bin, /sbin; NVIDIA's #1980)
                                                 -> the binaries' directory (graphics)
    vdpau/libvdpau_nvidia.so.<v> (or next to the driver's libraries, as on Debian)
                                                 -> <libs>/vdpau, libvdpau's module dir (video)

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
EXTRA_LIBS = ("libnvidia-egl-gbm.so.*.*", "libnvidia-egl-wayland.so.*.*",
              # the X11 EGL platforms of newer drivers (NVIDIA's #1980, after 1.20.0)
              "libnvidia-egl-xcb.so.*.*", "libnvidia-egl-xlib.so.*.*",
              "libnvidia-vulkan-producer.so.{v}")
EXTRA_PREFIXES = ("libnvidia-egl-gbm.so", "libnvidia-egl-wayland.so", "libnvidia-egl-xcb.so",
                  "libnvidia-egl-xlib.so", "libnvidia-vulkan-producer.so")
# graphics programs of the driver root's PATH directories, planned with the binaries (#1980)
EXTRA_BINS = ("nvidia-xconfig",)
BIN_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin", "/sbin")
VDPAU = "libvdpau_nvidia.so.{v}"  # the VDPAU driver (video), in <libs>/vdpau
# Not mounted (a deviation from NVIDIA's CDI spec, which mounts them): the driver's non-GLVND
# libGL/libEGL/libGLES.so.<version> next to the GLVND ones. Once in the library directory,
# ldconfig (NVIDIA's update-ldcache hook, or a later ldconfig in the container) makes
# libGL.so.1 -> libGL.so.<version> and the image's GLVND dispatcher is replaced. libnvc mounts
# them only with no-glvnd, as nvhook does (they are then the libraries of the graphics gate).
MAX_DIR_ENTRIES = 4096


def find_graphics(root: DriverRoot, lib_dirs: tuple[str, ...], nvrm: str,
                  warnings: list[str], cached: dict[str, str] | None = None,
                  triplet: str = "x86_64-linux-gnu") -> tuple[DriverFile, ...]:
    """Every graphics/display file of the module docstring found in the driver root.

    `lib_dirs` are the driver root paths of the 64-bit driver libraries (Debian keeps them in
    nvidia/current, behind update-alternatives links); `cached` maps the 64-bit ld.so.cache
    names of the extra libraries to their paths. A library is taken from the cache first, then
    from the driver's library directories and the standard ones (`_lib_dirs`)."""
    out: list[DriverFile] = []
    for rel in CONFIGS:
        found = _first(root, [f"{d}/{rel}" for d in CONFIG_DIRS])
        if found:
            out.append(_file(root, found, _standard(found), GRAPHICS))
    for rel in VULKAN:
        found = _first(root, [f"{d}/{rel}" for d in (*CONFIG_DIRS, "")])
        if found:
            out.append(_file(root, found, f"/etc/{rel}", GRAPHICS))
    opencl = _first(root, [f"{d}/{OPENCL[len('/etc/'):]}" for d in CONFIG_DIRS])
    if opencl:
        out.append(_file(root, opencl, OPENCL, Cap.COMPUTE))
    dirs = _lib_dirs(lib_dirs, triplet)
    out += _xorg_modules(root, dirs, nvrm, warnings)
    for pattern in EXTRA_LIBS:
        hit = _library(root, pattern.format(v=nvrm), dirs, cached or {})
        if hit:
            out.append(DriverFile(FileKind.LIBRARY, root.host(hit), hit, GRAPHICS,
                                  _soname(posixpath.basename(hit), nvrm)))
    for name in EXTRA_BINS:
        found = _first(root, [f"{d}/{name}" for d in BIN_DIRS])
        if found:
            out.append(DriverFile(FileKind.BINARY, root.host(root.resolve(found).path),
                                  f"/usr/bin/{name}", GRAPHICS))
    vdpau = _library(root, VDPAU.format(v=nvrm), [f"{d}/vdpau" for d in dirs] + dirs, {})
    if vdpau:  # a library in the container's <libs>/vdpau (libvdpau's module directory)
        out.append(DriverFile(FileKind.LIBRARY, root.host(vdpau),
                              f"{posixpath.dirname(vdpau)}/vdpau/{posixpath.basename(vdpau)}",
                              Cap.VIDEO, "libvdpau_nvidia.so.1"))
    return tuple(out)


def _standard(path: str) -> str:
    """The container path of a config file: where the loaders look (/etc and /usr/share stay;
    /usr/local/share, which no loader searches by default, becomes /usr/share: NVIDIA's #1980)."""
    local = "/usr/local/share/"
    return "/usr/share/" + path[len(local):] if path.startswith(local) else path


def _lib_dirs(lib_dirs: tuple[str, ...], triplet: str) -> list[str]:
    """The driver's library directories, then the standard ones, each once."""
    std = (f"/usr/lib/{triplet}", f"/lib/{triplet}", "/usr/lib64", "/lib64", "/usr/lib")
    return list(dict.fromkeys((*lib_dirs, *std)))


def _library(root: DriverRoot, pattern: str, dirs: list[str],
             cached: dict[str, str]) -> str | None:
    """The real root path of the first file matching `pattern`: through an ld.so.cache name
    (its path resolved in the root), else the first directory of `dirs` that has one."""
    for path in cached.values():
        hit = root.resolve(path)
        if hit.exists and fnmatch.fnmatchcase(posixpath.basename(hit.path), pattern):
            return hit.path
    for directory in dirs:
        names = _matching(root, directory, pattern)
        if names:
            hit = root.resolve(f"{directory}/{names[0]}")
            if hit.exists:
                return hit.path
    return None


def _xorg_modules(root: DriverRoot, dirs: list[str], nvrm: str,
                  warnings: list[str]) -> list[DriverFile]:
    """nvidia_drv.so, and the GLX module under its versioned name; Debian installs only the
    unversioned `libglxserver_nvidia.so` (an alternatives link to the versioned file): it
    is taken under the name of the file it resolves to, so the container gets what the
    installers give (the versioned file and the link to it)."""
    out = []
    for names in (("nvidia_drv.so",), (f"libglxserver_nvidia.so.{nvrm}",
                                        "libglxserver_nvidia.so")):
        found = _first(root, [f"{d}/{n}" for n in names for d in _xorg_dirs(dirs)])
        if found is None:
            warnings.append(f"missing xorg module {names[0]}")
            continue
        real = root.resolve(found).path
        if posixpath.basename(found) != names[0] and posixpath.basename(real) == names[0]:
            found = f"{posixpath.dirname(found)}/{names[0]}"
        out.append(DriverFile(FileKind.CONFIG, root.host(real), found, Cap.DISPLAY))
    return out


def _xorg_dirs(lib_dirs: list[str]) -> list[str]:
    subdirs = ("modules/drivers", "modules/extensions", "modules/updates/drivers",
               "modules/updates/extensions")
    return [f"{lib_dirs[0]}/nvidia/xorg"] + [f"{d}/xorg/{s}" for d in lib_dirs for s in subdirs]


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
