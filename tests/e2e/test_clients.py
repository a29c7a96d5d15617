"""Smoke tests of the client rig (tests/fixtures/clients.py): every real client runs a container.

One dockerd, one containerd and one podman storage per client kind serve the whole module.
Each test then checks that it left no container process, mount, bound socket or busy cgroup
behind (client_leak_check); the rig's teardown checks the same after stopping the daemons.
No hook of ours is involved: the hooks here are tiny shell scripts that leave a marker.
"""

from __future__ import annotations

import json
import logging
import shlex
from pathlib import Path

import pytest

from nvhook.dev.demo.bundle import Runc, container_spec, new_container_id, runc_run, write_bundle
from tests.fixtures.clientrig.containerd import ContainerdDaemon, config_dump, containerd_config
from tests.fixtures.clientrig.docker import DockerDaemon
from tests.fixtures.clientrig.podman import Podman
from tests.fixtures.clientrig.runtimes import CRUN, UNIFIED
from tests.fixtures.clients import ClientRig, describe, require_binaries
from tests.fixtures.nodes import HOST, Node

log = logging.getLogger(__name__)
pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.usefixtures("client_leak_check")]

HELLO = ["echo", "hello"]


def _marker_script(path: Path, marker: Path) -> Path:
    """An executable that appends one line to `marker`: its argv0, args and stdin (the state)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "$0 $* $(cat)" >> {shlex.quote(str(marker))}\n')
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def tools(client_rig: ClientRig) -> Path:
    """A dir for wrapper scripts, fake NVIDIA binaries and their logs."""
    return client_rig.workdir("tools")


@pytest.fixture(scope="module")
def docker(client_rig: ClientRig, tools: Path) -> DockerDaemon:
    """dockerd with a `wrapped` runtime (runc wrapper) and a fake hook on its PATH for --gpus."""
    wrapper = client_rig.runc_wrapper(log=tools / "docker-wrapper.log")
    _marker_script(tools / "bin/nvidia-container-runtime-hook", tools / "gpu-hook.log")
    runtimes = {"wrapped": {"path": str(wrapper)},
                "crun-wrapped": {"path": str(client_rig.crun_wrapper())}}
    return client_rig.docker(settings={"runtimes": runtimes}, extra_path=(tools / "bin",))


@pytest.fixture(scope="module")
def containerd(client_rig: ClientRig) -> ContainerdDaemon:
    return client_rig.containerd()


@pytest.mark.today_engines
def test_docker_runs_imported_image(docker: DockerDaemon) -> None:
    proc = docker.run(HELLO)
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)


def test_docker_custom_runtime_entry_wraps_runc(docker: DockerDaemon, tools: Path) -> None:
    proc = docker.run(HELLO, runtime="wrapped")
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)
    calls = (tools / "docker-wrapper.log").read_text()
    assert " create --bundle " in calls and " start " in calls, calls


@pytest.mark.today_engines
def test_docker_gpus_finds_the_hook_on_dockerd_path(docker: DockerDaemon, tools: Path) -> None:
    proc = docker.run(HELLO, gpus="all")
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)
    hook_log = (tools / "gpu-hook.log").read_text()
    assert f"{tools}/bin/nvidia-container-runtime-hook prestart {{" in hook_log, hook_log


@pytest.mark.today_engines
def test_ctr_runs_imported_image(containerd: ContainerdDaemon) -> None:
    proc = containerd.run(HELLO)
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)


def test_ctr_runc_binary_wrapper(containerd: ContainerdDaemon, client_rig: ClientRig,
                                 tools: Path) -> None:
    log = tools / "ctr-wrapper.log"
    proc = containerd.run(HELLO, runc_binary=client_rig.runc_wrapper(log=log))
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)
    calls = log.read_text()
    assert f"--root {containerd.workdir}/runc/{containerd.namespace} " in calls, calls
    assert " create --bundle " in calls, calls


@pytest.mark.today_engines
def test_ctr_gpus_hook_uses_cli_from_ctr_path(containerd: ContainerdDaemon, tools: Path) -> None:
    cli = _marker_script(tools / "ctr-bin/nvidia-container-cli", tools / "ctr-cli.log")
    proc = containerd.run(HELLO, gpus="0", extra_path=(cli.parent,))
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)
    assert "configure --device=0 --compute" in (tools / "ctr-cli.log").read_text()


def test_containerd_config_dump_merges_dropin_dir(client_rig: ClientRig) -> None:
    require_binaries(Path("/usr/bin/containerd"))
    work = client_rig.workdir("dump")
    (work / "conf.d").mkdir()
    (work / "conf.d/99-nvhook.toml").write_text(
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvhook]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvhook.options]\n'
        '  BinaryName = "/usr/bin/nvhook-runtime"\n')
    config = work / "config.toml"
    config.write_text(containerd_config(work, imports=[f"{work}/conf.d/*.toml"],
                                        disable_cri=False))
    proc = config_dump(config, timings=client_rig.timings)
    assert proc.returncode == 0, describe(proc)
    assert 'BinaryName = "/usr/bin/nvhook-runtime"' in proc.stdout
    assert f"{work}/conf.d/99-nvhook.toml" in proc.stdout  # the resolved imports line


@pytest.fixture(scope="module")
def podman_root(client_rig: ClientRig, tools: Path) -> Podman:
    """Rootful podman whose hooks dir holds one always-on marker hook (podman-hook.log)."""
    hooks = tools / "hooks.d"
    hooks.mkdir()
    hook = _marker_script(tools / "podman-hook.sh", tools / "podman-hook.log")
    (hooks / "marker.json").write_text(json.dumps({
        "version": "1.0.0", "hook": {"path": str(hook), "args": ["podman-hook.sh", "fired"]},
        "when": {"always": True}, "stages": ["prestart"]}))
    return client_rig.podman(hooks_dir=hooks)


@pytest.mark.today_engines
def test_podman_rootful_runs_image_and_hooks_dir(podman_root: Podman, tools: Path) -> None:
    proc = podman_root.run(HELLO)
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)
    assert "podman-hook.sh fired {" in (tools / "podman-hook.log").read_text()


@pytest.fixture(scope="module")
def podman_user(client_rig: ClientRig) -> Podman:
    return client_rig.rootless_podman()


def test_podman_rootless_runs_in_user_namespace(podman_user: Podman) -> None:
    assert podman_user.user is not None
    proc = podman_user.run(["sh", "-c", "echo hello; id -u; cat /proc/self/uid_map"])
    assert proc.returncode == 0, describe(proc)
    lines = proc.stdout.split("\n")
    assert lines[:2] == ["hello", "0"], proc.stdout
    assert lines[2].split() == ["0", str(podman_user.user.uid), "1"], proc.stdout


def test_plain_crun_refuses_hybrid_cgroups(tmp_path: Path, client_rootfs: Path) -> None:
    require_binaries(Path(CRUN))
    if not Path(UNIFIED, "cgroup.controllers").read_text().strip():
        pytest.skip(f"{UNIFIED} has no controllers here: crun needs no wrapper")
    bundle = write_bundle(tmp_path / "b", client_rootfs, container_spec(HELLO))
    crun = Runc(binary=CRUN, global_args=("--root", str(tmp_path / "state")))
    res = runc_run(bundle, new_container_id("crun"), runc=crun)
    assert res.returncode != 0 and "hybrid mode not supported" in res.stderr, res.describe()


def test_crun_wrapper_runs_runc_bundle(client_rig: ClientRig, tmp_path: Path,
                                       client_rootfs: Path) -> None:
    wrapper = client_rig.crun_wrapper()
    bundle = write_bundle(tmp_path / "b", client_rootfs,
                          container_spec(["sh", "-c", "echo hello; cat /proc/self/cgroup"]))
    res = runc_run(bundle, new_container_id("crun"), runc=Runc(binary=str(wrapper)))
    client_rig.timings.add("crun wrapper run (runc bundle)", res.seconds)
    assert res.returncode == 0, res.describe()
    assert res.stdout.startswith("hello\n"), res.describe()
    assert f":devices:/{res.container_id}" in res.stdout  # crun used the v1 hierarchies


def test_docker_runtime_entry_with_crun_wrapper(docker: DockerDaemon) -> None:
    proc = docker.run(["sh", "-c", "echo hello; cat /proc/self/cgroup"], runtime="crun-wrapped")
    assert proc.returncode == 0 and proc.stdout.startswith("hello\n"), describe(proc)
    assert f":devices:/{docker.cgroup_parent}/" in proc.stdout, proc.stdout


def test_ctr_runc_binary_crun_wrapper(containerd: ContainerdDaemon, client_rig: ClientRig) -> None:
    proc = containerd.run(HELLO, runc_binary=client_rig.crun_wrapper())
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)


def test_podman_rootful_with_crun_wrapper(client_rig: ClientRig, podman_root: Podman) -> None:
    proc = podman_root.run(HELLO, runtime=str(client_rig.crun_wrapper()))
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)


def test_podman_rootless_with_crun_wrapper(client_rig: ClientRig, podman_user: Podman) -> None:
    assert podman_user.user is not None
    owner = (podman_user.user.uid, podman_user.user.gid)
    proc = podman_user.run(HELLO, runtime=str(client_rig.crun_wrapper(owner=owner)))
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), describe(proc)


@pytest.mark.today_engines(host=False)
def test_node_runs_its_own_engines(client_rig: ClientRig) -> None:
    """Every engine a node's tests use is the node's own (its Debian release's), not the
    host's: the versions differ from Debian 12's; they are logged for docs/runtimes.md."""
    host = Node(HOST).versions().splitlines()
    mine = client_rig.node.versions().splitlines()
    log.info("node %s:\n%s", client_rig.node.name, "\n".join(mine))
    assert len(mine) == len(host) == 7, mine
    for theirs, ours in zip(host, mine):
        assert ours != theirs and "not found" not in ours, (ours, theirs)
    assert client_rig.node.run("/usr/bin/dpkg-query", "-W", "nvhook").stdout.startswith(
        "nvhook\t")  # from our .deb
