"""Real NVIDIA driver files (Debian's 535 packages, tests/fixtures/realdriver.py) in runc
containers, on the Debian, flat and lib64 layouts, compared with what NVIDIA's 1.17.8 hook and
CLI give on the same roots (recorded under tests/data/realdriver/, see
tests/fixtures/realdriver_observe.py): `list`, the container's mounts, links and device nodes
per capability set, `ldconfig -p` and `ld.so --list` of real NVIDIA files, for both ldcache
modes; the two modes and an ldconfig run inside the container give the same `ldconfig -p`.
"""

from __future__ import annotations

import os
import posixpath
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.dev.demo.driver import nvhook_hook_entry
from tests.fixtures.containers import ContainerFactory, RootfsCache
from tests.fixtures.realdriver import RealRoot
from tests.fixtures.realdriver_observe import CAPSETS, env_for, expected, observe, raw, sim_step

pytestmark = [pytest.mark.e2e, pytest.mark.root]

LAYOUTS = ("debian", "flat", "lib64")
MODES = ("write", "ldconfig")
# What nvhook gives beyond NVIDIA's legacy hook, each for a reason (docs/drivers.md): the
# graphics files of NVIDIA's current toolkit, the VDPAU driver where libvdpau loads it, and
# the ld.so.cache entries of those libraries.
EXTRA_OK = (
    "mount /etc/vulkan/", "mount /usr/share/", "mount /etc/OpenCL/", "mount /dev/dri/",
    "dev /dev/dri/", "link /dev/dri/by-path/", "mount /usr/lib/xorg/modules/",
    "link /usr/lib/xorg/modules/extensions/libglxserver_nvidia.so ",
    "mount /usr/lib/x86_64-linux-gnu/libnvidia-egl-", "mount /usr/lib/x86_64-linux-gnu/vdpau/",
    "link /usr/lib/x86_64-linux-gnu/vdpau/", "link /usr/lib/x86_64-linux-gnu/gbm/",
    "mount /usr/lib/x86_64-linux-gnu/libnvidia-vulkan-producer.so.",
    "link /usr/lib/x86_64-linux-gnu/libnvidia-vulkan-producer.so ",
    "link /usr/lib/x86_64-linux-gnu/libnvidia-egl-", "ldconfig libnvidia-egl-",
    "ldconfig libnvidia-vulkan-producer.so", "mount /dev/nvidia-modeset",
    "dev /dev/nvidia-modeset", "mount /etc/X11/", "mount /usr/lib64/xorg/modules/",
    "link /usr/lib64/xorg/modules/extensions/libglxserver_nvidia.so ",
    # GBM loads the allocator (gbm/nvidia-drm_gbm.so links to it): graphics gets it too
    "mount /usr/lib/x86_64-linux-gnu/libnvidia-allocator.so.",
    "link /usr/lib/x86_64-linux-gnu/libnvidia-allocator.so.1 ",
    "ldconfig libnvidia-allocator.so.1 ",
    # NVIDIA's ldconfig runs before the SONAME links exist, so the development links
    # libcuda.so -> libcuda.so.1 dangle then and stay out of its cache; an ldconfig run later
    # in the container lists them, as nvhook's cache does (a deviation, docs/hook.md)
    "ldconfig libcuda.so (", "ldconfig libnvidia-opticalflow.so (",
)


@pytest.fixture(scope="module")
def rigs(real_roots: dict[str, RealRoot], tmp_path_factory: pytest.TempPathFactory,
         rootfs_cache: RootfsCache, runc_default: object,
         hook_launcher: Path) -> dict[tuple[str, str], tuple[ContainerFactory, ContainerFactory]]:
    """(root, ldcache mode) -> (nvhook's containers, containers with only the sim step)."""
    out = {}
    for name, root in real_roots.items():
        step = sim_step(root, hook_launcher)
        for mode in MODES:
            config = root.config if mode == "write" else root.path / "config-ldconfig.toml"
            work = tmp_path_factory.mktemp(f"real-{name}-{mode}")
            out[(name, mode)] = (
                ContainerFactory(work / "gpu", rootfs_cache, runc_default,  # type: ignore[arg-type]
                                 (step, nvhook_hook_entry(hook_launcher, config)), tag="real"),
                ContainerFactory(work / "base", rootfs_cache, runc_default,  # type: ignore[arg-type]
                                 (step,), tag="real"))
    return out


