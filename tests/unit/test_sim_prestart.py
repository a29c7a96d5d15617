"""`nvhook sim prestart`: the tmpfs on the container's /proc/driver, in its mount namespace
only, confined to its rootfs. The "container" is a process in a private mount namespace
(unshare -m) with a plain directory as rootfs; the command runs as runc would run a hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.sim import SimRootFactory

pytestmark = pytest.mark.root


def mounts_of(pid: int | str) -> dict[str, tuple[str, str]]:
    """mount point -> (fstype, per-mount options) from /proc/<pid>/mountinfo."""
    result = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        result[fields[4]] = (fields[sep + 1], fields[5])
    return result


@pytest.fixture
def container(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """(pid in a private mount namespace, bundle with config.json and rootfs/proc/driver)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespaces)")
    bundle = tmp_path / "bundle"
    (bundle / "rootfs/proc/driver").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps(
        {"ociVersion": "1.0.2", "process": {"env": []}, "root": {"path": "rootfs"}}))
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "60"])
    try:
        own = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{proc.pid}/ns/mnt") == own:
            assert time.monotonic() < deadline, "unshare did not start"
            time.sleep(0.01)
        yield proc.pid, bundle
    finally:
        proc.kill()
        proc.wait()


def run_prestart(pid: int, bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    state = {"ociVersion": "1.0.2", "id": "sim", "status": "creating", "pid": pid,
             "bundle": str(bundle)}
    return subprocess.run([sys.executable, "-m", "nvhook", "sim", "prestart", *args],
                          input=json.dumps(state), capture_output=True, text=True, check=False,
                          cwd=bundle)  # runc runs hooks in the bundle: root.path is relative


@pytest.mark.parametrize("with_dir", [False, True], ids=["empty", "with-nvidia-dir"])
def test_prestart_mounts_tmpfs_in_the_container_only(container: tuple[int, Path],
                                                     with_dir: bool) -> None:
    pid, bundle = container
    args = ("--with-nvidia-dir",) if with_dir else ()
    out = run_prestart(pid, bundle, *args)
    assert out.returncode == 0, out.stderr
    target = str(bundle / "rootfs/proc/driver")
    fstype, options = mounts_of(pid)[target]
    assert fstype == "tmpfs"
    assert {"nosuid", "nodev", "noexec"} <= set(options.split(","))
    assert target not in mounts_of("self")
    seen = Path(f"/proc/{pid}/root{target}")
    assert sorted(os.listdir(seen)) == (["nvidia"] if with_dir else [])
    assert oct(os.stat(seen).st_mode & 0o7777) == oct(0o555)
    assert os.listdir(target) == []  # the host's view is unchanged


def test_prestart_stays_inside_the_rootfs(container: tuple[int, Path], tmp_path: Path) -> None:
    pid, bundle = container
    host_dir = tmp_path / "host" / "driver"
    host_dir.mkdir(parents=True)
    proc_dir = bundle / "rootfs/proc"
    (proc_dir / "driver").rmdir()
    proc_dir.rmdir()
    proc_dir.symlink_to(host_dir.parent)  # absolute: a hostile image pointing at the host
    out = run_prestart(pid, bundle)
    assert out.returncode == 1
    assert "resolve proc/driver in the rootfs" in out.stderr
    assert str(host_dir) not in mounts_of(pid)

    inside = bundle / "rootfs" / str(host_dir.parent).lstrip("/") / "driver"
    inside.mkdir(parents=True)  # the same path inside the rootfs: that is where it lands
    out = run_prestart(pid, bundle)
    assert out.returncode == 0, out.stderr
    assert mounts_of(pid)[str(inside)][0] == "tmpfs"
    assert str(host_dir) not in mounts_of(pid)


def test_prestart_requires_a_pid(tmp_path: Path) -> None:
    out = run_prestart(0, tmp_path)
    assert out.returncode == 2
    assert "has no pid" in out.stderr


def test_prestart_names_a_missing_process(container: tuple[int, Path]) -> None:
    _, bundle = container
    out = run_prestart(2**22 + 7, bundle)
    assert out.returncode == 1
    assert "open the mount namespace" in out.stderr


def run_c_step(sim_path: str, pid: int, bundle: Path, *args: str
               ) -> subprocess.CompletedProcess[str]:
    state = {"ociVersion": "1.0.2", "id": "sim", "status": "creating", "pid": pid,
             "bundle": str(bundle)}
    return subprocess.run([f"{sim_path}/nvsim/bin/nvsim-prestart", *args],
                          input=json.dumps(state), capture_output=True, text=True, check=False,
                          cwd=bundle)


def test_the_c_step_mounts_alike_and_hands_the_state_on(
        container: tuple[int, Path], sim_root_factory: SimRootFactory, tmp_path: Path) -> None:
    """nvsim-prestart (the step as a program, for benchmarks): the same tmpfs, then the next
    hook runs in the hook's own namespace and directory with the same state on stdin."""
    pid, bundle = container
    seen = tmp_path / "seen"
    after = tmp_path / "next-hook"
    after.write_text(f"#!/bin/sh\ncat > {seen}\necho \"$* $(pwd) "
                     f"$(readlink /proc/self/ns/mnt)\" >> {seen}\n")
    after.chmod(0o755)
    out = run_c_step(sim_root_factory().path, pid, bundle, "--with-nvidia-dir", "--then",
                     str(after), "next", "prestart")
    assert out.returncode == 0, out.stderr
    target = str(bundle / "rootfs/proc/driver")
    fstype, options = mounts_of(pid)[target]
    assert fstype == "tmpfs" and {"nosuid", "nodev", "noexec"} <= set(options.split(","))
    assert os.listdir(f"/proc/{pid}/root{target}") == ["nvidia"]
    assert os.listdir(target) == []
    state, line = seen.read_text().rsplit("}", 1)
    assert json.loads(state + "}")["pid"] == pid
    assert line.split() == ["prestart", str(bundle), os.readlink("/proc/self/ns/mnt")]


def test_the_c_step_stays_inside_the_rootfs(container: tuple[int, Path],
                                            sim_root_factory: SimRootFactory,
                                            tmp_path: Path) -> None:
    pid, bundle = container
    host_dir = tmp_path / "host" / "driver"
    host_dir.mkdir(parents=True)
    proc_dir = bundle / "rootfs/proc"
    (proc_dir / "driver").rmdir()
    proc_dir.rmdir()
    proc_dir.symlink_to(host_dir.parent)
    out = run_c_step(sim_root_factory().path, pid, bundle)
    assert out.returncode == 1
    assert "resolve proc/driver in" in out.stderr
    assert str(host_dir) not in mounts_of(pid)
