"""plan_mounts: a pure function of inventory, selection, capabilities, layout and options."""

from __future__ import annotations

import pytest

from nvmount import records
from nvmount.capabilities import DriverCapability as C
from nvmount.discover.inventory import (
    DeviceNode,
    DriverFile,
    DriverInventory,
    FileKind,
    Gpu,
    MigDevice,
)
from nvmount.discover.procfiles import ProcFile
from nvmount.errors import DriverError, SelectionError
from nvmount.fs.paths import SourceKind
from nvmount.plan.app_profile import app_profile_bytes
from nvmount.plan.mounts import compat_dirs, plan_mounts
from nvmount.plan.procfs import rewrite_params
from nvmount.plan.selection import Selection, select_devices
from nvmount.plan.types import (
    RO_DEV,
    RO_IPC,
    RO_LIB,
    RO_PROC,
    Bind,
    CompatMode,
    ContainerLayout,
    MountFlag,
    MountPlan,
    PlanOptions,
    Symlink,
    Tmpfs,
    WriteFile,
)

VER = "550.54.15"
ROOT = "/drv"
LIB = "/usr/lib/x86_64-linux-gnu"
LIB32 = "/usr/lib/i386-linux-gnu"
COMPUTE_LIBS = C.COMPUTE | C.VIDEO
GRAPHICS_LIBS = C.GRAPHICS | C.DISPLAY

# NVIDIA's lookup tables (libnvc-spec §1.2, §1.4): name -> gate
LIBS = {
    "libnvidia-ml": C.UTILITY, "libnvidia-cfg": C.UTILITY, "libnvidia-nscq": C.UTILITY,
    "libcuda": COMPUTE_LIBS, "libnvidia-ptxjitcompiler": COMPUTE_LIBS,
    "libnvidia-opencl": COMPUTE_LIBS, "libnvidia-nvvm": COMPUTE_LIBS,
    "libnvidia-encode": C.VIDEO, "libnvcuvid": C.VIDEO, "libnvidia-opticalflow": C.VIDEO,
    "libvdpau_nvidia": C.VIDEO,
    "libnvidia-eglcore": GRAPHICS_LIBS, "libnvidia-glcore": GRAPHICS_LIBS,
    "libGLX_nvidia": GRAPHICS_LIBS, "libEGL_nvidia": GRAPHICS_LIBS,
    "libnvidia-ngx": C.NGX,
}
SONAMES = {"libGLX_nvidia": "libGLX_nvidia.so.0", "libEGL_nvidia": "libEGL_nvidia.so.0",
           "libvdpau_nvidia": "libvdpau_nvidia.so.1"}
BINS = {"nvidia-smi": C.UTILITY, "nvidia-debugdump": C.UTILITY,
        "nvidia-persistenced": C.UTILITY, "nv-fabricmanager": C.UTILITY,
        "nvidia-cuda-mps-control": C.COMPUTE, "nvidia-cuda-mps-server": C.COMPUTE}
IPC = {"/run/nvidia-persistenced/socket": C.UTILITY,
       "/run/nvidia-fabricmanager/socket": C.UTILITY, "/tmp/nvidia-mps": COMPUTE_LIBS}
DEBIAN = ContainerLayout("/usr/bin", LIB, LIB32)
FEDORA = ContainerLayout("/usr/bin", "/usr/lib64", "/usr/lib32")
ALL_CAPS = C.all()


def _lib(name: str, gate: C, lib_dir: str = LIB, kind: FileKind = FileKind.LIBRARY) -> DriverFile:
    base = f"{name}.so.{VER}"
    return DriverFile(kind, f"{ROOT}{lib_dir}/{base}", f"{lib_dir}/{base}", gate,
                      SONAMES.get(name, f"{name}.so.1"))


def _node(path: str, major: int, minor: int) -> DeviceNode:
    return DeviceNode(ROOT + path, path, major, minor)


