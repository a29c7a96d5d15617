"""The procfs-like tree of the simulated driver: file texts (pure) and writing them.

Formats follow what NVIDIA's kernel modules print in /proc/driver/nvidia and
/proc/driver/nvidia-caps. The `nvsim` file next to each GPU's `information` is
simulation-only: it carries what the fake NVML needs and the real file lacks.
"""

from __future__ import annotations

from nvhook.dev.sim import catalog
from nvhook.dev.sim.records import (
    CAPS_MAJOR,
    IMEX_MAJOR,
    NVIDIA_MAJOR,
    UVM_MAJOR,
    SimGpu,
    SimSpec,
)
from nvhook.dev.sim.topology import caps_ci_minor, caps_gi_minor

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from pathlib import Path

BUILD_DATE = "Tue Mar  5 22:23:56 UTC 2024"
CAPS_MODE_CONFIG = 256  # 0400
CAPS_MODE_ACCESS = 292  # 0444

MAJORS: tuple[tuple[str, int], ...] = (
    ("nvidia", NVIDIA_MAJOR),
    ("nvidia-modeset", NVIDIA_MAJOR),
    ("nvidiactl", NVIDIA_MAJOR),
    ("nvidia-uvm", UVM_MAJOR),
    ("nvidia-caps", CAPS_MAJOR),
    ("nvidia-caps-imex-channels", IMEX_MAJOR),
)

_HOST_CHAR = ((1, "mem"), (4, "/dev/vc/0"), (4, "tty"), (5, "/dev/tty"), (5, "/dev/console"),
              (5, "/dev/ptmx"), (7, "vcs"), (10, "misc"), (13, "input"), (128, "ptm"),
              (136, "pts"), (180, "usb"), (189, "usb_device"), (226, "drm"), (254, "gpiochip"))
_HOST_BLOCK = ((7, "loop"), (8, "sd"), (9, "md"), (11, "sr"), (65, "sd"), (259, "blkext"))


def devices_text() -> str:
    """/proc/devices with the driver's majors among the usual ones (sorted, as the kernel)."""
    chars = sorted([*_HOST_CHAR, *((major, name) for name, major in MAJORS)])
    lines = ["Character devices:", *(f"{major:3d} {name}" for major, name in chars), "",
             "Block devices:", *(f"{major:3d} {name}" for major, name in _HOST_BLOCK)]
    return "\n".join(lines) + "\n"


def version_text(spec: SimSpec) -> str:
    return (f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {spec.driver_version}  "
            f"{BUILD_DATE}\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")


def params_text() -> str:
    params = (
        ("ResmanDebugLevel", "4294967295"), ("RmLogonRC", "1"), ("ModifyDeviceFiles", "1"),
        ("DeviceFileUID", "0"), ("DeviceFileGID", "0"), ("DeviceFileMode", "438"),
        ("InitializeSystemMemoryAllocations", "1"), ("UsePageAttributeTable", "4294967295"),
        ("EnableMSI", "1"), ("EnablePCIeGen3", "0"), ("MemoryPoolSize", "0"),
        ("KMallocHeapMaxSize", "0"), ("VMallocHeapMaxSize", "0"), ("IgnoreMMIOCheck", "0"),
        ("TCEBypassMode", "0"), ("EnableStreamMemOPs", "0"), ("EnableUserNUMAManagement", "1"),
        ("NvLinkDisable", "0"), ("RmProfilingAdminOnly", "1"),
        ("PreserveVideoMemoryAllocations", "0"), ("EnableS0ixPowerManagement", "0"),
        ("S0ixPowerManagementVideoMemoryThreshold", "256"), ("DynamicPowerManagement", "3"),
        ("DynamicPowerManagementVideoMemoryThreshold", "200"), ("RegisterPCIDriver", "1"),
        ("EnablePCIERelaxedOrderingMode", "0"), ("EnableResizableBar", "0"),
        ("EnableGpuFirmware", "18"), ("EnableGpuFirmwareLogs", "2"),
        ("RmNvlinkBandwidthLinkCount", "0"), ("EnableDbgBreakpoint", "0"),
        ("OpenRmEnableUnsupportedGpus", "0"), ("DmaRemapPeerMmio", "1"),
        ("ImexChannelCount", "2048"), ("CreateImexChannel0", "0"),
        ("GrdmaPciTopoCheckOverride", "0"), ("RegistryDwords", '""'),
        ("RegistryDwordsPerDevice", '""'), ("RmMsg", '""'), ("GpuBlacklist", '""'),
        ("TemporaryFilePath", '""'), ("ExcludedGpus", '""'),
    )
    return "".join(f"{key}: {value}\n" for key, value in params)


def registry_text() -> str:
    return 'Binary: ""\n'


