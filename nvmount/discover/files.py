"""Driver files: libraries (per capability, 64- and 32-bit), binaries, GSP firmware, IPC paths.

libnvc-spec §1.2-1.5 and §1.7, read from the driver root through `DriverRoot` (confined). The
library lists, their order and the capability gates are libnvc's; the gate of each file is
the union of the capabilities of every list whose names prefix-match its basename (the rule
libnvc applies at mount time), stored in `DriverFile.capabilities` for the planner.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath

from nvmount.capabilities import DriverCapability as Cap
from nvmount.discover.elf import ElfFormatError, ElfInfo, read_elf
from nvmount.discover.inventory import DriverFile, FileKind
from nvmount.errors import DriverError, strerror
from nvmount.log import get_logger
from nvmount.records import field, mutable_record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.discover.driver_root import DriverRoot
    from nvmount.discover.ldcache import LdcacheEntry

log = get_logger(__name__)

UTILITY_LIBS = ("libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so")
COMPUTE_LIBS = (
    "libcuda.so", "libcudadebugger.so", "libnvidia-opencl.so", "libnvidia-gpucomp.so",
    "libnvidia-ptxjitcompiler.so", "libnvidia-fatbinaryloader.so", "libnvidia-allocator.so",
    "libnvidia-compiler.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so",
    "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so",  # QUIRK: listed twice upstream; the second slot stays empty
    "libnvidia-tileiras.so",
)
NGX_LIBS = ("libnvidia-ngx.so",)
VIDEO_LIBS = ("libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so",
              "libnvcuvid.so")
GRAPHICS_LIBS = (
    "libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-tls.so", "libnvidia-glsi.so",
    "libnvidia-fbc.so", "libnvidia-ifr.so", "libnvidia-rtcore.so", "libnvoptix.so",
)
GLVND_LIBS = ("libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv2_nvidia.so",
              "libGLESv1_CM_nvidia.so", "libnvidia-glvkspirv.so", "libnvidia-cbl.so")
COMPAT_LIBS = ("libGL.so", "libEGL.so", "libGLESv1_CM.so", "libGLESv2.so")

UTILITY_BINS = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager")
COMPUTE_BINS = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")

FIRMWARE_DIR = "/lib/firmware/nvidia/{version}"
FIRMWARE_GLOB = "gsp*.bin"
TLS_ABI = (0, 2, 3, 99)  # GNU/Linux 2.3.99: the TLS library of the new ABI

_GRAPHICS = Cap.GRAPHICS | Cap.DISPLAY
# (names, gate) in libnvc's mount-gate order (`match_library_flags`).
LIBRARY_GATES: tuple[tuple[tuple[str, ...], Cap], ...] = (
    (UTILITY_LIBS, Cap.UTILITY),
    (COMPUTE_LIBS, Cap.COMPUTE | Cap.VIDEO),
    (VIDEO_LIBS, Cap.VIDEO),
    (GRAPHICS_LIBS + GLVND_LIBS + COMPAT_LIBS, _GRAPHICS),
    (NGX_LIBS, Cap.NGX),
    # not libnvc's: GBM loads the allocator (gbm/nvidia-drm_gbm.so links to it), so graphics
    # and display get it too, as NVIDIA's current toolkit gives it (nvmount.plan.graphics)
    (("libnvidia-allocator.so",), _GRAPHICS),
)
BINARY_GATES: tuple[tuple[tuple[str, ...], Cap], ...] = (
    (UTILITY_BINS, Cap.UTILITY),
    (COMPUTE_BINS, Cap.COMPUTE),
)


def library_names(no_glvnd: bool = False) -> tuple[str, ...]:
    """libnvc's lookup list: utility, compute, ngx, video, graphics, then glvnd or compat."""
    return (UTILITY_LIBS + COMPUTE_LIBS + NGX_LIBS + VIDEO_LIBS + GRAPHICS_LIBS
            + (COMPAT_LIBS if no_glvnd else GLVND_LIBS))


def gate_of(basename: str, gates: tuple[tuple[tuple[str, ...], Cap], ...]) -> Cap:
    """The capabilities under which libnvc mounts a file with this basename."""
    gate = Cap(0)
    for names, caps in gates:
        if basename.startswith(names):
            gate |= caps
    return gate


