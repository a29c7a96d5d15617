"""The wrapper's modes and its spec delivery (nvhook.runtime.modes, deliver, rootfs).

The delivery writes the plan of a simulated 8-GPU driver into a config.json document and the
rootfs of a bundle; the rootfs half is also run against hostile images (symlinks out of the
rootfs, a planted ld.so.cache link), which must never make it write outside the rootfs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from nvhook.config.model import config_from_document
from nvhook.dev.sim import SimRoot
from nvhook.errors import WrapperError
from nvhook.launch.runtime_log import RuntimeLog
from nvhook.runtime.bundle import open_bundle
from nvhook.runtime.modes import LEGACY, SPEC, delivery
from nvhook.runtime.rootfs import covered_by, write_rootfs
from nvhook.runtime.spec_delivery import PROFILE_FILE, deliver_spec, mount_destinations
from nvmount._libc import Libc
from nvmount.capabilities import DriverCapability as C
from nvmount.pipeline import plan_only
from nvmount.plan.types import MountPlan, Symlink
from nvmount.requests import EngineRequest
from nvmount.timing import PhaseTimer
from tests.fixtures.containers import RootfsCache

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="writes root-owned entries")


@pytest.mark.parametrize(("doc", "root", "want"), [
    ({}, True, SPEC),
    ({}, False, LEGACY),  # not root: a rootless runtime
    ({"nvidia-container-runtime": {"mode": "jit-cdi"}}, True, SPEC),
    ({"nvidia-container-runtime": {"mode": "legacy"}}, True, LEGACY),
    ({"nvidia-container-runtime": {"mode": "csv"}}, True, LEGACY),
    ({"nvhook": {"runtime-mode": "legacy"}}, True, LEGACY),
    ({"nvidia-container-runtime": {"mode": "legacy"}, "nvhook": {"runtime-mode": "spec"}},
     False, SPEC),
], ids=["auto", "auto-not-root", "jit-cdi", "legacy", "csv", "forced-legacy", "forced-spec"])
def test_delivery(doc: dict[str, object], root: bool, want: str) -> None:
    assert delivery(config_from_document(doc, "/c.toml"), root=root) == want


def test_delivery_refuses_cdi_mode_without_cdi_devices() -> None:
    config = config_from_document({"nvidia-container-runtime": {"mode": "cdi"}}, "/c.toml")
    with pytest.raises(WrapperError, match="names no CDI device"):
        delivery(config, root=True)


def test_auto_is_csv_on_tegra(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("# R36\n")
    config = config_from_document({"nvidia-container-cli": {"root": str(tmp_path)}}, "/c.toml")
    assert delivery(config, root=True) == LEGACY


def test_covered_by() -> None:
    mounts = frozenset({"/dev", "/etc/hosts", "/proc"})
    assert covered_by("/dev/dri/by-path/x", mounts) and covered_by("/etc/hosts", mounts)
    assert not covered_by("/etc/ld.so.cache", mounts)
    assert not covered_by("/usr/lib/x86_64-linux-gnu/libcuda.so.1", mounts)
    assert covered_by("/anything", frozenset({"/"}))


@pytest.fixture(scope="module")
def plan(sim_root: SimRoot, rootfs_cache: RootfsCache) -> MountPlan:
    from nvmount.requests import EngineOptions

    options = EngineOptions(root=sim_root.path, proc_root=sim_root.proc_root)
    request = EngineRequest(devices=("2",), capabilities=C.UTILITY | C.COMPUTE)
    made = plan_only(request, str(rootfs_cache.get()), options, Libc())
    assert made is not None
    return made


def _rootfs(rootfs_cache: RootfsCache, dest: Path) -> Path:
    shutil.copytree(rootfs_cache.get(), dest, symlinks=True)
    return dest


def test_rootfs_gets_the_links_and_the_ld_so_cache(plan: MountPlan, rootfs_cache: RootfsCache,
                                                   tmp_path: Path) -> None:
    rootfs = _rootfs(rootfs_cache, tmp_path / "rootfs")
    work = write_rootfs(plan, str(rootfs), frozenset({"/proc", "/dev"}), (0, 0),
                        ldcache_mode="write", ldconfig_required=False, log=RuntimeLog())
    links = [e for e in plan.entries if isinstance(e, Symlink)]
    assert work.links == len(links) and work.left == ()
    for link in links:
        assert os.readlink(rootfs / link.target.lstrip("/")) == link.link
    assert work.ldcache.startswith("wrote /etc/ld.so.cache")
    assert b"libnvidia-ml.so.1" in (rootfs / "etc/ld.so.cache").read_bytes()
    assert not [p for p in (rootfs / "etc").iterdir() if p.name.startswith(".ld.so.cache")]
    again = write_rootfs(plan, str(rootfs), frozenset(), (0, 0), ldcache_mode="write",
                         ldconfig_required=False, log=RuntimeLog())
    assert again.ldcache.startswith("unchanged")  # a second create changes nothing


def test_what_a_spec_mount_covers_is_left_to_the_hook(plan: MountPlan, rootfs_cache: RootfsCache,
                                                      tmp_path: Path) -> None:
    rootfs = _rootfs(rootfs_cache, tmp_path / "rootfs")
    libs = plan.libs_dir
    work = write_rootfs(plan, str(rootfs), frozenset({libs, "/etc"}), (0, 0),
                        ldcache_mode="write", ldconfig_required=False, log=RuntimeLog())
    assert work.links == 0 and len(work.left) == 2
    assert not os.path.lexists(rootfs / libs.lstrip("/") / "libcuda.so.1")
    ldconfig = write_rootfs(plan, str(rootfs), frozenset(), (0, 0), ldcache_mode="ldconfig",
                            ldconfig_required=False, log=RuntimeLog())
    assert ldconfig.left == ("left to the hook: [nvhook] ldcache = 'ldconfig'",)


@pytest.mark.parametrize("attack", ["libs-dir-out", "etc-out", "cache-link", "cache-fifo"])
def test_a_hostile_image_cannot_redirect_a_write(plan: MountPlan, rootfs_cache: RootfsCache,
                                                 tmp_path: Path, attack: str) -> None:
    """Symlinks in the image resolve inside the rootfs (openat2 RESOLVE_IN_ROOT); a planted
    ld.so.cache symlink or FIFO is replaced, never followed or opened."""
    rootfs = _rootfs(rootfs_cache, tmp_path / "rootfs")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "ld.so.cache").write_bytes(b"host file")
    libs = rootfs / plan.libs_dir.lstrip("/")
    if attack == "libs-dir-out":
        shutil.rmtree(libs)
        libs.symlink_to(f"../../../../../../../..{outside}")
    elif attack == "etc-out":
        shutil.rmtree(rootfs / "etc")
        (rootfs / "etc").symlink_to(str(outside))
    elif attack == "cache-link":
        (rootfs / "etc/ld.so.cache").unlink()
        (rootfs / "etc/ld.so.cache").symlink_to(str(outside / "ld.so.cache"))
    else:
        (rootfs / "etc/ld.so.cache").unlink()
        os.mkfifo(rootfs / "etc/ld.so.cache")
    try:
        write_rootfs(plan, str(rootfs), frozenset(), (0, 0), ldcache_mode="write",
                     ldconfig_required=False, log=RuntimeLog())
    except Exception as err:  # refusing is fine too; writing outside is not
        assert "rootfs" in str(err) or "ld.so.cache" in str(err), err
    assert sorted(p.name for p in outside.iterdir()) == ["ld.so.cache"]
    assert (outside / "ld.so.cache").read_bytes() == b"host file"


def test_rootfs_of_the_host_is_refused(plan: MountPlan) -> None:
    from nvmount.errors import PathError

    with pytest.raises(PathError, match="not usable"):
        write_rootfs(plan, "/", frozenset(), (0, 0), ldcache_mode="write",
                     ldconfig_required=False, log=RuntimeLog())


def test_deliver_spec_needs_no_hook_on_a_real_node(sim_root: SimRoot, rootfs_cache: RootfsCache,
                                                   tmp_path: Path) -> None:
    """The sim's config without its simulated procfs, for a graphics container with Docker's
    --gpus hook already in the spec: the hook goes, nothing is left for another."""
    bundle_dir = tmp_path / "bundle"
    _rootfs(rootfs_cache, bundle_dir / "rootfs")
    doc = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
           "process": {"env": ["NVIDIA_VISIBLE_DEVICES=1",
                               "NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics"]},
           "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                      {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"}],
           "hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                                   "args": ["nvidia-container-runtime-hook", "prestart"]}]}}
    (bundle_dir / "config.json").write_text(json.dumps(doc))
    text = Path(sim_root.config_path).read_text().replace("sim-procfs = true", "sim-procfs = false")
    config_path = tmp_path / "c.toml"
    config_path.write_text(text + f'cache-dir = "{tmp_path}/cache"\n')
    from nvhook.config.load import load_config
    from nvhook.hook.oci import parse_spec
    from nvhook.hook.request import derive_request

    config = load_config(str(config_path), {})
    with open_bundle(str(bundle_dir)) as bundle:
        request = derive_request(parse_spec(bundle.path, bundle.data), config)
        assert request is not None
        left = deliver_spec(doc, request, bundle, str(bundle_dir / "rootfs"), config,
                            RuntimeLog(), PhaseTimer())
    assert left is not None
    assert all("links under a spec mount" in why for why in left)  # /dev/dri/by-path only
    assert "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf" in \
        mount_destinations(doc)
    profile = bundle_dir / PROFILE_FILE
    assert profile.stat().st_mode & 0o777 == 0o444 and b"EGLVisibleDGPUDevices" in \
        profile.read_bytes()
    assert {d["path"] for d in doc["linux"]["devices"]} >= {"/dev/nvidiactl"}
    from nvhook.runtime.edit import remove_gpu_hooks

    assert remove_gpu_hooks(doc) == ["/usr/bin/nvidia-container-runtime-hook"]
    assert doc["hooks"]["prestart"] == []


@pytest.mark.parametrize(("value", "want"), [(None, 30.0), (5, 5.0), (0.5, 0.5), (120, 120.0)])
def test_nvml_timeout_reaches_the_discovery(value: float | None, want: float) -> None:
    from nvhook.hook.mount import engine_options

    doc = {} if value is None else {"nvhook": {"nvml-timeout": value}}
    assert engine_options(config_from_document(doc, "/c.toml")).nvml_timeout == want


@pytest.mark.parametrize("value", [0, -1, 3601, "30", True, float("nan")])
def test_nvml_timeout_is_checked(value: object) -> None:
    from nvhook.errors import ConfigError

    with pytest.raises(ConfigError, match=r"nvhook\.nvml-timeout = .* expected a number of "
                                          r"seconds \(more than 0, at most 3600\)"):
        config_from_document({"nvhook": {"nvml-timeout": value}}, "/c.toml")
