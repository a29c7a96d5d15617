"""The Kubernetes installer (packaging/image/install-on-host) as it runs on a node.

The node is this machine's Debian 12 as a copy-on-write root with its own running containerd 1.6
(tests/fixtures/cri_host.py): the installer installs nvhook's .deb with the node's apt-get,
writes the volume-mounts settings, runs `nvhook runtime configure --runtime=containerd` and asks
systemd (a stand-in that logs) to restart containerd only when the config changed. Then, through
CRI, a pod with `runtime_handler: nvidia` and the device plugin's volume mount gets its GPU; a
second run changes and restarts nothing; a node whose config.toml lost the import (a containerd
upgrade) gets it back, with one restart; `uninstall` gives the config back byte for byte. On
Docker's containerd.io config (CRI disabled) the installer says so and changes nothing.

The node's config.toml is Debian's stock file with the two CRI settings this machine needs
(tests/fixtures/cri.py CRI_NEEDS: restrict_oom_score_adj, a free stream port).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.cri import CRI_NEEDS, DEBIAN_STOCK, DOCKER_CONTAINERD_IO, CriNode, CriNodes
from tests.fixtures.cri_api import PodResult
from tests.fixtures.cri_host import HostNode, HostNodes
from tests.fixtures.gpu_clients import GpuInstall, gpu_listing

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.usefixtures("client_leak_check")]
REPO = Path(__file__).resolve().parent.parent.parent
PROBE = ["sh", "-c", "nvidia-smi -L 2>&1; echo nodes:; ls /dev | grep -E '^nvidia[0-9]+$' || true"]
DEVICES = "/var/run/nvidia-container-devices"
CRI_HEADER = '  [plugins."io.containerd.grpc.v1.cri"]\n'
NODE_CONFIG = DEBIAN_STOCK.replace(CRI_HEADER, CRI_HEADER + "".join(
    f"    {line}\n" for line in CRI_NEEDS))
MAIN, DROP_IN = "/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import subprocess

    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([str(REPO / "packaging/build-deb"), "--output", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


def node_with(host_nodes: HostNodes, install: GpuInstall, config: str) -> HostNode:
    node = host_nodes.new(binds=(Path(install.sim.path).parent,))
    main = node.path(MAIN)
    main.write_text(config)
    node.systemctl("start", "containerd")
    return node


def use_sim_driver(node: HostNode, install: GpuInstall) -> None:
    """Point the installed config.toml at the simulated driver (a real node has its driver)."""
    path = node.path("/etc/nvidia-container-runtime/config.toml")
    sim = install.sim.path
    text = path.read_text()
    for old, new in (('#root = "/run/nvidia/driver"', f'root = "{sim}"'),
                     ('proc-root = "/proc"', f'proc-root = "{sim}/proc"'),
                     ('sys-root = "/sys"', f'sys-root = "{sim}/sys"\nsim-procfs = true')):
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text)


def gpu_pod(cri: CriNode, install: GpuInstall, index: int) -> PodResult:
    uuid = install.sim.gpus[index].uuid
    return cri.run_pod(cri.pod(PROBE, handler="nvidia", envs={"NVIDIA_VISIBLE_DEVICES": DEVICES},
                               mounts=[("/dev/null", f"{DEVICES}/{uuid}")]))


def check_gpu(result: PodResult, install: GpuInstall, index: int) -> None:
    assert result.exit_code == 0, result.describe()
    assert gpu_listing(result.output) == install.expect([index]), result.describe()


def run(node: HostNode, deb: Path, *args: str) -> str:
    proc = node.installer(*args, NVHOOK_DEB_DIR=str(deb.parent),
                          DEVICE_LIST_STRATEGY="volume-mounts")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def test_installer_on_a_debian_node(host_nodes: HostNodes, cri_nodes: CriNodes,
                                    gpu_install: GpuInstall, deb: Path) -> None:
    node = node_with(host_nodes, gpu_install, NODE_CONFIG)
    cri = node.wait_cri(cri_nodes)
    cri.import_images()
    assert cri.run_pod(cri.pod(["true"])).exit_code == 0
    first = run(node, deb)
    assert "Added the drop-in's directory to the imports" in first, first
    assert node.systemctl_calls() == ["start containerd", "restart containerd"]
    use_sim_driver(node, gpu_install)
    cri = node.wait_cri(cri_nodes)
    check_gpu(gpu_pod(cri, gpu_install, 2), gpu_install, 2)
    assert cri.run_pod(cri.pod(["true"])).exit_code == 0  # the default handler still works
    files = (node.path(MAIN).read_bytes(), node.path(DROP_IN).read_bytes())

    second = run(node, deb)  # a second run: nothing changes, nothing restarts
    assert "did not change: nothing to restart" in second, second
    assert (node.path(MAIN).read_bytes(), node.path(DROP_IN).read_bytes()) == files
    assert node.systemctl_calls().count("restart containerd") == 1

    node.path(MAIN).write_text(NODE_CONFIG)  # a containerd upgrade replaced config.toml
    node.systemctl("restart", "containerd")
    cri = node.wait_cri(cri_nodes)
    lost = gpu_pod(cri, gpu_install, 2)
    assert 'no runtime for "nvidia" is configured' in lost.error, lost.describe()
    run(node, deb)  # the next run brings the runtime back, with one restart
    assert node.systemctl_calls().count("restart containerd") == 3
    check_gpu(gpu_pod(node.wait_cri(cri_nodes), gpu_install, 4), gpu_install, 4)

    removed = run(node, deb, "uninstall")
    assert f"Restored {MAIN} from {MAIN}.nvhook.bak" in removed, removed
    assert node.path(MAIN).read_text() == NODE_CONFIG  # byte for byte
    assert not node.path(DROP_IN).exists() and not node.path(f"{MAIN}.nvhook.bak").exists()
    assert node.systemctl_calls().count("restart containerd") == 4
    assert node.in_node("dpkg-query", "-W", "-f=${Status}", "nvhook").stdout.startswith(
        "deinstall ok config-files")
    cri = node.wait_cri(cri_nodes)
    assert cri.run_pod(cri.pod(["true"])).exit_code == 0


def test_installer_on_dockers_containerd_io_config(host_nodes: HostNodes,
                                                   gpu_install: GpuInstall, deb: Path) -> None:
    """CRI disabled: the installer says so before it installs or changes anything."""
    node = node_with(host_nodes, gpu_install, DOCKER_CONTAINERD_IO)
    proc = node.installer(NVHOOK_DEB_DIR=str(deb.parent))
    assert proc.returncode == 1, proc.stderr
    assert "the CRI plugin is disabled (disabled_plugins has 'cri'" in proc.stderr, proc.stderr
    assert f"{MAIN}: the CRI plugin" in proc.stderr  # the node's path, not the mount's
    assert "nothing was installed or changed on this node" in proc.stderr
    assert node.path(MAIN).read_text() == DOCKER_CONTAINERD_IO
    assert not node.path("/etc/containerd/conf.d").exists()
    assert not node.path("/var/cache/nvhook").exists()
    assert node.in_node("dpkg-query", "-W", "nvhook").returncode != 0
    assert node.systemctl_calls() == ["start containerd"]
    assert node.containerd_pid() is not None