def information_text(gpu: SimGpu) -> str:
    return (
        f"Model: \t\t {gpu.model}\n"
        f"IRQ:   \t\t {64 + gpu.index}\n"
        f"GPU UUID: \t {gpu.uuid}\n"
        f"Video BIOS: \t 92.00.45.00.03\n"
        f"Bus Type: \t PCIe\n"
        f"DMA Size: \t 47 bits\n"
        f"DMA Mask: \t 0x7fffffffffff\n"
        f"Bus Location: \t {gpu.proc_bus_id}\n"
        f"Device Minor: \t {gpu.minor}\n"
        f"GPU Excluded:\t No\n"
    )


def power_text() -> str:
    return ("Runtime D3 status:          Not supported\nVideo Memory:               Active\n\n"
            "GPU Hardware Support:\n Video Memory Self Refresh: Not Supported\n"
            " Video Memory Off:          Not Supported\n")


def nvsim_text(gpu: SimGpu, delay_ms: int = 0) -> str:
    """The sim-only extras the fake NVML reads (see nvsim.h); `delay_ms`: the GPU has no
    persistence mode and NVML's initialisation waits that long for it."""
    model = catalog.MODELS.get(gpu.model, catalog.UNKNOWN_MODEL)
    lines = [
        f"Brand: {gpu.brand_code}",
        f"Architecture: {gpu.arch_code}",
        f"Compute Capability: {gpu.architecture}",
        f"Memory MiB: {gpu.memory_mib}",
        f"PCI Device Id: {gpu.pci_device_id:04x}",
        "PCI Subsystem Id: 147f10de",
        f"Power Limit mW: {model.power_limit_w * 1000}",
        f"SM Count: {model.sm_count}",
        f"Serial: {1324020000000 + gpu.index}",
        f"MIG Capable: {int(gpu.mig_capable)}",
        f"MIG Mode: {int(gpu.mig_enabled)}",
        f"Persistence Mode: {int(not delay_ms)}",
        f"Init Delay ms: {delay_ms}",
    ]
    lines += [f"MIG Device: {m.uuid} {m.gi} {m.ci} {m.profile} {m.memory_mib} {m.slices}"
              for m in gpu.mig_devices]
    return "\n".join(lines) + "\n"


def cap_text(minor: int, mode: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def mig_minors_text(gpus: tuple[SimGpu, ...]) -> str:
    """/proc/driver/nvidia-caps/mig-minors: every possible GI/CI of every possible GPU."""
    count = max([catalog.CAPS_DRIVER_GPUS, *(g.minor + 1 for g in gpus)])
    lines = [f"config {catalog.CAPS_CONFIG_MINOR}", f"monitor {catalog.CAPS_MONITOR_MINOR}"]
    for gpu in range(count):
        for gi in range(catalog.CAPS_GIS_PER_GPU):
            lines.append(f"gpu{gpu}/gi{gi}/access {caps_gi_minor(gpu, gi)}")
            lines += [f"gpu{gpu}/gi{gi}/ci{ci}/access {caps_ci_minor(gpu, gi, ci)}"
                      for ci in range(catalog.CAPS_CIS_PER_GI)]
    return "\n".join(lines) + "\n"


def capability_files(gpus: tuple[SimGpu, ...]) -> dict[str, str]:
    """Texts of /proc/driver/nvidia/capabilities/..., keyed by path under capabilities/."""
    files = {
        "mig/config": cap_text(catalog.CAPS_CONFIG_MINOR, CAPS_MODE_CONFIG),
        "mig/monitor": cap_text(catalog.CAPS_MONITOR_MINOR, CAPS_MODE_ACCESS),
    }
    for gpu in gpus:
        for mig in gpu.mig_devices:
            gi_dir = f"gpu{gpu.minor}/mig/gi{mig.gi}"
            files[f"{gi_dir}/access"] = cap_text(mig.gi_minor, CAPS_MODE_ACCESS)
            files[f"{gi_dir}/ci{mig.ci}/access"] = cap_text(mig.ci_minor, CAPS_MODE_ACCESS)
    return files


def write_proc(root: Path, spec: SimSpec, gpus: tuple[SimGpu, ...]) -> None:
    """Write <root>/proc: devices, driver/nvidia/..., driver/nvidia-caps/mig-minors."""
    proc = root / "proc"
    nvidia = proc / "driver" / "nvidia"
    _write(proc / "devices", devices_text())
    _write(nvidia / "version", version_text(spec))
    _write(nvidia / "params", params_text())
    _write(nvidia / "registry", registry_text())
    for gpu in gpus:
        gpu_dir = nvidia / "gpus" / gpu.proc_bus_id
        _write(gpu_dir / "information", information_text(gpu))
        _write(gpu_dir / "registry", registry_text())
        _write(gpu_dir / "power", power_text())
        _write(gpu_dir / "nvsim", nvsim_text(gpu, spec.nvml_init_delay_ms))
        if gpu.mig_capable:
            (nvidia / "capabilities" / f"gpu{gpu.minor}" / "mig").mkdir(parents=True,
                                                                         exist_ok=True)
    for rel, text in capability_files(gpus).items():
        _write(nvidia / "capabilities" / rel, text)
    _write(proc / "driver" / "nvidia-caps" / "mig-minors", mig_minors_text(gpus))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o444)