@mutable_record
class _Selector:
    """libnvc's `select_libraries` (§1.3 step 6), remembering what it read per file."""

    root: DriverRoot
    nvrm: str
    seen: dict[str, ElfInfo] = field(default_factory=dict)

    def accepts(self, path: str, current: str | None) -> bool:
        base = posixpath.basename(path)
        host = self.root.host(path)
        try:
            info = self.seen.get(path) or read_elf(host, notes=base.startswith("libnvidia-tls.so"))
        except OSError as err:
            raise DriverError(f"read library {host}: {strerror(err)} "
                              f"(check the driver installation)") from err
        except ElfFormatError as err:
            log.info("skipping %s: %s", path, err)
            return False
        self.seen[path] = info
        ok = ((not base.startswith("libnvidia-tls.so") or info.abi_tag == TLS_ABI)
              and base.endswith(self.nvrm)
              and (not base.startswith(COMPAT_LIBS)
                   or any(n.startswith(("libnvidia-glcore.so", "libnvidia-eglcore.so"))
                          for n in info.needed)))
        if ok:
            log.info("selecting %s%s", path, f" over {current}" if current else "")
        else:
            log.info("skipping %s", path)
        return ok


def find_libraries(root: DriverRoot, entries: tuple[LdcacheEntry, ...], arch: int,
                   names: tuple[str, ...], nvrm: str, kind: FileKind,
                   warnings: list[str]) -> tuple[DriverFile, ...]:
    """`ldcache_resolve` + `select_libraries`: the last accepted cache entry wins per slot."""
    slots: list[str | None] = [None] * len(names)
    selector = _Selector(root, nvrm)
    for entry in entries:
        if not entry.is_elf_for(arch):
            continue
        for j, name in enumerate(names):
            if not entry.key.startswith(name):
                continue
            path = root.resolve(entry.value).path
            if slots[j] == path:
                continue  # libnvc tries the next slot (this is how duplicates can fill)
            if selector.accepts(path, slots[j]):
                slots[j] = path
            break
    label = "compat32 library" if kind is FileKind.LIBRARY32 else "library"
    files = []
    for name, slot in zip(names, slots):
        if slot is None:
            warnings.append(f"missing {label} {name}")
            continue
        info = selector.seen.get(slot)
        files.append(DriverFile(kind, root.host(slot), slot,
                                gate_of(posixpath.basename(slot), LIBRARY_GATES),
                                info.soname if info else ""))
    return tuple(files)


def find_binaries(root: DriverRoot, names: tuple[str, ...], path_env: str,
                  warnings: list[str]) -> tuple[DriverFile, ...]:
    """Each binary's first hit along PATH, looked up inside the root (empty element = ".")."""
    found: list[str | None] = [None] * len(names)
    for directory in path_env.split(":"):
        directory = directory or "."
        for i, name in enumerate(names):
            if found[i] is not None:
                continue
            try:
                hit = root.resolve(posixpath.join("/", directory, name))
            except DriverError as err:  # libnvc ignores unresolvable candidates
                log.debug("skipping binary candidate %s/%s: %s", directory, name, err)
                continue
            if hit.exists:
                log.info("selecting %s", hit.path)
                found[i] = hit.path
    files = []
    for name, path in zip(names, found):
        if path is None:
            warnings.append(f"missing binary {name}")
            continue
        files.append(DriverFile(FileKind.BINARY, root.host(path), path,
                                gate_of(posixpath.basename(path), BINARY_GATES)))
    return tuple(files)


def find_firmware(root: DriverRoot, nvrm: str, warnings: list[str]) -> tuple[DriverFile, ...]:
    """GSP firmware `gsp*.bin` of this driver version; stored under the unresolved path."""
    directory = FIRMWARE_DIR.format(version=nvrm)
    real = root.resolve(directory)
    names: list[str] = []
    if real.exists:
        try:
            names = sorted(e.name for e in os.scandir(root.host(real.path))
                           if fnmatch.fnmatchcase(e.name, FIRMWARE_GLOB))
        except NotADirectoryError:
            names = []
        except OSError as err:
            raise DriverError(f"list firmware {root.host(real.path)}: "
                              f"{strerror(err)}") from err
    if not names:
        warnings.append(f"missing firmware path {root.host(real.path)}/{FIRMWARE_GLOB}")
        return ()
    files = []
    for name in names:
        path = f"{directory}/{name}"
        files.append(DriverFile(FileKind.FIRMWARE, root.host(root.resolve(path).path), path,
                                Cap(0)))
    return tuple(files)


def find_ipc(root: DriverRoot, wanted: tuple[tuple[str, Cap], ...],
             warnings: list[str]) -> tuple[DriverFile, ...]:
    """IPC sockets and the MPS pipe dir: the resolved path when it exists, else a warning."""
    files = []
    for path, gate in wanted:
        try:
            hit = root.resolve(path)
        except DriverError as err:  # libnvc: EACCES while resolving counts as missing
            warnings.append(f"missing ipc path {path}: {err}")
            continue
        if not hit.exists:
            warnings.append(f"missing ipc path {path}")
            continue
        log.info("listing ipc path %s", hit.path)
        files.append(DriverFile(FileKind.IPC, root.host(hit.path), hit.path, gate))
    return tuple(files)


