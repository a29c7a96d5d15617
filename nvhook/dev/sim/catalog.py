"""What NVIDIA's driver ships, as the simulation reproduces it. Pure data.

Libraries follow libnvidia-container's lists (libnvc-spec §1.2): every name of every
capability, with the SONAME the real driver gives it ("V" = the full driver version, as
NVIDIA's internal libraries have). `libdxcore.so` is left out: it only exists on WSL.
"""

from __future__ import annotations

from nvmount.records import record

V = "V"  # placeholder for the driver version in SONAMEs


@record
class LibrarySpec:
    name: str  # libnvidia-container's list name, "libcuda.so"
    soname_suffix: str  # "1" -> libcuda.so.1; V -> libcuda.so.<version>
    group: str  # utility | compute | video | graphics | graphics-glvnd | graphics-compat | ngx
    has32: bool  # shipped as a 32-bit library too
    source: str = "stub"  # stub | tls | nvml | cuda
    needs: tuple[str, ...] = ()  # names whose SONAME this library DT_NEEDs
    dev_link: bool = False  # the installer's unversioned "libX.so" link (to the real file)
    file_version: str = ""  # the file's own version ("1.1.1"), else the driver's

    def soname(self, version: str) -> str:
        return f"{self.name}.{version if self.soname_suffix == V else self.soname_suffix}"

    def file_name(self, version: str) -> str:
        return f"{self.name}.{self.file_version or version}"


LIBRARIES: tuple[LibrarySpec, ...] = (
    # utility
    LibrarySpec("libnvidia-ml.so", "1", "utility", True, "nvml", dev_link=True),
    LibrarySpec("libnvidia-cfg.so", "1", "utility", False, dev_link=True),
    LibrarySpec("libnvidia-nscq.so", "2", "utility", False),
    # compute
    LibrarySpec("libcuda.so", "1", "compute", True, "cuda", dev_link=True),
    LibrarySpec("libcudadebugger.so", "1", "compute", False),
    LibrarySpec("libnvidia-opencl.so", "1", "compute", True),
    LibrarySpec("libnvidia-gpucomp.so", V, "compute", True),
    LibrarySpec("libnvidia-ptxjitcompiler.so", "1", "compute", True),
    LibrarySpec("libnvidia-fatbinaryloader.so", V, "compute", True),
    LibrarySpec("libnvidia-allocator.so", "1", "compute", True),
    LibrarySpec("libnvidia-compiler.so", V, "compute", True),
    LibrarySpec("libnvidia-pkcs11.so", V, "compute", False),
    LibrarySpec("libnvidia-pkcs11-openssl3.so", V, "compute", False),
    LibrarySpec("libnvidia-nvvm.so", "4", "compute", True),
    LibrarySpec("libnvidia-tileiras.so", V, "compute", False),
    # video
    LibrarySpec("libvdpau_nvidia.so", "1", "video", True),
    LibrarySpec("libnvidia-encode.so", "1", "video", True, dev_link=True),
    LibrarySpec("libnvidia-opticalflow.so", "1", "video", True, dev_link=True),
    LibrarySpec("libnvcuvid.so", "1", "video", True, dev_link=True),
    # graphics (always); glcore first: the compat libraries link against it
    LibrarySpec("libnvidia-eglcore.so", V, "graphics", True),
    LibrarySpec("libnvidia-glcore.so", V, "graphics", True),
    LibrarySpec("libnvidia-tls.so", V, "graphics", True, "tls"),
    LibrarySpec("libnvidia-glsi.so", V, "graphics", True),
    LibrarySpec("libnvidia-fbc.so", "1", "graphics", True),
    LibrarySpec("libnvidia-ifr.so", "1", "graphics", True),
    LibrarySpec("libnvidia-rtcore.so", V, "graphics", False),
    LibrarySpec("libnvoptix.so", "1", "graphics", False),
    # graphics, GLVND
    LibrarySpec("libGLX_nvidia.so", "0", "graphics-glvnd", True),
    LibrarySpec("libEGL_nvidia.so", "0", "graphics-glvnd", True),
    LibrarySpec("libGLESv2_nvidia.so", "2", "graphics-glvnd", True),
    LibrarySpec("libGLESv1_CM_nvidia.so", "1", "graphics-glvnd", True),
    LibrarySpec("libnvidia-glvkspirv.so", V, "graphics-glvnd", True),
    LibrarySpec("libnvidia-cbl.so", V, "graphics-glvnd", False),
    # graphics, non-GLVND (compat): they must DT_NEED glcore or eglcore
    LibrarySpec("libGL.so", "1", "graphics-compat", True,
                needs=("libnvidia-glcore.so", "libnvidia-tls.so")),
    LibrarySpec("libEGL.so", "1", "graphics-compat", True, needs=("libnvidia-eglcore.so",)),
    LibrarySpec("libGLESv1_CM.so", "1", "graphics-compat", True,
                needs=("libnvidia-eglcore.so",)),
    LibrarySpec("libGLESv2.so", "2", "graphics-compat", True, needs=("libnvidia-eglcore.so",)),
    # ngx
    LibrarySpec("libnvidia-ngx.so", "1", "ngx", False),
    # beyond libnvc's lists (NVIDIA's toolkit finds them by name: nvmount.discover.graphics)
    LibrarySpec("libnvidia-egl-gbm.so", "1", "graphics-extra", False, file_version="1.1.1"),
    LibrarySpec("libnvidia-egl-wayland.so", "1", "graphics-extra", False,
                file_version="1.1.13"),
    LibrarySpec("libnvidia-vulkan-producer.so", V, "graphics-extra", False),
)