def _mig(gpu: int, minor: int, index: int, gi: int, ci: int, cap: int) -> MigDevice:
    base = f"/proc/driver/nvidia/capabilities/gpu{minor}/mig/gi{gi}"
    return MigDevice(index, f"MIG-{gpu}-{index}", gi, ci, "1g.10gb", f"{base}/access",
                     f"{base}/ci{ci}/access", _node(f"/dev/nvidia-caps/nvidia-cap{cap}", 237, cap),
                     _node(f"/dev/nvidia-caps/nvidia-cap{cap + 1}", 237, cap + 1), gpu_index=gpu)


def _gpu(index: int, minor: int | None = None, migs: int = 0) -> Gpu:
    minor = index if minor is None else minor
    bus = f"00000000:{index + 7:02x}:00.0"
    mig_devices = tuple(_mig(index, minor, i, i + 1, 0, 10 * index + 2 * i + 1)
                        for i in range(migs))
    return Gpu(index, minor, f"GPU-{index:08d}", bus, "NVIDIA A100", "Tesla", "8.0",
               _node(f"/dev/nvidia{minor}", 195, minor),
               f"{ROOT}/proc/driver/nvidia/gpus/{bus}", mig_capable=migs > 0,
               mig_enabled=migs > 0, mig_devices=mig_devices)


def inventory(ngpus: int = 2, **changes: object) -> DriverInventory:
    inv = DriverInventory(
        root=ROOT, driver_version=VER, cuda_version="12.4",
        gpus=tuple(_gpu(i) for i in range(ngpus)),
        libraries=tuple(_lib(n, g) for n, g in LIBS.items()),
        libraries32=tuple(_lib(n, g, LIB32, FileKind.LIBRARY32) for n, g in LIBS.items()
                          if n in ("libcuda", "libGLX_nvidia")),
        binaries=tuple(DriverFile(FileKind.BINARY, f"{ROOT}/usr/bin/{n}", f"/usr/bin/{n}", g)
                       for n, g in BINS.items()),
        firmware=(DriverFile(FileKind.FIRMWARE, f"{ROOT}/lib/firmware/nvidia/{VER}/gsp_ga10x.bin",
                             f"/lib/firmware/nvidia/{VER}/gsp_ga10x.bin", C(0)),),
        ipc=tuple(DriverFile(FileKind.IPC, ROOT + p, p, g) for p, g in IPC.items()),
        control_nodes=(_node("/dev/nvidiactl", 195, 255), _node("/dev/nvidia-uvm", 510, 0),
                       _node("/dev/nvidia-uvm-tools", 510, 1),
                       _node("/dev/nvidia-modeset", 195, 254)),
        proc_driver_dir=f"{ROOT}/proc/driver/nvidia",
        caps_major=237,
    )
    return records.replace(inv, **changes)  # type: ignore[arg-type]


PROC = (ProcFile("params", b"ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n", 0o444),
        ProcFile("version", b"NVRM version: 550.54.15\n", 0o444),
        ProcFile("registry", b"Binary: \"\"\n", 0o644))


def make_plan(caps: C = ALL_CAPS, devices: str = "all", inv: DriverInventory | None = None,
              layout: ContainerLayout = DEBIAN, **options: object) -> MountPlan:
    inv = inv or inventory()
    selection = select_devices(inv.gpus, devices)
    return plan_mounts(inv, selection, caps, layout, PlanOptions(proc_files=PROC, **options))  # type: ignore[arg-type]


def targets(plan: MountPlan, kind: type = Bind, what: str | None = None) -> list[str]:
    return [e.target for e in plan.entries
            if isinstance(e, kind) and (what is None or e.what == what)]


def basenames(plan: MountPlan, what: str) -> set[str]:
    return {t.rsplit("/", 1)[1].split(".so")[0] for t in targets(plan, Bind, what)}