@pytest.fixture(scope="module")
def baselines() -> dict[tuple[str, str], dict[str, set[str]]]:
    return {}


def _compare(got: list[str], want: list[str]) -> tuple[list[str], list[str]]:
    """(NVIDIA's lines nvhook lacks, nvhook's lines beyond NVIDIA's that no rule explains);
    ldconfig and ld.so lines compare the file each name resolves to (see _file_of)."""
    mine, theirs = set(map(_file_of, got)), set(map(_file_of, want))
    missing = sorted(x for x in theirs - mine)
    extra = sorted(x for x in mine - theirs if not x.startswith(EXTRA_OK))
    return missing, extra


def _file_of(line: str) -> str:
    """ldconfig/ldso lines name a path; NVIDIA's ldconfig mode lists /usr/lib/..., an
    in-container ldconfig (and nvhook) /lib/... on a merged-/usr image: the same file."""
    if line.startswith(("ldconfig ", "ldso ")) and "=> " in line:
        head, path = line.rsplit("=> ", 1)
        return f"{head}=> {posixpath.basename(path)}"
    return line


@pytest.mark.parametrize("layout", LAYOUTS)
def test_list_as_nvidia_prints_it(real_roots: dict[str, RealRoot], layout: str) -> None:
    root = real_roots[layout]
    proc = subprocess.run([sys.executable, "-m", "nvhook", "--config", str(root.config),
                           "list", "-d", "all", "-l", "-b", "-i", "-f", "--compat32"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.replace(root.version, "<V>").splitlines() == expected(root,
                                                                            "nvidia-list")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("capset", list(CAPSETS))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_container_as_nvidia_gives_it(rigs: dict, baselines: dict, real_roots: dict[str, RealRoot],
                                      layout: str, capset: str, mode: str) -> None:
    gpu, base = rigs[(layout, mode)]
    if (layout, mode) not in baselines:  # a container with only the sim step, once
        baselines[(layout, mode)] = raw(base, ())
    got = observe(gpu, base, real_roots[layout], env_for(capset), baselines[(layout, mode)])
    missing, extra = _compare(got, expected(real_roots[layout], f"nvidia-{capset}"))
    assert (missing, extra) == ([], [])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ldcache_modes_and_ldconfig_agree(rigs: dict, layout: str) -> None:
    """Both modes list every library where an ldconfig run in the container puts it."""
    env = env_for("all")
    written = raw(rigs[(layout, "write")][0], env, _multiarch)["ldconfig"]
    by_ldconfig = raw(rigs[(layout, "ldconfig")][0], env, _multiarch)["ldconfig"]
    gpu = rigs[(layout, "write")][0]
    after = gpu.sh("/sbin/ldconfig && /sbin/ldconfig -p", env=env, prepare=_multiarch).stdout
    inside = {x.strip() for x in after.splitlines() if "=>" in x}
    assert written == by_ldconfig == inside
    assert any("libcuda.so.1 " in x for x in inside)


def _multiarch(rootfs: Path) -> None:
    """An image with i386 multiarch (libc6:i386's ld.so.conf.d file): 32-bit libraries are
    in the cache of an ldconfig run inside it too."""
    (rootfs / "etc/ld.so.conf.d/i386-linux-gnu.conf").write_text(
        "/usr/local/lib/i386-linux-gnu\n/lib/i386-linux-gnu\n/usr/lib/i386-linux-gnu\n")


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"),
                    reason="this host has an NVIDIA kernel module: the path needs none")
def test_real_nvml_without_kernel_module(real_roots: dict[str, RealRoot]) -> None:
    """The real libnvidia-ml, loaded by nvhook's NVML child (no capabilities): one clean
    line, and no /dev/nvidia* node appears on the host (the real NVML mknods them as root)."""
    before = sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))
    root = real_roots["debian-nvml"]
    proc = subprocess.run([sys.executable, "-m", "nvhook", "--config", str(root.config), "info",
                           "--fresh"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("nvml nvmlInit_v2 failed: Driver Not Loaded")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(n for n in os.listdir("/dev") if n.startswith("nvidia")) == before


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cdi_paths_are_the_legacy_plans(real_roots: dict[str, RealRoot], layout: str,
                                        tmp_path: Path) -> None:
    """Issue 20 item 7 on real packaging layouts: `nvhook cdi generate`'s container paths, and
    what its hook writes, equal the legacy plan's for every device and `all`, for an image of
    the layout the spec was made for (a spec cannot know the image; tests/unit/test_cdi.py
    does the same on the simulated driver's variants)."""
    from nvhook.cdi.generate import spec_layout
    from nvhook.config.load import load_config
    from nvmount.capabilities import DriverCapability as Cap
    from tests.unit.test_cdi import (
        image_like,
        legacy_plan,
        plan_paths,
        requests,
        spec_of,
        spec_side,
        validate,
    )

    config = load_config(str(real_roots[layout].config), {})
    spec = spec_of(config)
    validate(spec)
    rootfs = image_like(config.cli.root or "/", tmp_path)
    for name, devices in requests(spec):
        legacy = legacy_plan(config, devices, rootfs)
        ours, hook = spec_side(spec, [name], rootfs)
        assert ours == plan_paths(legacy), (layout, name, sorted(ours ^ plan_paths(legacy)))
        assert hook.ldconfig_dirs == legacy.ldconfig_dirs, name
        assert hook.ldcache_entries == legacy.ldcache_entries, name
    # the requests' capabilities are `all` (compat32 among them), not compute,utility: the
    # 32-bit links are compared too (issue 31)
    assert Cap.COMPAT32 in config.supported_driver_capabilities
    libs32 = spec_layout(config.cli.root or "/").libs32_dir
    links32 = {p for p in ours if p[0] == "link" and p[1].startswith(libs32 + "/")}
    assert ("link", f"{libs32}/libcuda.so.1", f"libcuda.so.{real_roots[layout].version}") \
        in links32 and len(links32) == 17, sorted(links32)


def test_nvml_child_cannot_mknod(tmp_path: Path) -> None:
    """What the real NVML would do as root (mknod /dev/nvidiactl) fails in the child nvhook
    loads it in: after `_unprivileged` it has no CAP_MKNOD."""
    import stat

    from nvmount.discover.nvml_worker import _unprivileged

    target = tmp_path / "nvidiactl"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 3
        try:
            _unprivileged()
            os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(195, 255))
            code = 0
        except PermissionError:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1 and not target.exists()
    os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # the test itself may (root)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_graphics_and_video_files_found_on_every_layout(real_roots: dict[str, RealRoot],
                                                        layout: str) -> None:
    """The EGL platform libraries apart from the driver's (Debian's own packages), Debian's
    unversioned GLX module (under its versioned name), the VDPAU driver for <libs>/vdpau."""
    from nvmount.discover.driver import discover_driver
    from nvmount.discover.options import DiscoveryOptions

    root = real_roots[layout]
    inv = discover_driver(str(root.path), "/etc/ld.so.cache", str(root.path / "proc"),
                          options=DiscoveryOptions(sys_root=str(root.path / "sys")))
    found = {posixpath.basename(f.container_path): f for f in inv.graphics}
    v = root.version
    for name in ("libnvidia-egl-gbm.so.1.1.0", "libnvidia-egl-wayland.so.1.1.10",
                 f"libnvidia-vulkan-producer.so.{v}", f"libglxserver_nvidia.so.{v}",
                 "nvidia_drv.so", f"libvdpau_nvidia.so.{v}"):
        assert name in found, name
        assert os.path.isfile(found[name].host_path) and not os.path.islink(found[name].host_path)
    vdpau = found[f"libvdpau_nvidia.so.{v}"]
    assert vdpau.container_path.endswith(f"/vdpau/libvdpau_nvidia.so.{v}")
    assert found[f"libglxserver_nvidia.so.{v}"].container_path.startswith(
        "/usr/lib64/xorg/modules/extensions/" if layout == "lib64"
        else "/usr/lib/xorg/modules/extensions/")
    assert not any(w.startswith("missing xorg module") for w in inv.warnings)