LIB_DIR = "/usr/lib/x86_64-linux-gnu"
LIB32_DIR = "/usr/lib/i386-linux-gnu"

# (name, group): nvidia-smi is built from nvidia_smi.c, the others from tool_stub.c.
BINARIES: tuple[tuple[str, str], ...] = (
    ("nvidia-smi", "utility"),
    ("nvidia-debugdump", "utility"),
    ("nvidia-persistenced", "utility"),
    ("nv-fabricmanager", "utility"),
    ("nvidia-cuda-mps-control", "compute"),
    ("nvidia-cuda-mps-server", "compute"),
)

FIRMWARE: tuple[str, ...] = ("gsp_ga10x.bin", "gsp_tu10x.bin")

PERSISTENCED_SOCKET = "/run/nvidia-persistenced/socket"
# the simulation's own tools (nvsim-prestart: the /proc/driver step as a program), outside
# every directory a driver or the engine looks at
SIM_TOOLS_DIR = "/nvsim/bin"
FABRICMANAGER_SOCKET = "/run/nvidia-fabricmanager/socket"
MPS_PIPE_DIR = "/tmp/nvidia-mps"


@record
class ModelSpec:
    brand: str
    brand_code: int  # nvmlBrandType_t
    arch_code: int  # nvmlDeviceArchitecture_t
    compute_capability: str
    memory_mib: int
    pci_device_id: int
    power_limit_w: int
    sm_count: int
    mig_capable: bool


# nvmlBrandType_t: 2 Tesla, 5 GeForce, 14 Nvidia, 15 GeForce RTX.
# nvmlDeviceArchitecture_t: 5 Volta, 6 Turing, 7 Ampere, 8 Ada, 9 Hopper.
MODELS: dict[str, ModelSpec] = {
    "NVIDIA A100-SXM4-80GB": ModelSpec("Tesla", 2, 7, "8.0", 81920, 0x20B2, 400, 108, True),
    "NVIDIA A100-SXM4-40GB": ModelSpec("Tesla", 2, 7, "8.0", 40960, 0x20B0, 400, 108, True),
    "NVIDIA H100 80GB HBM3": ModelSpec("Nvidia", 14, 9, "9.0", 81559, 0x2330, 700, 132, True),
    "Tesla V100-SXM2-16GB": ModelSpec("Tesla", 2, 5, "7.0", 16384, 0x1DB1, 300, 80, False),
    "Tesla T4": ModelSpec("Tesla", 2, 6, "7.5", 15360, 0x1EB8, 70, 40, False),
    "NVIDIA L4": ModelSpec("Nvidia", 14, 8, "8.9", 23034, 0x27B8, 72, 58, False),
    "NVIDIA GeForce RTX 4090": ModelSpec("GeForceRTX", 15, 8, "8.9", 24564, 0x2684, 450, 128,
                                         False),
}
UNKNOWN_MODEL = ModelSpec("Nvidia", 14, 7, "8.0", 16384, 0x20B2, 300, 108, False)

# Bus numbers of a DGX A100's eight GPUs (domain 0), used for up to eight simulated GPUs.
DGX_BUSES: tuple[int, ...] = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)

# MIG GPU-instance placements on a 7-slice GPU: compute slices -> ((gi id, first slice), ...).
# Mirrors the A100/H100 placement table (GI 0 is the whole GPU, 1-2 halves, 3-6 quarters,
# 7-13 single slices).
GI_PLACEMENTS: dict[int, tuple[tuple[int, int], ...]] = {
    7: ((0, 0),),
    4: ((1, 0),),
    3: ((1, 0), (2, 4)),
    2: ((3, 0), (4, 2), (5, 4)),
    1: ((7, 0), (8, 1), (9, 2), (10, 3), (11, 4), (12, 5), (13, 6)),
}
GI_SPAN: dict[int, int] = {7: 8, 4: 4, 3: 4, 2: 2, 1: 1}  # memory slices a profile occupies

# nvidia-caps minors (the driver's fixed layout): config 1, monitor 2, then per GPU 15 GIs
# of 9 minors each (the GI's access file, then its 8 CIs).
CAPS_CONFIG_MINOR = 1
CAPS_MONITOR_MINOR = 2
CAPS_GIS_PER_GPU = 15
CAPS_CIS_PER_GI = 8
CAPS_DRIVER_GPUS = 32  # mig-minors lists this many GPUs, present or not