# -- capability matrix (Appendix E item 3) ------------------------------------------------
MATRIX = [
    ("utility", C.UTILITY,
     {"libnvidia-ml", "libnvidia-cfg", "libnvidia-nscq"},
     {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager"},
     {"/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket"},
     {"/dev/nvidiactl"}),
    ("compute", C.COMPUTE,
     {"libcuda", "libnvidia-ptxjitcompiler", "libnvidia-opencl", "libnvidia-nvvm"},
     {"nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}, {"/tmp/nvidia-mps"},
     {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}),
    ("video", C.VIDEO,
     {"libcuda", "libnvidia-ptxjitcompiler", "libnvidia-opencl", "libnvidia-nvvm",
      "libnvidia-encode", "libnvcuvid", "libnvidia-opticalflow", "libvdpau_nvidia"},
     set(), {"/tmp/nvidia-mps"},
     {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}),
    ("graphics", C.GRAPHICS,
     {"libnvidia-eglcore", "libnvidia-glcore", "libGLX_nvidia", "libEGL_nvidia"},
     set(), set(), {"/dev/nvidiactl"}),
    ("display", C.DISPLAY,
     {"libnvidia-eglcore", "libnvidia-glcore", "libGLX_nvidia", "libEGL_nvidia"},
     set(), set(), {"/dev/nvidiactl", "/dev/nvidia-modeset"}),
    ("ngx", C.NGX, {"libnvidia-ngx"}, set(), set(), {"/dev/nvidiactl"}),
    ("none", C(0), set(), set(), set(), {"/dev/nvidiactl"}),
]


@pytest.mark.parametrize(("caps", "libs", "bins", "ipc", "nodes"),
                         [m[1:] for m in MATRIX], ids=[m[0] for m in MATRIX])
def test_capability_matrix(caps: C, libs: set[str], bins: set[str], ipc: set[str],
                           nodes: set[str]) -> None:
    plan = make_plan(caps, devices="")
    assert basenames(plan, "library") == libs
    assert {t.rsplit("/", 1)[1] for t in targets(plan, Bind, "binary")} == bins
    assert set(targets(plan, Bind, "ipc")) == ipc
    assert set(targets(plan, Bind, "device")) == nodes
    # always: procfs view and firmware; the app profile only for graphics/display
    assert targets(plan, Tmpfs)[0] == "/proc/driver/nvidia"
    assert targets(plan, Bind, "firmware") == [f"/lib/firmware/nvidia/{VER}/gsp_ga10x.bin"]
    has_profile = "/etc/nvidia/nvidia-application-profiles-rc.d" in targets(plan, Tmpfs)
    assert has_profile == bool(caps & GRAPHICS_LIBS)
    assert not targets(plan, Bind, "library32")
    assert [(r.major, r.minor) for r in plan.device_rules] == [
        (b.rdev[0], b.rdev[1]) for b in plan.entries if isinstance(b, Bind) and b.rdev]


@pytest.mark.parametrize(("caps", "expected"), [
    (C.COMPAT32, set()),
    (C.COMPAT32 | C.COMPUTE, {"libcuda"}),
    (C.COMPAT32 | C.GRAPHICS, {"libGLX_nvidia"}),
    (C.COMPUTE, set()),
], ids=["compat32-alone", "compat32+compute", "compat32+graphics", "compute-no-compat32"])
def test_compat32_libraries(caps: C, expected: set[str]) -> None:
    plan = make_plan(caps)
    assert basenames(plan, "library32") == expected
    assert all(t.startswith(LIB32 + "/") for t in targets(plan, Bind, "library32"))


def test_flags_and_kinds_per_entry() -> None:
    plan = make_plan(ALL_CAPS, devices="0")
    by_what = {e.what: e for e in plan.entries if isinstance(e, Bind)}
    expected = {
        "library": (RO_LIB, SourceKind.FILE), "binary": (RO_LIB, SourceKind.FILE),
        "firmware": (RO_LIB, SourceKind.FILE), "device": (RO_DEV, SourceKind.DEVICE),
        "gpu device": (RO_DEV, SourceKind.DEVICE), "procfs gpu": (RO_PROC, SourceKind.DIRECTORY),
    }
    for what, (flags, kind) in expected.items():
        assert (by_what[what].flags, by_what[what].kind) == (flags, kind), what
    ipc = {e.target: e for e in plan.entries if isinstance(e, Bind) and e.what == "ipc"}
    assert ipc["/run/nvidia-persistenced/socket"].kind is SourceKind.SOCKET
    assert ipc["/tmp/nvidia-mps"].kind is SourceKind.DIRECTORY
    assert all(e.flags == RO_IPC for e in ipc.values())
    assert all(e.flags == RO_PROC for e in plan.entries if isinstance(e, Tmpfs))
    assert RO_LIB.names() == "ro,nosuid,nodev"
    assert MountFlag.NONE.names() == "rw"


def test_order_follows_libnvc() -> None:
    plan = make_plan(ALL_CAPS, devices="1")
    order = [e.what for e in plan.entries]
    firsts = ["procfs view", "procfs file", "procfs gpu", "application profiles",
              "application profile", "binary", "library", "library32", "special link",
              "soname link", "firmware", "ipc", "device", "gpu device"]
    assert [order.index(w) for w in firsts] == sorted(order.index(w) for w in firsts)
    assert plan.gpus == ("GPU-00000001",)
    assert [r.minor for r in plan.device_rules] == [255, 0, 1, 254, 1]


@pytest.mark.parametrize("layout", [DEBIAN, FEDORA,
                                    ContainerLayout("/usr/bin", "/usr/lib/aarch64-linux-gnu/",
                                                    "/var/empty")],
                         ids=["debian", "non-debian", "aarch64-trailing-slash"])
def test_libraries_flattened_into_layout(layout: ContainerLayout) -> None:
    vdpau = _lib("libvdpau_nvidia", C.VIDEO, LIB + "/vdpau")
    inv = inventory(libraries=(*inventory().libraries[:-1], vdpau))
    plan = make_plan(ALL_CAPS, inv=inv, layout=layout)
    libs_dir = layout.libs_dir.rstrip("/")
    assert f"{libs_dir}/libvdpau_nvidia.so.{VER}" in targets(plan, Bind, "library")
    assert all(t.startswith(libs_dir + "/") and "//" not in t
               for t in targets(plan, Bind, "library"))
    assert plan.ldconfig_dirs == (layout.libs_dir, layout.libs32_dir)


# -- symlinks -----------------------------------------------------------------------------
def test_special_and_soname_links() -> None:
    plan = make_plan(ALL_CAPS)
    links = {e.target: e.link for e in plan.entries if isinstance(e, Symlink)}
    assert links[f"{LIB}/libcuda.so"] == "libcuda.so.1"
    assert links[f"{LIB}/libGLX_indirect.so.0"] == f"libGLX_nvidia.so.{VER}"
    assert links[f"{LIB}/libnvidia-opticalflow.so"] == "libnvidia-opticalflow.so.1"
    assert links[f"{LIB}/libcuda.so.1"] == f"libcuda.so.{VER}"
    assert links[f"{LIB}/libnvidia-ml.so.1"] == f"libnvidia-ml.so.{VER}"
    assert links[f"{LIB}/libGLX_nvidia.so.0"] == f"libGLX_nvidia.so.{VER}"
    assert links[f"{LIB32}/libcuda.so.1"] == f"libcuda.so.{VER}"
    assert links[f"{LIB32}/libcuda.so"] == "libcuda.so.1"
    # one soname link per mounted library (16 + 2 libs32) plus 3 + 2 special links
    assert len(links) == len(LIBS) + 2 + 3 + 2


@pytest.mark.parametrize(("soname", "link"), [
    ("", None), (f"libcuda.so.{VER}", None), ("../../etc/passwd", None), ("..", None),
    ("libcuda.so.1", f"libcuda.so.{VER}"),
], ids=["unknown", "same-as-file", "slash", "dotdot", "normal"])
def test_soname_link_cases(soname: str, link: str | None) -> None:
    lib = records.replace(_lib("libcuda", COMPUTE_LIBS), soname=soname)
    plan = make_plan(C.COMPUTE, inv=inventory(libraries=(lib,)))
    links = {e.target: e.link for e in plan.entries if isinstance(e, Symlink)}
    assert links.pop(f"{LIB}/libcuda.so") == "libcuda.so.1"
    assert links == ({} if link is None else {f"{LIB}/libcuda.so.1": link})


def test_links_never_shadow_mounted_files() -> None:
    odd = DriverFile(FileKind.LIBRARY, f"{ROOT}{LIB}/libcuda.so", f"{LIB}/libcuda.so",
                     COMPUTE_LIBS, "libcuda.so.1")
    plan = make_plan(C.COMPUTE, inv=inventory(libraries=(_lib("libcuda", COMPUTE_LIBS), odd)))
    assert f"{LIB}/libcuda.so" in targets(plan, Bind)
    assert f"{LIB}/libcuda.so" not in targets(plan, Symlink)
    assert len(set(targets(plan, Symlink))) == len(targets(plan, Symlink))


# -- procfs and application profile -------------------------------------------------------
@pytest.mark.parametrize(("data", "expected"), [
    (b"ModifyDeviceFiles: 1\n", b"ModifyDeviceFiles: 0\n"),
    (b"A: 1\nModifyDeviceFiles: 1\nModifyDeviceFiles: 1\n",
     b"A: 1\nModifyDeviceFiles: 0\nModifyDeviceFiles: 1\n"),
    (b"ModifyDeviceFiles: 0\n", b"ModifyDeviceFiles: 0\n"),
    (b"", b""),
], ids=["rewrite", "first-only", "already-0", "empty"])
def test_params_rewrite(data: bytes, expected: bytes) -> None:
    assert rewrite_params(data) == expected


def test_procfs_view_entries() -> None:
    plan = make_plan(C.UTILITY, devices="1")
    procfs = [e for e in plan.entries if e.target.startswith("/proc/")]
    assert procfs[0] == Tmpfs("/proc/driver/nvidia", 0o555, RO_PROC, "procfs view")
    files = {e.target: e for e in procfs if isinstance(e, WriteFile)}
    assert list(files) == ["/proc/driver/nvidia/params", "/proc/driver/nvidia/version",
                           "/proc/driver/nvidia/registry"]
    assert b"ModifyDeviceFiles: 0" in files["/proc/driver/nvidia/params"].data
    assert files["/proc/driver/nvidia/registry"].mode == 0o644
    gpu_dirs = [e for e in procfs if isinstance(e, Bind)]
    assert [(e.source, e.target) for e in gpu_dirs] == [
        (f"{ROOT}/proc/driver/nvidia/gpus/00000000:08:00.0",
         "/proc/driver/nvidia/gpus/00000000:08:00.0")]


def test_procfs_gpu_dir_keeps_the_name_found() -> None:
    gpu = records.replace(_gpu(0), proc_dir=f"{ROOT}/proc/driver/nvidia/gpus/0000:07:00.0")
    plan = make_plan(C.UTILITY, devices="0", inv=inventory(gpus=(gpu,)))
    assert "/proc/driver/nvidia/gpus/0000:07:00.0" in targets(plan, Bind, "procfs gpu")


def test_procfs_gpu_dir_missing_is_an_error() -> None:
    gpu = records.replace(_gpu(0), proc_dir="")
    with pytest.raises(DriverError, match=r"^mount procfs gpu /proc/driver/nvidia/gpus/0000"):
        make_plan(C.UTILITY, devices="0", inv=inventory(gpus=(gpu,)))
    assert make_plan(C.UTILITY, devices="", inv=inventory(gpus=(gpu,))).gpus == ()


def test_app_profile_bytes_exact() -> None:
    assert app_profile_bytes(0x9) == (
        b'{ "profiles": [{"name": "_container_", "settings": ["EGLVisibleDGPUDevices", 0x9]}],'
        b' "rules": [{"pattern": [], "profile": "_container_"}]}')


@pytest.mark.parametrize(("minors", "mask", "warned"), [
    ((0,), 0x1, False), ((0, 3), 0x9, False), ((63,), 1 << 63, False),
    ((2, 64), 0x4, True), ((64,), None, True),
], ids=["one", "or-of-bits", "minor-63", "minor-64-skipped", "only-minor-64"])
def test_app_profile_mask(minors: tuple[int, ...], mask: int | None, warned: bool) -> None:
    gpus = tuple(_gpu(i, minor=m) for i, m in enumerate(minors))
    plan = make_plan(C.GRAPHICS, inv=inventory(gpus=gpus))
    files = [e for e in plan.entries if isinstance(e, WriteFile) and "profile" in e.what]
    assert [f.data for f in files] == ([] if mask is None else [app_profile_bytes(mask)])
    assert all(f.mode == 0o555 for f in files)
    assert any("EGLVisibleDGPUDevices" in w for w in plan.warnings) == warned


# -- MIG ----------------------------------------------------------------------------------
def _mig_inventory() -> DriverInventory:
    gpus = (_gpu(0, migs=2), _gpu(1, minor=10, migs=1), _gpu(2))
    minors = (("config", 1), ("monitor", 2), ("gpu0/gi1/access", 21), ("gpu0/gi1/ci0/access", 22),
              ("gpu1/gi1/access", 31), ("gpu10/gi1/access", 41))
    return inventory(gpus=gpus, mig_minors=minors,
                     mig_config_cap=_node("/dev/nvidia-caps/nvidia-cap1", 237, 1),
                     mig_monitor_cap=_node("/dev/nvidia-caps/nvidia-cap2", 237, 2))


def test_mig_device_selection_adds_parent_and_caps() -> None:
    inv = _mig_inventory()
    plan = make_plan(C.UTILITY, devices="MIG-0-1", inv=inv)
    assert plan.gpus == ("GPU-00000000",)
    mig = inv.gpus[0].mig_devices[1]
    access = [(e.source, e.target) for e in plan.entries if e.what == "mig access"]
    assert access == [(ROOT + mig.gi_access, mig.gi_access), (ROOT + mig.ci_access, mig.ci_access)]
    assert targets(plan, Bind, "mig device") == [
        "/dev/nvidia-caps/nvidia-cap3", "/dev/nvidia-caps/nvidia-cap4"]
    assert [(r.major, r.minor) for r in plan.device_rules][-3:] == [(195, 0), (237, 3), (237, 4)]


def test_mig_without_caps_major_binds_no_cap_nodes() -> None:
    plan = make_plan(C.UTILITY, devices="0:0", inv=records.replace(_mig_inventory(),
                                                                        caps_major=None))
    assert len(targets(plan, Bind, "mig access")) == 2
    assert not targets(plan, Bind, "mig device")
    assert all(r.major != 237 for r in plan.device_rules)


@pytest.mark.parametrize(("config", "monitor", "rules"), [
    # gpu1/... belongs to no GPU (GPU 1 has minor 10): only gpu0/ and gpu10/ lines count
    ("all", None, [1, 21, 22, 41]),
    (None, "all", [2, 21, 22, 41]),
    ("all", "all", [1, 2, 21, 22, 41]),
], ids=["config", "monitor", "both"])
def test_mig_all(config: str | None, monitor: str | None, rules: list[int]) -> None:
    inv = _mig_inventory()
    selection = select_devices(inv.gpus, "all", mig_config=config, mig_monitor=monitor)
    plan = plan_mounts(inv, selection, C.UTILITY, DEBIAN, PlanOptions())
    caps = [e for e in plan.entries if isinstance(e, Bind) and e.what.startswith("mig caps")]
    assert [(e.target, e.flags) for e in caps] == [
        ("/proc/driver/nvidia/capabilities", RO_PROC),
        ("/dev/nvidia-caps", MountFlag.RDONLY | MountFlag.NOSUID | MountFlag.NOEXEC)]
    assert caps[0].source == f"{ROOT}/proc/driver/nvidia/capabilities"
    assert caps[1].source == f"{ROOT}/dev/nvidia-caps"
    assert not targets(plan, Bind, "mig access")
    assert sorted(r.minor for r in plan.device_rules if r.major == 237) == rules


def test_mig_all_only_for_mig_capable_gpus() -> None:
    inv = _mig_inventory()
    selection = Selection(gpus=(inv.gpus[2],), mig_config=True)
    plan = plan_mounts(inv, selection, C.UTILITY, DEBIAN, PlanOptions())
    assert [(r.major, r.minor) for r in plan.device_rules if r.major == 237] == [(237, 1)]


# -- IMEX ---------------------------------------------------------------------------------
def test_imex_channels() -> None:
    channels = tuple(_node(f"/dev/nvidia-caps-imex-channels/channel{n}", 234, n) for n in (0, 5))
    plan = make_plan(C.UTILITY, devices="", inv=inventory(imex_channels=channels),
                     imex_channels=(5,))
    assert targets(plan, Bind, "imex channel") == ["/dev/nvidia-caps-imex-channels/channel5"]
    assert (234, 5) in [(r.major, r.minor) for r in plan.device_rules]
    with pytest.raises(SelectionError, match=r"^missing IMEX channel 3: "):
        make_plan(C.UTILITY, devices="", inv=inventory(imex_channels=channels),
                  imex_channels=(3,))


# -- CUDA forward compat ------------------------------------------------------------------
COMPAT = "/usr/local/cuda/compat"


@pytest.mark.parametrize(("driver", "libs", "mode", "caps", "dirs"), [
    ("550.54.15", ("libcuda.so.560.28.03", "libcuda.so.1"), CompatMode.LDCONFIG, C.COMPUTE,
     (COMPAT,)),
    ("550.54.15", ("libcuda.so.550.54.15",), CompatMode.LDCONFIG, C.COMPUTE, ()),
    ("550.54.15", ("libcuda.so.535.104.05",), CompatMode.LDCONFIG, C.COMPUTE, ()),
    ("1000.1.2", ("libcuda.so.999.1",), CompatMode.LDCONFIG, C.COMPUTE, ()),
    ("999.1", ("libcuda.so.1000.1",), CompatMode.LDCONFIG, C.COMPUTE, (COMPAT,)),
    ("550.54.15", ("libcuda.so.560.28.03",), CompatMode.MOUNT, C.COMPUTE, (COMPAT,)),
    ("550.54.15", ("libcuda.so.560.28.03",), CompatMode.DISABLED, C.COMPUTE, ()),
    ("550.54.15", ("libcuda.so.560.28.03",), CompatMode.LDCONFIG, C.VIDEO, (COMPAT,)),
    ("550.54.15", ("libcuda.so.560.28.03",), CompatMode.LDCONFIG, C.UTILITY, ()),
    ("550.54.15", ("libcuda.so",), CompatMode.LDCONFIG, C.COMPUTE, ()),
], ids=["newer", "same", "older", "lexical-quirk-fixed", "numeric-newer", "mount-as-ldconfig",
        "disabled", "video", "no-compute", "no-version"])
def test_compat_rules(driver: str, libs: tuple[str, ...], mode: CompatMode, caps: C,
                      dirs: tuple[str, ...]) -> None:
    layout = records.replace(DEBIAN, cuda_compat_libs=tuple(f"{COMPAT}/{n}" for n in libs))
    inv = inventory(driver_version=driver)
    assert compat_dirs(inv, caps, layout, PlanOptions(compat_mode=mode)) == dirs
    plan = make_plan(caps, inv=inv, layout=layout, compat_mode=mode)
    assert plan.ldconfig_dirs == (*dirs, LIB, LIB32)
    assert not any(COMPAT in e.target for e in plan.entries)  # never mounted


# -- whole-plan properties ----------------------------------------------------------------
def test_deterministic_unique_and_no_wildcards() -> None:
    inv = _mig_inventory()
    first, second = make_plan(inv=inv), make_plan(inv=inv)
    assert first == second
    all_targets = [e.target for e in first.entries]
    assert len(all_targets) == len(set(all_targets))
    pairs = [(r.major, r.minor) for r in first.device_rules]
    assert len(pairs) == len(set(pairs))
    assert all(r.access == "rw" and r.major >= 0 and r.minor >= 0 for r in first.device_rules)
    assert all(e.what for e in first.entries)


def test_no_cgroups_plans_no_rules() -> None:
    assert make_plan(no_cgroups=True).device_rules == ()


def test_duplicate_target_is_planned_once_with_a_warning() -> None:
    dup = _lib("libcuda", COMPUTE_LIBS, LIB + "/other")
    plan = make_plan(C.COMPUTE, inv=inventory(libraries=(_lib("libcuda", COMPUTE_LIBS), dup)))
    assert targets(plan, Bind, "library") == [f"{LIB}/libcuda.so.{VER}"]
    assert any("already planned" in w for w in plan.warnings)