@pytest.mark.parametrize("layout", ["flat", "lib64"])
def test_files_beyond_the_legacy_stack_are_in_nvidias_cdi_spec(
        rigs: dict, baselines: dict, real_roots: dict[str, RealRoot], layout: str) -> None:
    """What nvhook mounts beyond NVIDIA's legacy hook for `all` is what NVIDIA's own CDI spec
    (nvidia-ctk cdi generate 1.17.8, recorded) mounts, by file name: its graphics and video
    files. Not on Debian's layout, where that spec misses most of the driver (it looks for
    libraries only next to libcuda, in nvidia/current). The OpenCL vendor file is NVIDIA's
    current toolkit's (not 1.17.8's spec)."""
    root = real_roots[layout]
    gpu, base = rigs[(layout, "write")]
    if (layout, "write") not in baselines:
        baselines[(layout, "write")] = raw(base, ())
    got = observe(gpu, base, root, env_for("all"), baselines[(layout, "write")])
    legacy = set(expected(root, "nvidia-all"))
    cdi = {posixpath.basename(x.split(" ", 1)[1]) for x in expected(root, "nvidia-cdi")
           if x.startswith("mount ")}
    beyond = {posixpath.basename(x[6:]) for x in got
              if x.startswith("mount ") and x not in legacy and not x.startswith("mount /dev/")}
    assert beyond and beyond - {"nvidia.icd"} <= cdi, sorted(beyond - cdi)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cdi_container_is_the_legacy_container(rigs: dict, real_roots: dict[str, RealRoot],
                                               layout: str, hook_launcher: Path) -> None:
    """Issue 31 (compat32 under CDI): a runc container given the `all` device of
    `nvhook cdi generate`'s spec (its edits applied as the runtime wrapper applies them, its
    one hook the installed launcher) has the mounts, links, nodes, `ldconfig -p` and
    `ld.so --list` of the legacy hook's container for NVIDIA_DRIVER_CAPABILITIES=all: the
    32-bit libraries and their links included, in an image of the layout the spec was made
    for (a spec cannot know the image: Debian's multiarch image for the Debian and flat roots,
    a /usr/lib64 image for the lib64 root)."""
    from nvhook.cdi.generate import GenerateOptions, generate_spec, spec_layout
    from nvhook.cdi.resolve import apply_edits
    from nvhook.config.load import load_config
    from nvhook.dev.demo.rootfs import RootfsFlavor

    root = real_roots[layout]
    gpu, base = rigs[(layout, "write")]
    flavor = RootfsFlavor.NON_DEBIAN if layout == "lib64" else RootfsFlavor.GLIBC
    config = load_config(str(root.config), {})
    spec = generate_spec(config, GenerateOptions(hook_path=str(hook_launcher)))
    (device,) = [d for d in spec["devices"] if d["name"] == "all"]

    def edit(doc: dict) -> None:
        apply_edits(doc, spec["containerEdits"], "spec")
        apply_edits(doc, device["containerEdits"], "all")

    cdi = ContainerFactory(gpu.workdir.parent / "cdi", gpu.rootfs, gpu.runc, base.prestart,
                           tag="real")
    baseline = _raw(base, (), flavor, None)
    got = _lines(_raw(cdi, (), flavor, edit), baseline, root)
    want = _lines(_raw(gpu, env_for("all"), flavor, None), baseline, root)
    nodes = ("mount /dev/",)  # the runtime creates the spec's nodes; the hook binds them
    want = [x for x in want if not x.startswith(nodes)]
    got = [x for x in got if not x.startswith(nodes)]
    assert (sorted(set(want) - set(got)), sorted(set(got) - set(want))) == ([], [])
    libs32 = spec_layout(str(root.path)).libs32_dir
    assert f"link {libs32}/libcuda.so.1 -> libcuda.so.<V>" in got
    assert len([x for x in got if x.startswith(f"link {libs32}/lib")]) == 17, got


def _raw(factory: ContainerFactory, env: tuple[str, ...], flavor: object,
         edit: object) -> dict[str, set[str]]:
    from tests.fixtures.containers import Probe
    from tests.fixtures.realdriver_observe import _ADDR, PROBE

    p = Probe.parse(factory.sh(PROBE, env=env, timeout=120, flavor=flavor, edit_spec=edit))
    return {"mount": p.mount_targets(), "link": set(p["links"]), "dev": set(p["dev"]),
            "ldconfig": {x.strip() for x in p["ldconfig"] if "=>" in x},
            "ldso": {" ".join(_ADDR.sub("", x).split()) for x in p["ldso"] if "=>" in x}}


def _lines(got: dict[str, set[str]], baseline: dict[str, set[str]], root: RealRoot) -> list[str]:
    lines = [f"mount {t}" for t in got["mount"] - baseline["mount"]]
    lines += [f"link {x}" for x in got["link"] - baseline["link"]]
    lines += [f"{k} {x}" for k in ("dev", "ldconfig", "ldso") for x in got[k]]
    return sorted(x.replace(root.version, "<V>") for x in lines)
