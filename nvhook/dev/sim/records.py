"""Records of the simulated driver: what to build (`SimSpec`) and what was built (`SimRoot`).

Pure data. Paths in `SimRoot` are absolute host paths unless named `*_rel` (root-relative,
absolute form, e.g. "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15").
"""

from __future__ import annotations

from nvmount.records import record

DEFAULT_DRIVER_VERSION = "550.54.15"
DEFAULT_CUDA_VERSION = "12.4"
DEFAULT_MODEL = "NVIDIA A100-SXM4-80GB"
MAX_GPUS = 64
MAX_MIG_DEVICES = 7

# Dynamic majors of the simulation, chosen high so they never collide with real devices.
NVIDIA_MAJOR = 195
UVM_MAJOR = 506
CAPS_MAJOR = 507
IMEX_MAJOR = 508


@record
class SimSpec:
    """What to simulate. `mig` maps GPU indices to the MIG profiles created on them."""

    gpus: int = 8
    driver_version: str = DEFAULT_DRIVER_VERSION
    cuda_version: str = DEFAULT_CUDA_VERSION
    models: tuple[str, ...] = (DEFAULT_MODEL,)  # cycled over the GPUs
    mig: tuple[tuple[int, tuple[str, ...]], ...] = ()  # ((gpu index, ("3g.40gb", ...)), ...)
    minors: tuple[int, ...] = ()  # device minor per GPU index; () = 0..gpus-1
    ipc: bool = False  # persistenced/fabricmanager sockets and the MPS pipe dir
    compat32: bool = True  # 32-bit libraries (when `gcc -m32` works)
    imex_channels: int = 1  # /dev/nvidia-caps-imex-channels/channel0..N-1
    gated: bool = False  # GDS, MOFED, NVSwitch and GDRCopy nodes and files (sim.gated)
    tegra: bool = False  # a Jetson root for the CSV backend, mode = "csv" (sim.tegra)
    wsl: bool = False  # a WSL2 guest: /dev/dxg and a driver store (sim.wsl)
    # each GPU without persistence mode: an nvmlInit from nothing (a process's first, or the
    # first after a full shutdown) waits this long per GPU (NVIDIA: 1-3 s per GPU; 0 =
    # persistence mode on, no wait)
    nvml_init_delay_ms: int = 0


@record
class SimMigDevice:
    index: int  # NVML enumeration index under its parent
    uuid: str  # "MIG-..."
    gi: int
    ci: int
    profile: str  # "1g.10gb"
    memory_mib: int
    slices: int  # GPU-instance compute slices (the "1" of "1g.10gb")
    gi_minor: int  # nvidia-caps minor of gpu<minor>/gi<gi>/access
    ci_minor: int  # nvidia-caps minor of gpu<minor>/gi<gi>/ci<ci>/access


@record
class SimGpu:
    index: int  # NVML index (order of PCI bus ids)
    minor: int  # /dev/nvidia<minor>
    uuid: str  # "GPU-..."
    bus_id: str  # "00000000:0f:00.0" (libnvidia-container's form: %08x:%02x:%02x.0)
    proc_bus_id: str  # /proc/driver/nvidia/gpus/<this> ("0000:07:00.0")
    model: str
    brand: str  # "Tesla" (nvidia-container-cli's names)
    brand_code: int  # nvmlBrandType_t
    architecture: str  # compute capability "8.0"
    arch_code: int  # nvmlDeviceArchitecture_t
    memory_mib: int
    pci_device_id: int  # 0x20b2
    mig_capable: bool
    mig_enabled: bool
    mig_devices: tuple[SimMigDevice, ...] = ()

    @property
    def nvml_bus_id(self) -> str:
        """The busId string NVML reports ("00000000:0F:00.0", upper-case hex)."""
        return self.bus_id.upper()


@record
class SimFile:
    """A driver file of the simulated root (library, binary, firmware, IPC socket)."""

    path: str  # absolute host path
    path_rel: str  # root-relative path
    group: str  # "utility", "compute", "video", "graphics", "graphics-glvnd",
    # "graphics-compat", "ngx", "firmware", "ipc"
    name: str = ""  # libraries: the libnvidia-container list name ("libcuda.so")
    soname: str = ""  # libraries: DT_SONAME


@record
class SimDeviceNode:
    path: str  # absolute host path
    path_rel: str  # "/dev/nvidia0"
    major: int
    minor: int


@record
class SimRoot:
    """A simulated driver root as built by `create_sim_root`."""

    path: str
    spec: SimSpec
    gpus: tuple[SimGpu, ...]
    libraries: tuple[SimFile, ...]
    libraries32: tuple[SimFile, ...]
    binaries: tuple[SimFile, ...]
    firmware: tuple[SimFile, ...]
    ipc: tuple[SimFile, ...]
    device_nodes: tuple[SimDeviceNode, ...]  # all nodes made under dev/
    real_device_nodes: bool  # False when mknod was not permitted (regular files instead)
    lib_dir: str  # <root>/usr/lib/x86_64-linux-gnu
    lib32_dir: str  # <root>/usr/lib/i386-linux-gnu ("" without 32-bit libraries)
    config_path: str  # <root>/config.toml (for `nvhook --config`)
    proc_root: str  # <root>/proc
    ldcache_path: str  # <root>/etc/ld.so.cache
    majors: tuple[tuple[str, int], ...] = ()  # /proc/devices entries

    @property
    def driver_version(self) -> str:
        return self.spec.driver_version

    @property
    def cuda_version(self) -> str:
        return self.spec.cuda_version

    @property
    def nvml_path(self) -> str:
        """Host path of the fake libnvidia-ml.so.1 (the SONAME link)."""
        return f"{self.lib_dir}/libnvidia-ml.so.1"

    @property
    def nvidia_smi(self) -> str:
        return f"{self.path}/usr/bin/nvidia-smi"

    def env(self) -> dict[str, str]:
        """Environment additions that make host processes use this root's libraries."""
        dirs = [d for d in (self.lib_dir, self.lib32_dir) if d]
        return {"LD_LIBRARY_PATH": ":".join(dirs)}
