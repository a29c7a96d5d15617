"""Rootless Docker (Debian sid's Docker 28 through `dockerd-rootless.sh`, rootlesskit 2,
slirp4netns) on the cgroup-v2-only node (tests/fixtures/cgroup2_node.py), issue 28:

- CDI: `--device nvidia.com/gpu=0` with the spec in the node's /etc/cdi (Docker 28's
  default spec dirs, rootless too: daemon.json names none);
- the hook: `--runtime=nvidia`, registered by `nvhook runtime configure --runtime=docker
  --config ~/.config/docker/daemon.json` run as the user (the node's nvhook, from our .deb),
  nvhook's legacy wrapper adding the prestart hook;

each as the container's root and as `--user 1000:1000`. The container opens its GPU (ENXIO:
the simulated node has no driver) and the links the hook made are the container root's. Device
limits: none - rootless dockerd without systemd uses no cgroup (driver "none", even in a
cgroup delegated to the user: it needs systemd's driver for one), and the hook runs in
rootlesskit's user namespace, where no device program can be loaded: a bound GPU 1 opens too
(ENXIO), and the hook's debug log says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_userns import CDI, LEGACY, PROBE, V2Rig, not_roots, wrong
from tests.fixtures.cgroup2_node import open_errors
from tests.fixtures.clientrig.rootless_docker import (
    ADD_TUN,
    DOCKERD_ROOTLESS,
    ROOTLESSKIT,
    SLIRP4NETNS,
    RootlessDocker,
)
from tests.fixtures.clientrig.users import ensure_rootless_user
from tests.fixtures.clients import IMAGE_REF, ClientRig, describe
from tests.fixtures.gpu_clients import GpuInstall, install
from tests.fixtures.nodes import Node

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.rootless,
              pytest.mark.today_engines, pytest.mark.usefixtures("client_leak_check")]
OWN_NODE = True  # engine_node below, not nodes.parametrize_nodes's host


@pytest.fixture(scope="module")
def engine_node(cgroup2_node: Node) -> Node:
    """This module's rig runs on the cgroup-v2-only sid node."""
    return cgroup2_node


@pytest.fixture(scope="module")
def v2(client_rig: ClientRig, gpu_install: GpuInstall) -> V2Rig:
    return V2Rig(client_rig, gpu_install)


@pytest.fixture(scope="module")
def docker(v2: V2Rig, launchers: tuple[Path, Path]) -> Iterator[RootlessDocker]:
    """dockerd-rootless.sh as the rootless test user, `nvidia` registered in its daemon.json
    by `nvhook runtime configure` run as that user."""
    rig, node = v2.rig, v2.node
    rig.require(DOCKERD_ROOTLESS, ROOTLESSKIT, SLIRP4NETNS, Path("/usr/bin/ip"),
                Path("/usr/bin/newuidmap"), Path("/usr/sbin/dockerd"))
    proc = node.run("/bin/sh", "-c", ADD_TUN)
    assert proc.returncode == 0, proc.stderr
    user = ensure_rootless_user()
    node.add_user(user.name)
    daemon = RootlessDocker(rig.short_dir("nvhook-rldocker-"), user, timings=rig.timings,
                            enter=rig.enter).setup()
    rig.own(daemon.stop, None)
    configured = daemon.as_user("/usr/bin/nvhook", "runtime", "configure", "--runtime=docker",
                                "--config", str(daemon.config_path), "--runtime-path",
                                str(launchers[0] / "nvidia-container-runtime"))
    assert configured.returncode == 0, describe(configured)
    daemon.start()
    daemon.import_rootfs(rig.rootfs, IMAGE_REF)
    yield daemon


@pytest.fixture(scope="module")
def launchers(v2: V2Rig) -> tuple[Path, Path]:
    """(prefix, hook log): the legacy launchers with the hook's debug log in a dir the
    rootless user can write (what the hook decided about device limits)."""
    logs = v2.rig.short_dir("nvhook-rllog-")
    logs.chmod(0o1777)
    config = v2.gpu.prefix.parent / "rootless.toml"
    config.write_text(v2.gpu.legacy_config.read_text().replace(
        "[nvidia-container-cli]\n", f'[nvidia-container-cli]\ndebug = "{logs}/hook.log"\n', 1))
    prefix = v2.gpu.prefix.parent / "rootless-bin"
    install(prefix, config, node=v2.node)
    return prefix, logs / "hook.log"


def probe(v2: V2Rig, docker: RootlessDocker, flags: list[str],
          runtime: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(open errors by node, owner by path) of PROBE in a rootless Docker container."""
    proc = docker.run(PROBE, flags=[*flags, *v2.denied()], runtime=runtime)
    assert proc.returncode == 0, describe(proc) + "\n--- dockerd:\n" + docker.log_tail()
    errors = open_errors(proc.stdout.partition("owners:")[0])
    owners = dict(line.rsplit(" ", 1) for line in
                  proc.stdout.partition("owners:\n")[2].splitlines() if " " in line)
    return errors, owners


USERS = {"root": [], "user-1000": ["--user", "1000:1000"]}


@pytest.mark.parametrize("user", list(USERS))
def test_rootless_docker_cdi(v2: V2Rig, docker: RootlessDocker, user: str) -> None:
    errors, owners = probe(v2, docker, [*USERS[user], *CDI])
    assert not wrong(errors, "ENXIO"), errors  # no cgroup, no device program: no limits
    assert not not_roots(owners), owners


@pytest.mark.parametrize("user", list(USERS))
def test_rootless_docker_runtime_nvidia(v2: V2Rig, docker: RootlessDocker,
                                        launchers: tuple[Path, Path], user: str) -> None:
    launchers[1].unlink(missing_ok=True)
    errors, owners = probe(v2, docker, [*USERS[user], *LEGACY], runtime="nvidia")
    log = launchers[1].read_text() if launchers[1].exists() else "(no hook log)"
    assert not wrong(errors, "ENXIO"), errors
    assert "the hook runs in a user namespace (a rootless engine): no device limits" in log, \
        log[-3000:]
    assert not not_roots(owners), owners


def test_rootless_docker_configured_as_the_user(docker: RootlessDocker) -> None:
    """`nvhook runtime configure` as the user wrote the user's daemon.json, kept its keys,
    and the daemon it configured knows the runtime; the daemon is rootless, without cgroups
    (why no device limits hold)."""
    config = json.loads(docker.config_path.read_text())
    assert config["runtimes"]["nvidia"]["path"].endswith("/nvidia-container-runtime"), config
    assert config["storage-driver"] == "overlay2", config  # the user's own keys stay
    assert docker.config_path.stat().st_uid == docker.user.uid
    info = docker.docker("info", "--format", "{{range $k, $v := .Runtimes}}{{$k}} {{end}}| "
                         "{{.CgroupDriver}} | {{json .SecurityOptions}}")
    assert info.returncode == 0, describe(info)
    runtimes, driver, options = (part.strip() for part in info.stdout.split("|"))
    assert "nvidia" in runtimes.split(), info.stdout
    # no systemd, nothing delegated: rootless dockerd makes no cgroups at all
    assert (driver, "name=rootless" in options) == ("none", True), info.stdout
