"""Issue 27 class 6: `nvhook doctor` (and `runtime configure`'s containerd probe) as root runs
no program a user could have put where it looked: a user-owned directory first on the
caller's PATH, the working directory (an empty or "." PATH entry), a daemon's PATH from its
<proc>/<pid>/environ, a runtime config naming a program in a user's directory. Every fake
program leaves a witness file when run: none may appear."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from nvhook.admin.doctor import host
from nvhook.admin.doctor.findings import HostPaths
from nvhook.dev.sim import SimRoot
from nvhook.launch.write import MARKER
from tests.unit.test_cli import NVHOOK

pytestmark = pytest.mark.root
USER = 1000
NAMES = ("nvidia-container-runtime-hook", "nvidia-container-runtime", "docker", "podman",
         "containerd", "crio", "ctr")


def plant(directory: Path, witness: Path, owner: int = USER) -> None:
    """A user's directory of programs that report being run (each looks like nvhook's)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        program = directory / name
        program.write_text(f"#!/bin/sh\n{MARKER} (runtime)\necho {name} >> {witness}\n"
                           "echo nvhook version 0; echo 'version 2.1.0'\n")
        program.chmod(0o755)
        os.chown(program, owner, owner)
    os.chown(directory, owner, owner)


def test_doctor_in_a_users_directory_with_a_users_path(sim_root: SimRoot,
                                                       tmp_path: Path) -> None:
    home = tmp_path / "home"
    witness = tmp_path / "ran"
    plant(home / "bin", witness)
    plant(home, witness)  # the working directory itself, for "" and "." entries
    env = {**os.environ, "PATH": f"{home}/bin::.:bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    proc = subprocess.run([*NVHOOK, "--config", sim_root.config_path, "doctor", "--json"],
                          capture_output=True, text=True, check=False, timeout=120,
                          cwd=home, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    assert not witness.exists(), witness.read_text()
    found = {f["check"]: f for f in json.loads(proc.stdout)["findings"]}
    hook = found["hook"]
    assert hook["level"] == "fail" and "not run: program" in hook["message"], hook
    assert f"owned by uid {USER}" in hook["message"]


def _fake_proc(tmp_path: Path, pid: int, comm: str, environ: bytes) -> HostPaths:
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "comm").write_text(comm + "\n")
    (proc / str(pid) / "environ").write_bytes(environ)
    (tmp_path / "etc").mkdir(exist_ok=True)
    return HostPaths(etc=str(tmp_path / "etc"), proc=str(proc), run=str(tmp_path / "run"),
                     usr_share=str(tmp_path / "share"), var_lib=str(tmp_path / "lib"),
                     path="/usr/bin:/bin")


def test_a_daemons_path_naming_a_users_directory(tmp_path: Path) -> None:
    witness = tmp_path / "ran"
    plant(tmp_path / "user-bin", witness)
    paths = _fake_proc(tmp_path, 42, "dockerd",
                       b"PATH=" + str(tmp_path / "user-bin").encode() + b":/usr/bin\0")
    running = host.running_daemons(paths.proc)
    found = host.check_hook_on_path(paths, running)
    assert found.level == "fail" and "not run" in found.message, found
    (tmp_path / "etc/docker").mkdir()
    (tmp_path / "etc/docker/daemon.json").write_text(json.dumps(
        {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}))
    [runtime] = host.check_runtimes(paths, running)
    assert runtime.level == "fail" and "not run" in runtime.message, runtime
    assert not witness.exists()


def test_a_runtime_config_naming_a_users_program(tmp_path: Path) -> None:
    witness = tmp_path / "ran"
    plant(tmp_path / "opt", witness)
    paths = _fake_proc(tmp_path, 7, "bash", b"")
    (tmp_path / "etc/containerd").mkdir()
    (tmp_path / "etc/containerd/config.toml").write_text(
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        f'BinaryName = "{tmp_path}/opt/nvidia-container-runtime"\n')
    [runtime] = host.check_runtimes(paths, {})
    assert runtime.level == "fail" and "not run" in runtime.message
    assert not witness.exists()


def test_a_trusted_program_still_runs(tmp_path: Path) -> None:
    witness = tmp_path / "ran"
    plant(tmp_path / "bin", witness, owner=0)
    paths = _fake_proc(tmp_path, 42, "dockerd",
                       b"PATH=" + str(tmp_path / "bin").encode() + b"\0")
    found = host.check_hook_on_path(paths, host.running_daemons(paths.proc))
    assert found.level == "ok", found
    assert witness.read_text() == "nvidia-container-runtime-hook\n"


def test_containerd_version_probe_skips_a_users_containerd(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    from nvhook.admin.configure.ctrd import default_config_version

    witness = tmp_path / "ran"
    plant(tmp_path / "bin", witness)
    monkeypatch.setenv("PATH", f"{tmp_path}/bin:.:/nonexistent")
    monkeypatch.chdir(tmp_path / "bin")
    assert default_config_version() == 2
    assert not witness.exists()
