"""NVIDIA's main after 1.20.0 (issue 31, docs/nvidia-cli.md's table), where nvhook had it
already or it belongs to no other module's tests: #1947, MIG management capability devices in
jit-cdi (nvhook's spec delivery projects the legacy plan, which has them for a privileged
container: /dev/nvidia-caps bound read-only, as libnvc does, and a rule per capability)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from nvhook.dev.sim import SimRoot
from nvhook.errors import NvhookError
from nvhook.launch.runtime_log import RuntimeLog
from nvhook.runtime.bundle import open_bundle
from nvhook.runtime.spec_delivery import deliver_spec
from nvmount.timing import PhaseTimer
from tests.fixtures.containers import RootfsCache

CAPS = ["CAP_SYS_ADMIN", "CAP_MKNOD"]


def _deliver(sim: SimRoot, rootfs_cache: RootfsCache, tmp_path: Path,
             caps: list[str]) -> dict[str, Any]:
    from nvhook.config.load import load_config
    from nvhook.hook.oci import parse_spec
    from nvhook.hook.request import derive_request

    bundle_dir = tmp_path / "bundle"
    shutil.copytree(rootfs_cache.get(), bundle_dir / "rootfs", symlinks=True)
    doc = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
           "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all",
                               "NVIDIA_MIG_MONITOR_DEVICES=all"],
                       "capabilities": {"bounding": caps}},
           "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}]}
    (bundle_dir / "config.json").write_text(json.dumps(doc))
    config_path = tmp_path / "c.toml"
    config_path.write_text(Path(sim.config_path).read_text()
                           + f'cache-dir = "{tmp_path}/cache"\n')
    config = load_config(str(config_path), {})
    with open_bundle(str(bundle_dir)) as bundle:
        request = derive_request(parse_spec(bundle.path, bundle.data), config)
        assert request is not None
        deliver_spec(doc, request, bundle, str(bundle_dir / "rootfs"), config, RuntimeLog(),
                     PhaseTimer())
    return doc


def test_jit_cdi_mig_management_devices(sim_mig_root: SimRoot, rootfs_cache: RootfsCache,
                                        tmp_path: Path) -> None:
    """NVIDIA's #1947: NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES=all in a
    container with CAP_SYS_ADMIN give it /dev/nvidia-caps/nvidia-cap1 and -cap2 (and their
    rules) in the spec the runtime wrapper writes."""
    doc = _deliver(sim_mig_root, rootfs_cache, tmp_path, CAPS)
    linux = doc["linux"]
    assert isinstance(linux, dict)
    caps = Path(sim_mig_root.path) / "dev/nvidia-caps"
    wanted = {(os.major(st.st_rdev), os.minor(st.st_rdev)) for st in
              (os.stat(caps / n) for n in ("nvidia-cap1", "nvidia-cap2"))}
    mounts = [m for m in doc["mounts"] if m["destination"] == "/dev/nvidia-caps"]
    assert [m["source"] for m in mounts] == [str(caps)]  # as libnvc: the directory, read-only
    rules = {(r.get("major"), r.get("minor")) for r in linux["resources"]["devices"]
             if r.get("allow") and "r" in r.get("access", "")}
    assert wanted <= rules, rules


def test_mig_management_devices_need_cap_sys_admin(sim_mig_root: SimRoot,
                                                   rootfs_cache: RootfsCache,
                                                   tmp_path: Path) -> None:
    with pytest.raises(NvhookError, match="NVIDIA_MIG_CONFIG_DEVICES"):
        _deliver(sim_mig_root, rootfs_cache, tmp_path, ["CAP_MKNOD"])


def test_spec_delivery_keeps_the_hook_for_memory_limits(sim_root: SimRoot,
                                                        rootfs_cache: RootfsCache,
                                                        tmp_path: Path) -> None:
    """#1995 behind `[nvhook] cuda-memory-limits`: in the wrapper's spec delivery the limits are
    what brings nvhook's prestart hook back (NVML sets them on the started container's
    cgroup); without the setting, or without both variables, nothing is left for it."""
    from nvhook.config.load import load_config
    from nvhook.hook.oci import parse_spec
    from nvhook.hook.request import derive_request

    def left(setting: bool, env: list[str]) -> tuple[str, ...] | None:
        bundle_dir = tmp_path / f"b{setting}{len(env)}"
        shutil.copytree(rootfs_cache.get(), bundle_dir / "rootfs", symlinks=True)
        doc: dict[str, Any] = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                               "process": {"env": ["NVIDIA_VISIBLE_DEVICES=1", *env]},
                               "mounts": [{"destination": "/proc", "type": "proc",
                                           "source": "proc"}]}
        (bundle_dir / "config.json").write_text(json.dumps(doc))
        text = Path(sim_root.config_path).read_text().replace("sim-procfs = true",
                                                              "sim-procfs = false")
        if setting:
            text = text.replace("[nvhook]\n", "[nvhook]\ncuda-memory-limits = true\n", 1)
        config_path = tmp_path / "c.toml"
        config_path.write_text(text + f'cache-dir = "{tmp_path}/cache"\n')
        config = load_config(str(config_path), {})
        with open_bundle(str(bundle_dir)) as bundle:
            request = derive_request(parse_spec(bundle.path, bundle.data), config)
            assert request is not None
            return deliver_spec(doc, request, bundle, str(bundle_dir / "rootfs"), config,
                                RuntimeLog(), PhaseTimer())

    both = ["NVIDIA_GPU_MEMORY_REQUEST=1", "NVIDIA_GPU_MEMORY_LIMITS=2"]
    assert "the CUDA memory limits" in (left(True, both) or ())
    assert "the CUDA memory limits" not in (left(False, both) or ())
    assert "the CUDA memory limits" not in (left(True, both[:1]) or ())
