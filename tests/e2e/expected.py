"""What a GPU container must see, computed from the simulated driver's own records.

An oracle independent of the engine's planner: it follows libnvc-spec §1 (capability groups,
binaries, IPC, device nodes, firmware, procfs) and §2.6/§3 (SONAME and extra links) over the
`SimRoot` inventory, and returns container paths.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from nvhook.sim import SimGpu, SimRoot

ALL_CAPS = ("compat32", "compute", "display", "graphics", "ngx", "utility", "video")
LIB_GROUPS = {
    "utility": {"utility"},
    "compute": {"compute"},
    "video": {"video", "compute"},  # VIDEO_LIBS | COMPUTE_LIBS
    "graphics": {"graphics", "graphics-glvnd"},  # GLVND by default; no compat list
    "display": {"graphics", "graphics-glvnd"},  # DISPLAY | GRAPHICS_LIBS
    "ngx": {"ngx"},
    "compat32": set(),
}
EXTRA_LINKS = {  # libnvc-spec §2.6: mounted basename prefix -> (link name, target or None)
    "libcuda.so": ("libcuda.so", "libcuda.so.1"),
    "libGLX_nvidia.so": ("libGLX_indirect.so.0", None),  # None: the mounted basename
    "libnvidia-opticalflow.so": ("libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"),
}
APP_PROFILE_DIR = "/etc/nvidia/nvidia-application-profiles-rc.d"
# The test rootfs is merged-/usr (bin, sbin, lib, lib64 are links into /usr; var/run -> /run):
# the kernel reports mount points by their resolved path.
ROOTFS_LINKS = (("/lib/", "/usr/lib/"), ("/lib64/", "/usr/lib64/"), ("/bin/", "/usr/bin/"),
                ("/sbin/", "/usr/sbin/"), ("/var/run/", "/run/"))


def canonical(path: str) -> str:
    """`path` with the test rootfs's top-level links resolved."""
    for link, target in ROOTFS_LINKS:
        if path.startswith(link):
            return target + path[len(link):]
    return path


def parse_caps(value: str) -> frozenset[str]:
    names = {c.strip() for c in value.split(",") if c.strip()}
    return frozenset(ALL_CAPS) if "all" in names else frozenset(names)


@dataclass(frozen=True)
class Expected:
    libs: frozenset[str]
    bins: frozenset[str]
    ipc: frozenset[str]
    firmware: frozenset[str]
    devices: frozenset[str]
    proc: frozenset[str]
    app_profile: frozenset[str]
    links: dict[str, str]  # container path -> link text

    def mount_targets(self) -> set[str]:
        return set(self.libs | self.bins | self.ipc | self.firmware | self.devices | self.proc
                   | self.app_profile)


def expected_exposure(sim: SimRoot, caps: frozenset[str], gpus: list[SimGpu], *,
                      libs_dir: str, libs32_dir: str) -> Expected:
    groups = set().union(*(LIB_GROUPS[c] for c in caps)) if caps else set()
    libs, links = _libraries(sim, groups, libs_dir, "libraries")
    if "compat32" in caps:
        libs32, links32 = _libraries(sim, groups, libs32_dir, "libraries32")
        libs, links = libs | libs32, {**links, **links32}
    compute_libs = bool({"compute", "video"} & caps)
    bins = {f.path_rel for f in sim.binaries
            if (f.group == "utility" and "utility" in caps)
            or (f.group == "compute" and "compute" in caps)}
    ipc = {f.path_rel for f in sim.ipc
           if ("utility" in caps and f.path_rel.endswith("/socket"))
           or (compute_libs and f.path_rel == "/tmp/nvidia-mps")}
    devices = {"/dev/nvidiactl"} | {f"/dev/nvidia{g.minor}" for g in gpus}
    if compute_libs:
        devices |= {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    if "display" in caps:
        devices.add("/dev/nvidia-modeset")
    proc = {"/proc/driver/nvidia"} | {f"/proc/driver/nvidia/gpus/{g.proc_bus_id}" for g in gpus}
    profile = {APP_PROFILE_DIR} if {"graphics", "display"} & caps else set()
    def canon(paths: set[str]) -> frozenset[str]:
        return frozenset(canonical(p) for p in paths)

    return Expected(canon(libs), canon(bins), canon(ipc), canon({f.path_rel for f in sim.firmware}),
                    canon(devices), canon(proc), canon(profile),
                    {canonical(k): v for k, v in links.items()})


def _libraries(sim: SimRoot, groups: set[str], libs_dir: str,
               attr: str) -> tuple[set[str], dict[str, str]]:
    files: set[str] = set()
    links: dict[str, str] = {}
    for lib in getattr(sim, attr):
        if lib.group not in groups:
            continue
        base = os.path.basename(lib.path)
        files.add(f"{libs_dir}/{base}")
        if lib.soname and lib.soname != base:
            links[f"{libs_dir}/{lib.soname}"] = base
        for prefix, (name, target) in EXTRA_LINKS.items():
            if base.startswith(prefix):
                links[f"{libs_dir}/{name}"] = target or base
    return files, links


def selected_gpus(sim: SimRoot, visible: str) -> list[SimGpu]:
    """The GPUs NVIDIA_VISIBLE_DEVICES=`visible` names (indices or UUIDs; all; none)."""
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if not ids or "void" in ids or ids[0] == "none":
        return []
    if "all" in ids:
        return list(sim.gpus)
    by_key = {str(g.index): g for g in sim.gpus} | {g.uuid: g for g in sim.gpus}
    return [by_key[i] for i in ids]
