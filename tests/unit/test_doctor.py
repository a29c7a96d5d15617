"""`nvhook doctor`: each finding from a host (simulated driver, fake /etc and /proc) that
shows it, and the exit code (1 only when a GPU container would fail)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from nvhook.admin.doctor import checks, host
from nvhook.admin.doctor.findings import HostPaths
from nvhook.config.model import config_from_document
from nvhook.dev.sim import SimRoot
from nvhook.launch.write import MARKER
from tests.fixtures.sim import SIM_DEFAULT_SPEC, SimRootFactory
from tests.unit.test_cli import NVHOOK

V1_MOUNTINFO = (
    "30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "35 30 0:31 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices\n"
)
V2_MOUNTINFO = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
HYBRID_MOUNTINFO = V1_MOUNTINFO + (
    "36 30 0:32 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n")


def _doctor(config: str, *extra: str) -> tuple[int, dict[str, dict[str, str]]]:
    proc = subprocess.run([*NVHOOK, "--config", config, "doctor", "--json", *extra],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ready"] is (proc.returncode == 0)
    return proc.returncode, {f["check"]: f for f in doc["findings"]}


def test_doctor_on_a_healthy_simulated_host(sim_root: SimRoot) -> None:
    rc, found = _doctor(sim_root.config_path)
    assert rc == 0, [f for f in found.values() if f["level"] == "fail"]
    assert found["driver"]["level"] == "ok"
    assert "550.54.15" in found["driver"]["message"] and "8 GPU(s)" in found["driver"]["message"]
    assert found["driver root"]["message"] == f"{sim_root.path} (nvidia-container-cli.root)"
    for name in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "GPU nodes"):
        assert found[name]["level"] == "ok", found[name]
    assert "nvidia-caps" in found["capability majors"]["message"]
    assert found["persistence"]["level"] == "ok"  # the sim's persistenced socket
    assert found["inventory cache"]["level"] == "ok"
    assert found["ldconfig"]["message"].startswith("nvhook writes")


def test_doctor_driver_not_loaded_says_load_the_module(sim_root: SimRoot,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVSIM_FAIL", "nvmlInit_v2:9")  # NVML_ERROR_DRIVER_NOT_LOADED
    rc, found = _doctor(sim_root.config_path)
    assert rc == 1 and "Driver Not Loaded (code 9)" in found["driver"]["message"]
    assert found["driver"]["fix"].startswith("load the NVIDIA kernel module")


def test_doctor_names_a_missing_driver_root_once(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{tmp_path}/gone"\n')
    rc, found = _doctor(str(config))
    assert rc == 1 and found["driver root"]["level"] == "fail"
    assert "driver" not in found  # one finding for one cause


@pytest.mark.root
def test_doctor_fails_on_a_missing_or_stale_uvm_node(sim_root_factory: SimRootFactory) -> None:
    sim = sim_root_factory(SIM_DEFAULT_SPEC, private=True)
    if not sim.real_device_nodes:
        pytest.skip("needs mknod (root)")
    uvm = Path(sim.path) / "dev" / "nvidia-uvm"
    uvm.unlink()
    rc, found = _doctor(sim.config_path)
    assert rc == 1
    assert found["/dev/nvidia-uvm"]["level"] == "fail"
    assert "mknod -m 666 /dev/nvidia-uvm c" in found["/dev/nvidia-uvm"]["fix"]
    os.mknod(uvm, 0o666 | stat.S_IFCHR, os.makedev(99, 0))  # a node left by an older driver
    rc, found = _doctor(sim.config_path)
    assert rc == 1
    assert "major 99, but the kernel's nvidia-uvm is" in found["/dev/nvidia-uvm"]["message"]


def test_doctor_fails_on_a_broken_config(tmp_path: Path) -> None:
    broken = tmp_path / "config.toml"
    broken.write_text("[nvidia-container-cli]\nroot = 5\n")
    rc, found = _doctor(str(broken))
    assert rc == 1
    assert found["config"]["level"] == "fail"
    assert "nvidia-container-cli.root = 5" in found["config"]["message"]


def test_doctor_warns_about_unknown_keys(sim_root: SimRoot, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(Path(sim_root.config_path).read_text() + "\n[features]\nload-kmod = 1\n")
    _, found = _doctor(str(config))
    assert found["config"]["level"] == "warn"
    assert "unknown key features.load-kmod" in found["config"]["message"]


def test_doctor_fails_without_a_driver(tmp_path: Path) -> None:
    (tmp_path / "root/proc").mkdir(parents=True)
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{tmp_path}/root"\n'
                      f'[nvhook]\nproc-root = "{tmp_path}/root/proc"\ncache-dir = ""\n')
    rc, found = _doctor(str(config))
    assert rc == 1 and found["driver"]["level"] == "fail"
    assert found["driver"]["fix"].startswith("install the NVIDIA driver")


CHROOT_MOUNTINFO = "40 39 0:5 / /proc rw - proc proc rw\n"  # a root without /sys


@pytest.mark.parametrize(("mountinfo", "mode"), [(V1_MOUNTINFO, "v1"), (V2_MOUNTINFO, "v2"),
                                                 (HYBRID_MOUNTINFO, "hybrid"),
                                                 (CHROOT_MOUNTINFO, "unknown"), ("", "unknown")])
def test_cgroup_mode(mountinfo: str, mode: str) -> None:
    assert host.cgroup_mode(mountinfo) == mode


def test_cgroups_unknown_without_a_cgroup_mount(tmp_path: Path) -> None:
    finding = host.check_cgroups(_fake_host(tmp_path, CHROOT_MOUNTINFO))
    assert finding.level == "info" and finding.message.startswith("cgroup unknown: ")


def _fake_host(tmp_path: Path, mountinfo: str, init: str = "systemd") -> HostPaths:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(mountinfo)
    (tmp_path / "proc/1/comm").write_text(init + "\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "bin").mkdir()
    return HostPaths(etc=str(tmp_path / "etc"), proc=str(tmp_path / "proc"),
                     run=str(tmp_path / "run"), usr_share=str(tmp_path / "share"),
                     var_lib=str(tmp_path / "var/lib"), path=str(tmp_path / "bin"))


def test_systemd_driver_on_cgroup_v1_is_registered(tmp_path: Path) -> None:
    """Issue 30: the hook registers its rules with the scope (DeviceAllow=), on v1 as on v2,
    so a systemd cgroup driver is no longer a warning."""
    paths = _fake_host(tmp_path, V1_MOUNTINFO)
    assert host.check_cgroups(paths).level == "ok"
    (tmp_path / "etc/containerd/conf.d").mkdir(parents=True)
    (tmp_path / "etc/containerd/conf.d/10.toml").write_text("    SystemdCgroup = true\n")
    finding = host.check_cgroups(paths)
    assert finding.level == "ok" and "systemd cgroup driver: containerd" in finding.message
    assert "DeviceAllow=" in finding.message


def test_systemd_driver_on_cgroup_v2_is_fine(tmp_path: Path) -> None:
    paths = _fake_host(tmp_path, V2_MOUNTINFO)
    (tmp_path / "etc/docker").mkdir()
    (tmp_path / "etc/docker/daemon.json").write_text(
        json.dumps({"exec-opts": ["native.cgroupdriver=systemd"]}))
    finding = host.check_cgroups(paths)
    assert finding.level == "ok" and "docker" in finding.message


def _launcher(path: Path, body: str = "echo nvhook version 0") -> None:
    path.write_text(f"#!/bin/sh\n{MARKER} (runtime)\n{body}\n")
    path.chmod(0o755)


def test_runtime_configuration_checks(tmp_path: Path) -> None:
    paths = _fake_host(tmp_path, V2_MOUNTINFO)
    (tmp_path / "etc/docker").mkdir()
    runtimes = {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {"path": "runc"}}
    (tmp_path / "etc/docker/daemon.json").write_text(json.dumps({"runtimes": runtimes}))
    found = host.check_runtimes(paths, {"dockerd": 1})
    assert [(f.check, f.level) for f in found] == [("runtime docker", "fail")]
    assert "not found" in found[0].message and "(running)" in found[0].message
    _launcher(tmp_path / "bin/nvidia-container-runtime")
    assert host.check_runtimes(paths, {})[0].level == "ok"
    _launcher(tmp_path / "bin/nvidia-container-runtime", "echo 'ModuleNotFoundError' >&2; exit 1")
    broken = host.check_runtimes(paths, {})[0]
    assert broken.level == "fail" and "ModuleNotFoundError" in broken.message
    (tmp_path / "bin/nvidia-container-runtime").write_text("#!/bin/sh\necho NVIDIA\n")
    assert host.check_runtimes(paths, {})[0].level == "warn"


def test_containerd_and_hooks_dir_configuration(tmp_path: Path) -> None:
    paths = _fake_host(tmp_path, V2_MOUNTINFO)
    (tmp_path / "etc/containerd/conf.d").mkdir(parents=True)
    (tmp_path / "etc/containerd/conf.d/99-nvidia.toml").write_text(
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        f'BinaryName = "{tmp_path}/bin/nvidia-container-runtime"\n')
    (tmp_path / "etc/containers/oci/hooks.d").mkdir(parents=True)
    (tmp_path / "etc/containers/oci/hooks.d/oci-nvidia-hook.json").write_text(json.dumps(
        {"version": "1.0.0", "hook": {"path": f"{tmp_path}/bin/nvidia-container-runtime-hook"}}))
    _launcher(tmp_path / "bin/nvidia-container-runtime")
    _launcher(tmp_path / "bin/nvidia-container-runtime-hook")
    found = {f.check: f for f in host.check_runtimes(paths, {})}
    assert found["runtime containerd"].level == "ok"
    assert found["runtime podman (hooks.d)"].level == "ok"
    assert host.check_hook_on_path(paths, {}).level == "ok"


def test_no_runtime_configured(tmp_path: Path) -> None:
    paths = _fake_host(tmp_path, V2_MOUNTINFO)
    found = host.check_runtimes(paths, {})
    assert [f.level for f in found] == ["warn"]
    assert host.check_hook_on_path(paths, {}).level == "warn"


def test_ldconfig_mode_checks_the_host_binary(tmp_path: Path) -> None:
    config = config_from_document({"nvhook": {"ldcache": "ldconfig"}, "nvidia-container-cli": {
        "ldconfig": f"@{tmp_path}/ldconfig"}}, "p")
    assert checks.check_ldcache(config).level == "fail"
    (tmp_path / "ldconfig").write_text("")
    assert checks.check_ldcache(config).level == "ok"


def test_cdi_spec_freshness(sim_root: SimRoot, tmp_path: Path) -> None:
    document = {"nvidia-container-cli": {"root": sim_root.path},
                "nvhook": {"proc-root": sim_root.proc_root},
                "nvidia-container-runtime": {"modes": {"cdi": {"spec-dirs": [str(tmp_path)]}}}}
    config = config_from_document(document, "p")
    assert [f.level for f in host.check_cdi(config)] == ["info"]
    from nvhook.cdi.generate import host_spec, render

    spec = host_spec(config)
    (tmp_path / "nvidia.yaml").write_text(render(spec, "yaml"))
    assert [(f.level, f.message) for f in host.check_cdi(config)] == [
        ("ok", f"{tmp_path}/nvidia.yaml: current")]
    spec["devices"] = spec["devices"][2:]
    (tmp_path / "nvidia.yaml").write_text(render(spec, "yaml"))
    (finding,) = host.check_cdi(config)
    assert finding.level == "warn" and "is stale: devices changed (gone: -; new: 0, GPU-" in (
        finding.message)
    assert finding.fix == "nvhook cdi check --refresh"
    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\n")
    assert host.check_cdi(config)[0].level == "warn"


def test_persistence_without_the_daemon(sim_root_factory: SimRootFactory) -> None:
    from nvhook.dev.sim import SimSpec

    sim = sim_root_factory(SimSpec(gpus=1, ipc=False))
    config = config_from_document({"nvidia-container-cli": {"root": sim.path},
                                   "nvhook": {"proc-root": sim.proc_root, "cache-dir": ""}}, "p")
    inventory, _ = checks.check_driver(config)
    assert inventory is not None
    assert checks.check_persistence(inventory, {}).level == "warn"
    assert checks.check_persistence(inventory, {"nvidia-persistenced": 1}).level == "ok"


def _process(proc: Path, pid: int, comm: str, environ: bytes | None) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "comm").write_text(comm + "\n")
    if environ is not None:
        (proc / str(pid) / "environ").write_bytes(environ)


def test_running_daemons_from_proc(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _process(proc, 300, "dockerd", b"")
    _process(proc, 20, "dockerd", b"")
    _process(proc, 7, "nvidia-persiste", None)  # the kernel keeps 15 characters
    _process(proc, 8, "bash", None)
    assert host.running_daemons(str(proc)) == {"dockerd": 20, "nvidia-persistenced": 7}


def test_hook_is_looked_up_on_the_engines_path(tmp_path: Path) -> None:
    """dockerd's PATH (its environ) decides, not the caller's; no engine: the caller's."""
    paths = _fake_host(tmp_path, V2_MOUNTINFO)
    engine_bin = tmp_path / "engine-bin"
    engine_bin.mkdir()
    _launcher(engine_bin / "nvidia-container-runtime-hook")
    _process(tmp_path / "proc", 42, "dockerd", b"HOME=/root\0PATH=/nope:" +
             str(engine_bin).encode() + b"\0")
    _process(tmp_path / "proc", 43, "containerd", b"LANG=C\0")  # no PATH: finds nothing
    running = host.running_daemons(paths.proc)
    found = host.check_hook_on_path(paths, running)
    assert found.level == "ok", found
    assert found.message.endswith(", on dockerd's PATH (pid 42)")
    alone = host.check_hook_on_path(paths, {"containerd": 43})
    assert alone.level == "warn" and "not on containerd's PATH (pid 43) (empty;" in alone.message
    unreadable = host.check_hook_on_path(paths, {"dockerd": 99})  # no environ: not root
    assert "not on the caller's PATH (dockerd's environment is unreadable: run as root)" \
        in unreadable.message
    caller = host.check_hook_on_path(paths, {})
    assert caller.level == "warn" and "not on the caller's PATH" in caller.message
    _launcher(tmp_path / "bin/nvidia-container-runtime-hook")
    assert host.check_hook_on_path(paths, {}).message.endswith("on the caller's PATH")


def test_unreadable_runtime_config_is_reported(tmp_path: Path) -> None:
    paths = _fake_host(tmp_path, V2_MOUNTINFO)
    (tmp_path / "etc/containerd").mkdir()
    (tmp_path / "etc/containerd/config.toml").write_text("version = [\n")
    found = host.check_runtimes(paths, {})
    assert [(f.check, f.level) for f in found] == [("runtime config", "warn"),
                                                    ("runtime containerd", "info")]
    assert found[0].message.startswith(f"cannot read {tmp_path}/etc/containerd/config.toml: ")
