"""Building a simulated driver root: `create_sim_root(path, spec) -> SimRoot`.

Effects: writes only under `path` (and a temporary build dir). Libraries, binaries,
firmware, ld.so.conf/ld.so.cache (the system `ldconfig -r`), /dev nodes (mknod), the proc
tree, IPC sockets, `config.toml` for nvhook and `nvsim.json` describing the result.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from nvhook.dev.sim import catalog, devices, gated, graphics, procfs, tegra, wsl
from nvhook.dev.sim.artifacts import install_artifacts, obtain_artifacts
from nvhook.dev.sim.records import SimFile, SimGpu, SimRoot, SimSpec
from nvhook.dev.sim.topology import build_gpus
from nvhook.errors import SimError
from nvmount.records import asdict

log = logging.getLogger(__name__)

_VERSION_RE = re.compile(r"^\d+(\.\d+){1,2}$")
_CUDA_RE = re.compile(r"^(\d+)\.(\d)$")
MARKER = "nvsim.json"


def cuda_version_int(text: str) -> int:
    """"12.4" -> 12040, as cuDriverGetVersion and NVML report it."""
    match = _CUDA_RE.match(text)
    if match is None:
        raise SimError(f"simulate cuda version {text!r}: not MAJOR.MINOR (e.g. 12.4)")
    return int(match.group(1)) * 1000 + int(match.group(2)) * 10


def create_sim_root(path: str | os.PathLike[str], spec: SimSpec, force: bool = False,
                    cache_dir: str | os.PathLike[str] | None = None) -> SimRoot:
    """Build a simulated driver root for `spec` at `path` (created; must be empty unless
    `force`, which replaces an earlier simulated root there). `cache_dir` keeps compiled
    libraries and binaries for reuse by later roots."""
    if not _VERSION_RE.match(spec.driver_version):
        raise SimError(f"simulate driver version {spec.driver_version!r}: not a version "
                       "(use digits and dots, e.g. 550.54.15)")
    cuda = cuda_version_int(spec.cuda_version)
    gpus = build_gpus(spec)
    root = Path(path).absolute()
    _prepare(root, force)
    try:
        with tempfile.TemporaryDirectory(prefix="nvsim-build-") as work:
            stage = obtain_artifacts(spec.driver_version, cuda, spec.compat32,
                                     Path(cache_dir) if cache_dir is not None else None,
                                     Path(work))
            with32 = install_artifacts(stage, root)
        libs = _library_files(root, spec.driver_version, m32=False)
        libs32 = _library_files(root, spec.driver_version, m32=True) if with32 else ()
        binaries = tuple(SimFile(path=f"{root}/usr/bin/{name}", path_rel=f"/usr/bin/{name}",
                                 group=group, name=name) for name, group in catalog.BINARIES)
        _run_ldconfig(root, with32)
        firmware = _write_firmware(root, spec.driver_version)
        nodes, real_nodes = devices.make_nodes(root, spec, gpus)
        procfs.write_proc(root, spec, gpus)
        ipc = devices.make_ipc(root) if spec.ipc else ()
        graphics.write_graphics(root, spec.driver_version)  # after ldconfig: not cached
        graphics.make_dri(root, gpus, real_nodes)
        if spec.gated:
            gated.make_gated(root, real_nodes)
        if spec.tegra:
            tegra.make_tegra(root, spec.driver_version, real_nodes)
        if spec.wsl:
            wsl.make_wsl(root, spec.driver_version, real_nodes)
        _make_layout_links(root)
    except OSError as err:
        raise SimError(f"build simulated driver in {root}: {err.strerror or err} "
                       f"({err.filename or 'check permissions and free space'})") from err
    sim = SimRoot(
        path=str(root), spec=spec, gpus=gpus, libraries=libs, libraries32=libs32,
        binaries=binaries, firmware=firmware, ipc=ipc, device_nodes=nodes,
        real_device_nodes=real_nodes, lib_dir=str(root) + catalog.LIB_DIR,
        lib32_dir=str(root) + catalog.LIB32_DIR if libs32 else "",
        config_path=str(root / "config.toml"), proc_root=str(root / "proc"),
        ldcache_path=str(root / "etc/ld.so.cache"), majors=procfs.MAJORS,
    )
    _write_config(sim)
    (root / MARKER).write_text(json.dumps(sim_to_json(sim), indent=2) + "\n")
    log.info("simulated driver %s with %d gpus built in %s", spec.driver_version, len(gpus), root)
    return sim


def _prepare(root: Path, force: bool) -> None:
    if root.exists() and any(root.iterdir()):
        if not force:
            raise SimError(f"create simulated driver in {root}: directory is not empty "
                           "(pass --force to replace an earlier simulated root)")
        if not (root / MARKER).is_file():
            raise SimError(f"replace {root}: not a simulated driver root (no {MARKER}; "
                           "refusing to delete it, pick an empty directory)")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)


def _library_files(root: Path, version: str, m32: bool) -> tuple[SimFile, ...]:
    """The installed libraries' records; adds the installer's unversioned dev links."""
    lib_dir_rel = catalog.LIB32_DIR if m32 else catalog.LIB_DIR
    lib_dir = root / lib_dir_rel.lstrip("/")
    files = []
    for lib in catalog.LIBRARIES:
        if m32 and not lib.has32:
            continue
        name = lib.file_name(version)
        if lib.dev_link:  # to the file itself: ldconfig then lists it (libcuda.so => ...)
            (lib_dir / lib.name).symlink_to(name)
        files.append(SimFile(path=str(lib_dir / name), path_rel=f"{lib_dir_rel}/{name}",
                             group=lib.group, name=lib.name, soname=lib.soname(version)))
    return tuple(files)


def _run_ldconfig(root: Path, with32: bool) -> None:
    """etc/ld.so.conf and the system ldconfig's cache (root-relative paths, SONAME links)."""
    dirs = [catalog.LIB_DIR, *([catalog.LIB32_DIR] if with32 else [])]
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "ld.so.conf").write_text("".join(f"{d}\n" for d in dirs))
    ldconfig = shutil.which("ldconfig", path=os.pathsep.join(
        [os.environ.get("PATH", ""), "/sbin", "/usr/sbin"]))
    if ldconfig is None:
        raise SimError("build ld.so.cache: ldconfig not found (install libc-bin)")
    proc = subprocess.run([ldconfig, "-r", str(root)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0 or not (etc / "ld.so.cache").is_file():
        raise SimError(f"build ld.so.cache: {ldconfig} -r {root} exited with "
                       f"{proc.returncode}: {proc.stderr.strip()} (is the directory writable?)")


def _write_firmware(root: Path, version: str) -> tuple[SimFile, ...]:
    rel_dir = f"/lib/firmware/nvidia/{version}"
    fw_dir = root / rel_dir.lstrip("/")
    fw_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for name in catalog.FIRMWARE:
        (fw_dir / name).write_bytes(f"NVSIM GSP firmware {name} {version}\n".encode())
        files.append(SimFile(path=str(fw_dir / name), path_rel=f"{rel_dir}/{name}",
                             group="firmware", name=name))
    return tuple(files)


def _make_layout_links(root: Path) -> None:
    """var/run -> ../run, as on Debian: the engine looks up /var/run/nvidia-persistenced."""
    (root / "var").mkdir(exist_ok=True)
    (root / "run").mkdir(exist_ok=True)
    if not (root / "var/run").is_symlink():
        (root / "var/run").symlink_to("../run")


def _toml_str(value: str) -> str:
    return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes


def _write_config(sim: SimRoot) -> None:
    Path(sim.config_path).write_text(
        f"# nvhook configuration for the simulated driver in {sim.path} (nvhook sim create)\n"
        "[nvidia-container-cli]\n"
        f"root = {_toml_str(sim.path)}\n"
        f"ldcache = {_toml_str('/etc/ld.so.cache')}\n"
        "\n[nvhook]\n"
        f"proc-root = {_toml_str(sim.proc_root)}\n"
        f"sys-root = {_toml_str(sim.path + '/sys')}\n"
        "sim-procfs = true  # the hook mounts the container's /proc/driver (no kernel module)\n"
        + ("\n[nvidia-container-runtime]\nmode = \"csv\"  # a Jetson: the L4T mount specs\n"
           f"modes.csv.mount-spec-path = {_toml_str(sim.path + tegra.SPEC_DIR)}\n"
           if sim.spec.tegra else "")
    )


def sim_to_json(sim: SimRoot) -> dict[str, object]:
    """The nvsim.json document: the whole SimRoot plus derived, comparable values."""
    data = asdict(sim)
    data["driver_version"] = sim.driver_version
    data["cuda_version"] = sim.cuda_version
    data["gpus"] = [_gpu_json(g) for g in sim.gpus]
    data["majors"] = dict(sim.majors)
    return data


def _gpu_json(gpu: SimGpu) -> dict[str, object]:
    data = asdict(gpu)
    data["nvml_bus_id"] = gpu.nvml_bus_id
    return data
