"""Driver discovery against the simulated driver: the real ctypes NVML path, real ld.so.cache,
real device nodes. Plus the confined resolver and the library selector on synthetic roots."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from nvhook.dev.sim import SimRoot, SimSpec
from nvmount.capabilities import DriverCapability as Cap
from nvmount.discover.driver import discover_driver
from nvmount.discover.driver_root import DriverRoot
from nvmount.discover.files import find_libraries, library_names
from nvmount.discover.inventory import DriverInventory, FileKind
from nvmount.discover.ldcache import ARCH_X86_64, LdcacheEntry
from nvmount.discover.options import DiscoveryOptions
from nvmount.errors import DriverError, NvmlError, SelectionError
from nvmount.plan.selection import select_devices
from tests._compat import zip_strict
from tests.fixtures.elfgen import abi_note, make_elf
from tests.fixtures.ldcachegen import write_new
from tests.fixtures.sim import SimRootFactory

V = "550.54.15"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def discover(sim: SimRoot, **options: object) -> DriverInventory:
    return discover_driver(sim.path, "/etc/ld.so.cache", sim.proc_root, path_env=PATH,
                           options=DiscoveryOptions(**options))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def inv(sim_root: SimRoot) -> DriverInventory:
    return discover(sim_root)


def wanted(gate: Cap, caps: Cap) -> bool:
    return not gate or bool(gate & caps)


# -- versions and GPUs -------------------------------------------------------------------------
def test_versions_and_root(inv: DriverInventory, sim_root: SimRoot) -> None:
    assert (inv.driver_version, inv.cuda_version) == (V, "12.4")
    assert inv.root == os.path.realpath(sim_root.path)
    assert inv.proc_driver_dir == f"{sim_root.path}/proc/driver/nvidia"


def test_gpus_match_the_simulation(inv: DriverInventory, sim_root: SimRoot) -> None:
    assert len(inv.gpus) == 8
    for gpu, sim in zip_strict(inv.gpus, sim_root.gpus):
        assert (gpu.index, gpu.minor, gpu.uuid, gpu.bus_id, gpu.model, gpu.brand,
                gpu.architecture) == (sim.index, sim.minor, sim.uuid, sim.bus_id.lower(),
                                      sim.model, sim.brand, sim.architecture)
        assert gpu.node.host_path == f"{sim_root.path}/dev/nvidia{sim.minor}"
        assert (gpu.node.major, gpu.node.minor) == (195, sim.minor)
        # /proc/driver/nvidia/gpus uses the 4-digit domain: the 8-digit form falls back
        assert gpu.proc_dir == f"{sim_root.path}/proc/driver/nvidia/gpus/{sim.proc_bus_id}"
        assert (gpu.mig_capable, gpu.mig_enabled, gpu.mig_devices) == (True, False, ())


@pytest.mark.parametrize("count", [1, 8, 64])
def test_gpu_counts(sim_root_factory: SimRootFactory, count: int) -> None:
    sim = sim_root_factory(SimSpec(gpus=count))
    inv = discover(sim)
    assert [g.uuid for g in inv.gpus] == [g.uuid for g in sim.gpus]
    assert [g.bus_id for g in inv.gpus] == [g.bus_id.lower() for g in sim.gpus]
    assert all(g.proc_dir for g in inv.gpus)
    last = inv.gpus[-1]
    for token in (str(count - 1), last.uuid, last.bus_id, last.bus_id[4:]):
        assert select_devices(inv.gpus, token).gpus == (last,)


def test_64_gpus_span_pci_domains(sim_root_factory: SimRootFactory) -> None:
    inv = discover(sim_root_factory(SimSpec(gpus=64)))
    assert len(inv.gpus) == 64 and inv.gpus[32].bus_id.startswith("00000001:")
    assert select_devices(inv.gpus, "0001:04:00.0").gpus == (inv.gpus[32],)


# -- files per capability ----------------------------------------------------------------------
GROUPS = {  # capability -> simulated library groups it exposes (GLVND, the default)
    Cap.UTILITY: {"utility"},
    Cap.COMPUTE: {"compute"},
    Cap.VIDEO: {"compute", "video"},
    Cap.GRAPHICS: {"graphics", "graphics-glvnd"},
    Cap.DISPLAY: {"graphics", "graphics-glvnd"},
    Cap.NGX: {"ngx"},
    Cap.COMPAT32: set(),
}


@pytest.mark.parametrize("cap", list(GROUPS), ids=[str(c.name).lower() for c in GROUPS])
def test_library_set_per_capability(inv: DriverInventory, sim_root: SimRoot, cap: Cap) -> None:
    for found, sims in ((inv.libraries, sim_root.libraries),
                        (inv.libraries32, sim_root.libraries32)):
        got = {f.container_path for f in found if wanted(f.capabilities, cap)}
        gbm = {s.path_rel for s in sims if s.name == "libnvidia-allocator.so"} if cap in (
            Cap.GRAPHICS, Cap.DISPLAY) else set()  # GBM's allocator: nvmount.plan.graphics
        assert got == {s.path_rel for s in sims if s.group in GROUPS[cap]} | gbm


def test_libraries_are_real_versioned_files_with_sonames(inv: DriverInventory,
                                                        sim_root: SimRoot) -> None:
    assert [f.kind for f in inv.libraries] == [FileKind.LIBRARY] * len(inv.libraries)
    assert {f.kind for f in inv.libraries32} == {FileKind.LIBRARY32}
    sonames = {s.path_rel: s.soname for s in sim_root.libraries + sim_root.libraries32}
    for f in inv.libraries + inv.libraries32:
        assert f.host_path == sim_root.path + f.container_path
        assert f.container_path.endswith(f".so.{V}") and not os.path.islink(f.host_path)
        assert f.soname == sonames[f.container_path]
    # libnvc's lookup order: utility, compute, ngx, video, graphics, glvnd
    order = [f.container_path.rsplit("/", 1)[1].split(".so")[0] for f in inv.libraries]
    assert order[:3] == ["libnvidia-ml", "libnvidia-cfg", "libnvidia-nscq"]
    assert order.index("libnvidia-ngx") < order.index("libvdpau_nvidia") < order.index(
        "libnvidia-eglcore") < order.index("libGLX_nvidia")


def test_missing_library_warnings(inv: DriverInventory, sim_root: SimRoot) -> None:
    # QUIRK: libnvidia-gpucomp.so is listed twice, its second slot is never filled
    assert [w for w in inv.warnings if w.startswith("missing library")] == [
        "missing library libnvidia-gpucomp.so"]
    no32 = {s.name for s in sim_root.libraries} - {s.name for s in sim_root.libraries32}
    no32 -= {s.name for s in sim_root.libraries
             if s.group in ("graphics-compat", "graphics-extra")}
    missing32 = {w.rsplit(" ", 1)[1] for w in inv.warnings
                 if w.startswith("missing compat32 library")}
    assert missing32 == no32 | {"libnvidia-gpucomp.so"}


def test_no_glvnd_selects_the_compat_libraries(sim_root: SimRoot) -> None:
    inv = discover(sim_root, no_glvnd=True)
    compat = {s.path_rel for s in sim_root.libraries if s.group == "graphics-compat"}
    glvnd = {s.path_rel for s in sim_root.libraries if s.group == "graphics-glvnd"}
    paths = {f.container_path for f in inv.libraries}
    assert compat <= paths and not glvnd & paths
    assert all(f.capabilities == Cap.GRAPHICS | Cap.DISPLAY for f in inv.libraries
               if f.container_path in compat)


BINARIES = {
    Cap.UTILITY: ["nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager"],
    Cap.COMPUTE: ["nvidia-cuda-mps-control", "nvidia-cuda-mps-server"],
    Cap.VIDEO: [],  # video brings compute libraries, not the MPS binaries
    Cap.GRAPHICS: [],
}


@pytest.mark.parametrize("cap", list(BINARIES), ids=[str(c.name).lower() for c in BINARIES])
def test_binaries_per_capability(inv: DriverInventory, sim_root: SimRoot, cap: Cap) -> None:
    got = [f.container_path for f in inv.binaries if wanted(f.capabilities, cap)]
    assert got == [f"/usr/bin/{b}" for b in BINARIES[cap]]
    assert all(f.host_path == sim_root.path + f.container_path for f in inv.binaries)


@pytest.mark.parametrize("path_env,found", [
    ("/nowhere:/usr/bin", 6),
    ("/usr/sbin", 0),
    ("", 0),  # an empty element is ".", i.e. the root itself
    ("/usr/../usr/bin", 6),
], ids=["second-dir", "not-there", "empty-is-dot", "dotdot"])
def test_binary_lookup_along_path(sim_root: SimRoot, path_env: str, found: int) -> None:
    inv = discover_driver(sim_root.path, proc_root=sim_root.proc_root, path_env=path_env)
    assert len(inv.binaries) == found
    assert len([w for w in inv.warnings if w.startswith("missing binary")]) == 6 - found


def test_no_mps_drops_mps_binaries_and_pipe_dir(sim_root: SimRoot) -> None:
    inv = discover(sim_root, no_mps=True)
    assert [f.container_path for f in inv.binaries][-1] == "/usr/bin/nv-fabricmanager"
    assert "/tmp/nvidia-mps" not in {f.container_path for f in inv.ipc}


IPC = {
    Cap.UTILITY: ["/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket"],
    Cap.COMPUTE: ["/tmp/nvidia-mps"],
    Cap.VIDEO: ["/tmp/nvidia-mps"],
    Cap.GRAPHICS: [],
}


@pytest.mark.parametrize("cap", list(IPC), ids=[str(c.name).lower() for c in IPC])
def test_ipc_per_capability(inv: DriverInventory, cap: Cap) -> None:
    # /var/run/... is looked up and stored resolved: the simulation's var/run -> ../run
    assert [f.container_path for f in inv.ipc if wanted(f.capabilities, cap)] == IPC[cap]


def test_ipc_options_and_mps_dir(sim_root: SimRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = discover(sim_root, no_persistenced=True, no_fabricmanager=True)
    assert [f.container_path for f in inv.ipc] == ["/tmp/nvidia-mps"]
    # the hook's environment chooses nothing (an image may control it: issue 8, class 2);
    # with driver root / the variable would have bound the host's /etc into the container
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/etc")
    assert [f.container_path for f in discover(sim_root).ipc][-1] == "/tmp/nvidia-mps"
    assert [f.container_path for f in discover(sim_root, mps_pipe_dir="/run").ipc][-1] == "/run"
    inv = discover(sim_root, mps_pipe_dir="/var/run/nowhere")
    assert "missing ipc path /var/run/nowhere" in inv.warnings


def test_firmware_is_ungated_and_unresolved(inv: DriverInventory, sim_root: SimRoot) -> None:
    assert [f.container_path for f in inv.firmware] == [
        f"/lib/firmware/nvidia/{V}/gsp_ga10x.bin", f"/lib/firmware/nvidia/{V}/gsp_tu10x.bin"]
    assert all(not f.capabilities and f.kind is FileKind.FIRMWARE for f in inv.firmware)
    assert discover(sim_root, no_gsp_firmware=True).firmware == ()


DEVICES = {
    Cap.UTILITY: ["/dev/nvidiactl"],
    Cap.COMPUTE: ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"],
    Cap.VIDEO: ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"],
    Cap.GRAPHICS: ["/dev/nvidiactl"],
    Cap.DISPLAY: ["/dev/nvidiactl", "/dev/nvidia-modeset"],
}


@pytest.mark.parametrize("cap", list(DEVICES), ids=[str(c.name).lower() for c in DEVICES])
def test_control_nodes_per_capability(inv: DriverInventory, cap: Cap) -> None:
    assert [n.container_path for n in inv.control_nodes
            if wanted(n.capabilities, cap)] == DEVICES[cap]


def test_control_node_numbers(inv: DriverInventory, sim_root: SimRoot) -> None:
    majors = dict(sim_root.majors)
    assert [(n.container_path, n.major, n.minor) for n in inv.control_nodes] == [
        ("/dev/nvidiactl", 195, 255), ("/dev/nvidia-uvm", majors["nvidia-uvm"], 0),
        ("/dev/nvidia-uvm-tools", majors["nvidia-uvm"], 1), ("/dev/nvidia-modeset", 195, 254)]
    assert inv.caps_major == majors["nvidia-caps"]
    assert inv.imex_major == majors["nvidia-caps-imex-channels"]
    assert [n.container_path for n in inv.imex_channels] == [
        "/dev/nvidia-caps-imex-channels/channel0"]


def test_no_uvm_no_modeset(sim_root: SimRoot) -> None:
    inv = discover(sim_root, no_uvm=True, no_modeset=True)
    assert [n.container_path for n in inv.control_nodes] == ["/dev/nvidiactl"]


# -- MIG --------------------------------------------------------------------------------------
def test_mig_devices_and_caps(sim_mig_root: SimRoot) -> None:
    inv = discover(sim_mig_root)
    for gpu, sim in zip_strict(inv.gpus, sim_mig_root.gpus):
        assert (gpu.mig_capable, gpu.mig_enabled) == (sim.mig_capable, sim.mig_enabled)
        assert len(gpu.mig_devices) == len(sim.mig_devices)
        for mig, want in zip_strict(gpu.mig_devices, sim.mig_devices):
            assert (mig.index, mig.uuid, mig.gi, mig.ci, mig.profile, mig.gpu_index) == (
                want.index, want.uuid, want.gi, want.ci, want.profile, gpu.index)
            base = f"/proc/driver/nvidia/capabilities/gpu{gpu.minor}/mig/gi{want.gi}"
            assert (mig.gi_access, mig.ci_access) == (f"{base}/access",
                                                     f"{base}/ci{want.ci}/access")
            assert mig.gi_cap is not None and mig.ci_cap is not None
            assert (mig.gi_cap.minor, mig.ci_cap.minor) == (want.gi_minor, want.ci_minor)
            assert mig.gi_cap.container_path == f"/dev/nvidia-caps/nvidia-cap{want.gi_minor}"
    assert [len(g.mig_devices) for g in inv.gpus] == [4, 7, 0, 0, 0, 0, 0, 0]
    assert inv.gpus[2].mig_enabled and not inv.gpus[3].mig_enabled
    assert inv.mig_config_cap is not None and inv.mig_config_cap.minor == 1
    assert inv.mig_monitor_cap is not None and inv.mig_monitor_cap.minor == 2
    names = [name for name, _ in inv.mig_minors]
    assert names[:2] == ["config", "monitor"] and "gpu0/gi1/access" in names
    assert {n.split("/")[0] for n in names[2:]} == {f"gpu{m}" for m in range(8)}


def test_mig_selection_on_discovered_devices(sim_mig_root: SimRoot) -> None:
    inv = discover(sim_mig_root)
    mig = inv.gpus[1].mig_devices[6]
    for token in (mig.uuid, "1:6"):
        sel = select_devices(inv.gpus, token)
        assert sel.mig_devices == (mig,) and sel.gpus == (inv.gpus[1],)


# -- error paths ----------------------------------------------------------------------------
def test_unknown_device(inv: DriverInventory) -> None:
    with pytest.raises(SelectionError, match=r"device error: 8: unknown device .*nvhook info"):
        select_devices(inv.gpus, "0,8")


@pytest.mark.parametrize("fail,function,code,hint", [
    ("nvmlInit_v2:DRIVER_NOT_LOADED", "nvmlInit_v2", 9, "is the NVIDIA kernel module loaded"),
    ("nvmlSystemGetDriverVersion:18", "nvmlSystemGetDriverVersion", 18, "reboot or reload"),
    ("nvmlDeviceGetCount_v2:UNKNOWN", "nvmlDeviceGetCount_v2", 999, "dmesg"),
    ("nvmlDeviceGetUUID:GPU_IS_LOST", "nvmlDeviceGetUUID", 15, "fallen off the bus"),
    ("nvmlDeviceGetPciInfo:NO_PERMISSION", "nvmlDeviceGetPciInfo", 4, "/dev/nvidiactl"),
    ("nvmlDeviceGetMigMode:UNKNOWN", "nvmlDeviceGetMigMode", 999, "dmesg"),
], ids=["init", "version", "count", "uuid", "pci", "mig-mode"])
def test_nvml_failures(sim_root: SimRoot, monkeypatch: pytest.MonkeyPatch, fail: str,
                       function: str, code: int, hint: str) -> None:
    monkeypatch.setenv("NVSIM_FAIL", fail)
    with pytest.raises(NvmlError) as err:
        discover(sim_root)
    assert (err.value.function, err.value.code) == (function, code)
    msg = str(err.value)
    assert msg.startswith(f"nvml {function} failed: ") and hint in msg


def test_nvml_error_text_comes_from_the_library(sim_root: SimRoot,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSIM_FAIL", "nvmlInit_v2:DRIVER_NOT_LOADED")
    with pytest.raises(NvmlError, match="failed: Driver Not Loaded \\(code 9\\)"):
        discover(sim_root)


@pytest.mark.parametrize("code", ["NOT_SUPPORTED", "FUNCTION_NOT_FOUND"])
def test_mig_mode_unsupported_means_not_capable(sim_mig_root: SimRoot,
                                                monkeypatch: pytest.MonkeyPatch,
                                                code: str) -> None:
    monkeypatch.setenv("NVSIM_FAIL", f"nvmlDeviceGetMigMode:{code}")
    inv = discover(sim_mig_root)
    assert not any(g.mig_capable or g.mig_enabled or g.mig_devices for g in inv.gpus)


def test_nvml_shutdown_runs_after_a_failure(sim_root: SimRoot, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("NVSIM_FAIL", "nvmlDeviceGetUUID:GPU_IS_LOST,nvmlShutdown:UNKNOWN")
    with caplog.at_level(logging.WARNING, logger="nvmount.discover._nvml"), \
            pytest.raises(NvmlError):
        discover(sim_root)
    assert "nvml nvmlShutdown failed" in caplog.text  # shutdown ran; the first error won


def _fake_root(tmp_path: Path, entries: tuple[LdcacheEntry, ...]) -> Path:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.cache").write_bytes(write_new(entries))
    return tmp_path


def test_missing_nvml_in_cache(tmp_path: Path) -> None:
    root = _fake_root(tmp_path, (LdcacheEntry("libc.so.6", "/lib/libc.so.6", 0x303),))
    with pytest.raises(DriverError, match=r"load nvml: libnvidia-ml.so.1 is not in "
                                          rf"{root}/etc/ld.so.cache \(is the NVIDIA driver"):
        discover_driver(str(root), proc_root=str(root))


def test_missing_cache(tmp_path: Path) -> None:
    with pytest.raises(DriverError, match=rf"read ld.so.cache {tmp_path}/etc/ld.so.cache: no "
                                          "such file or directory"):
        discover_driver(str(tmp_path))


def test_nvml_is_never_loaded_by_bare_name(tmp_path: Path) -> None:
    from nvmount.discover._nvml import open_nvml

    with pytest.raises(DriverError, match="not an absolute path"), open_nvml("libnvidia-ml.so.1"):
        pass


def test_ldcache_symlink_escaping_the_root(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.cache").symlink_to("../../../../../../etc/ld.so.cache")
    with pytest.raises(DriverError, match="resolves outside of"):
        discover_driver(str(tmp_path))


# -- the confined resolver ---------------------------------------------------------------
def test_resolver(tmp_path: Path) -> None:
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/real.so").write_bytes(b"x")
    (tmp_path / "usr/lib/rel.so").symlink_to("real.so")
    (tmp_path / "usr/lib/abs.so").symlink_to("/usr/lib/rel.so")  # re-rooted, not the host's
    (tmp_path / "lib").symlink_to("/usr/lib")
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "up").symlink_to("..")
    root = DriverRoot(str(tmp_path))
    assert root.resolve("/lib/abs.so").path == "/usr/lib/real.so"
    assert root.resolve("lib/./rel.so").exists
    assert root.resolve("/usr/lib/../lib/real.so").path == "/usr/lib/real.so"
    missing = root.resolve("/lib/nope/../x.so")
    assert (missing.path, missing.exists) == ("/usr/lib/x.so", False)
    assert root.host("/usr/lib/real.so") == f"{tmp_path}/usr/lib/real.so"
    with pytest.raises(DriverError, match="too many levels of symbolic links"):
        root.resolve("/loop")
    with pytest.raises(DriverError, match="resolves outside of"):
        root.resolve("/up")
    with pytest.raises(DriverError, match="resolves outside of"):
        root.resolve("/..")
    assert DriverRoot("/").resolve("/").path == "/"


# -- the library selector (libnvc-spec §1.3) ---------------------------------------------
LIB = "/usr/lib/x86_64-linux-gnu"


def _lib(root: Path, name: str, data: bytes, link: str | None = None) -> LdcacheEntry:
    d = root / LIB.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)
    key = link or name
    if link:
        (d / link).unlink(missing_ok=True)
        (d / link).symlink_to(name)
    return LdcacheEntry(key, f"{LIB}/{key}", 0x303)


def _select(root: Path, entries: list[LdcacheEntry], names: tuple[str, ...] | None = None,
            ) -> tuple[list[str], list[str]]:
    warnings: list[str] = []
    files = find_libraries(DriverRoot(str(root)), tuple(entries), ARCH_X86_64,
                           names or library_names(), V, FileKind.LIBRARY, warnings)
    return [f.container_path.rsplit("/", 1)[1] for f in files], warnings


def test_selector_version_suffix_and_last_accepted_wins(tmp_path: Path) -> None:
    entries = [
        _lib(tmp_path, f"libcuda.so.{V}", make_elf("libcuda.so.1"), "libcuda.so.1"),
        _lib(tmp_path, "libcuda.so.999.0.0", make_elf("libcuda.so.1")),  # other version: skip
        _lib(tmp_path, "libnvidia-ml.so.1.0", make_elf("libnvidia-ml.so.1")),  # skip
        _lib(tmp_path, f"libnvidia-ml.so.{V}", make_elf("libnvidia-ml.so.1")),
        _lib(tmp_path, f"libnvidia-cfg.so.{V}", b"#!/bin/sh\n"),  # not ELF: skip
    ]
    dup = tmp_path / LIB.lstrip("/") / "other"
    dup.mkdir()
    (dup / f"libcuda.so.{V}").write_bytes(make_elf("libcuda.so.1"))
    entries.append(LdcacheEntry("libcuda.so.1", f"{LIB}/other/libcuda.so.{V}", 0x303))
    names, warnings = _select(tmp_path, entries,
                              ("libnvidia-ml.so", "libnvidia-cfg.so", "libcuda.so"))
    assert names == [f"libnvidia-ml.so.{V}", f"libcuda.so.{V}"]
    assert warnings == ["missing library libnvidia-cfg.so"]
    files = find_libraries(DriverRoot(str(tmp_path)), tuple(entries), ARCH_X86_64,
                           ("libcuda.so",), V, FileKind.LIBRARY, [])
    assert files[0].container_path == f"{LIB}/other/libcuda.so.{V}"  # the last one won


def test_selector_tls_abi(tmp_path: Path) -> None:
    old = _lib(tmp_path, f"libnvidia-tls.so.{V}", make_elf(f"libnvidia-tls.so.{V}",
                                                             note=abi_note(2, 2, 5)))
    assert _select(tmp_path, [old], ("libnvidia-tls.so",))[0] == []
    new = _lib(tmp_path, f"libnvidia-tls.so.{V}", make_elf(f"libnvidia-tls.so.{V}",
                                                             note=abi_note(2, 3, 99)))
    assert _select(tmp_path, [new], ("libnvidia-tls.so",))[0] == [f"libnvidia-tls.so.{V}"]


def test_selector_compat_needs_nvidia_core(tmp_path: Path) -> None:
    mesa = _lib(tmp_path, f"libGL.so.{V}", make_elf("libGL.so.1", ("libGLdispatch.so.0",)))
    assert _select(tmp_path, [mesa], ("libGL.so",))[0] == []
    for core in ("libnvidia-glcore.so", "libnvidia-eglcore.so"):
        nv = _lib(tmp_path, f"libGL.so.{V}", make_elf("libGL.so.1", (f"{core}.{V}",)))
        assert _select(tmp_path, [nv], ("libGL.so",))[0] == [f"libGL.so.{V}"]


def test_selector_skips_other_abis_and_non_elf_flags(tmp_path: Path) -> None:
    e = _lib(tmp_path, f"libcuda.so.{V}", make_elf("libcuda.so.1"))
    for flags in (0x0003, 0x0a03, 0x0300):  # i386, aarch64, not ELF
        assert _select(tmp_path, [LdcacheEntry(e.key, e.value, flags)],
                       ("libcuda.so",))[0] == []


def test_selector_unreadable_candidate_is_an_error(tmp_path: Path) -> None:
    e = _lib(tmp_path, f"libcuda.so.{V}", make_elf("libcuda.so.1"))
    missing = LdcacheEntry(e.key, f"{LIB}/gone.so.{V}", 0x303)
    with pytest.raises(DriverError, match=f"read library .*gone.so.{V}: no such file"):
        _select(tmp_path, [missing], ("libcuda.so",))


def test_mig_minors_can_be_skipped(sim_mig_root: SimRoot) -> None:
    assert discover(sim_mig_root, mig_minors=False).mig_minors == ()


def test_missing_symbols_are_function_not_found() -> None:
    from nvmount.discover._nvml import NvmlSession

    session = NvmlSession("/lib/x86_64-linux-gnu/libm.so.6")  # a library without NVML
    with pytest.raises(NvmlError) as err:
        session.init()
    assert (err.value.function, err.value.code, err.value.text) == ("nvmlInit_v2", 13, "error 13")
    assert "too old for this call" in str(err.value)


def test_caller_provided_nvml_session(sim_root: SimRoot) -> None:
    from nvmount.discover._nvml import open_nvml

    with open_nvml(sim_root.nvml_path) as session:
        inv = discover_driver(sim_root.path, proc_root=sim_root.proc_root, nvml=session)
    assert [g.uuid for g in inv.gpus] == [g.uuid for g in sim_root.gpus]


def test_load_failure_names_the_library(tmp_path: Path) -> None:
    from nvmount.discover._nvml import open_nvml

    bad = tmp_path / "libnvidia-ml.so.1"
    bad.write_bytes(b"not a library")
    with pytest.raises(DriverError, match=f"load nvml {bad}: .*run 'ldconfig' there"), \
            open_nvml(str(bad)):
        pass
