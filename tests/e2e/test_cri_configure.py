"""`nvhook runtime configure --runtime=containerd` keeps a node working, checked through CRI.

A private containerd 1.6 with CRI (tests/fixtures/cri.py) is configured only by `nvhook runtime
configure` and then driven as kubelet drives it: after configure, the CRI plugin still loads,
the main config's CRI settings survive, a pod through the default handler runs, and a pod with
`runtime_handler: nvidia` gets exactly its GPU (8 simulated GPUs, tests/fixtures/gpu_clients.py).
Two configs: Debian's stock /etc/containerd/config.toml (no runtimes table: CRI's default `runc`
must survive the import) and one with CRI settings of its own (sandbox image, runc options,
`privileged_without_host_devices`, log line size), which must all survive. NVIDIA 1.20.0's
`nvidia-ctk runtime configure` is run on the stock config beside it (when /opt/peer-1.20 is
built): its drop-in drops `runtimes.runc`, and CRI fails to load.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.cri import CRI, DEBIAN_STOCK, CriNode, CriNodes
from tests.fixtures.cri_api import PodResult
from tests.fixtures.gpu_clients import PROBE, GpuInstall, gpu_listing

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.usefixtures("client_leak_check")]

NVIDIA_CTK_1_20 = Path("/opt/peer-1.20/bin/nvidia-ctk")
# a probe that also lists host block and loop devices (a privileged container gets them
# unless the runtime has privileged_without_host_devices)
HOST_PROBE = [PROBE[0], PROBE[1], PROBE[2] + "; echo host:; ls /dev | grep -E '^(vd|sd|loop)' "
              "| head -3"]
OWN_SETTINGS = """version = 2
root = "{workdir}/root"
state = "{workdir}/state"

[grpc]
  address = "{workdir}/containerd.sock"
[ttrpc]
  address = "{workdir}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "nvhook.test/pause:own"
  restrict_oom_score_adj = true
  stream_server_port = "0"
  max_container_log_line_size = 8192
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "{workdir}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      privileged_without_host_devices = true
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{workdir}/runc-root"
        SystemdCgroup = false
"""


def gpu_pod(node: CriNode, install: GpuInstall, index: int, **kw: object) -> PodResult:
    uuid = install.sim.gpus[index].uuid
    return node.run_pod(node.pod(HOST_PROBE, handler="nvidia",
                                 envs={"NVIDIA_VISIBLE_DEVICES": uuid}, **kw))


def check_gpu(result: PodResult, install: GpuInstall, index: int) -> str:
    """The pod ran and saw exactly GPU `index`; returns what it printed after `host:`."""
    assert result.state == "CONTAINER_EXITED" and result.exit_code == 0, result.describe()
    listing, _, host = result.output.partition("host:\n")
    assert gpu_listing(listing) == install.expect([index]), result.describe()
    return host


def configured(nodes: CriNodes, install: GpuInstall, text: str, private: bool) -> CriNode:
    node = nodes.new(text, private=private)
    before = node.config.read_text()
    proc = node.configure(f"--runtime-path={install.prefix}/nvidia-container-runtime")
    assert proc.returncode == 0, proc.stderr
    assert "Wrote updated config" in proc.stdout and "Added the drop-in's directory" in proc.stdout
    added = set(node.config.read_text().splitlines()) - set(before.splitlines())
    assert added == {f'imports = ["{node.drop_in.parent}/*.toml"]'}  # one line, nothing else
    assert Path(f"{node.config}.nvhook.bak").read_text() == before
    again = node.configure(f"--runtime-path={install.prefix}/nvidia-container-runtime")
    assert "already up to date" in again.stdout and "Added" not in again.stdout, again.stdout
    return node


def test_debian_stock_config(cri_nodes: CriNodes, gpu_install: GpuInstall) -> None:
    node = configured(cri_nodes, gpu_install, DEBIAN_STOCK, private=True)
    node.start()
    node.import_images()
    plain = node.run_pod(node.pod(["echo", "plain"]))
    assert (plain.exit_code, plain.output) == (0, "plain\n"), plain.describe()
    host = check_gpu(gpu_pod(node, gpu_install, 3), gpu_install, 3)
    assert host == ""  # unprivileged: no host devices
    host = check_gpu(gpu_pod(node, gpu_install, 5, privileged=True), gpu_install, 5)
    assert "loop0" in host  # privileged, no privileged_without_host_devices: host devices
    dump = node.config_dump()
    assert 'bin_dir = "/usr/lib/cni"' in dump.stdout  # Debian's CNI bin dir survives
    assert f'conf_dir = "{node.workdir}/cni"' in dump.stdout


def test_cri_settings_of_its_own_survive(cri_nodes: CriNodes, gpu_install: GpuInstall) -> None:
    node = configured(cri_nodes, gpu_install, OWN_SETTINGS, private=False)
    node.start()
    node.import_images(pause_ref="nvhook.test/pause:own")
    node.ctr("images", "rm", "registry.k8s.io/pause:3.6")  # only the configured one is there
    plain = node.run_pod(node.pod(["echo", "plain"], handler="runc"))
    assert (plain.exit_code, plain.output) == (0, "plain\n"), plain.describe()
    host = check_gpu(gpu_pod(node, gpu_install, 6, privileged=True), gpu_install, 6)
    assert host == ""  # privileged_without_host_devices, copied from runc, is respected
    dump = node.config_dump().stdout
    for setting in ('sandbox_image = "nvhook.test/pause:own"', "max_container_log_line_size = 8192",
                    "restrict_oom_score_adj = true", f'Root = "{node.workdir}/runc-root"'):
        assert setting in dump
    assert (node.workdir / "runc-root" / "k8s.io").is_dir()  # runc's and nvidia's root
    # a later change to the main config reaches containerd once configure runs again
    node.config.write_text(node.config.read_text().replace("= 8192", "= 4096"))
    assert "max_container_log_line_size = 8192" in node.config_dump().stdout  # masked
    proc = node.configure(f"--runtime-path={gpu_install.prefix}/nvidia-container-runtime")
    assert "Wrote updated config" in proc.stdout, proc.stderr
    assert "max_container_log_line_size = 4096" in node.config_dump().stdout


@pytest.mark.skipif(not os.access(NVIDIA_CTK_1_20, os.X_OK), reason=f"needs {NVIDIA_CTK_1_20}")
def test_nvidia_1_20_configure_on_the_debian_stock_config(cri_nodes: CriNodes,
                                                          gpu_install: GpuInstall) -> None:
    """For the record (docs/kubernetes.md): NVIDIA 1.20.0's drop-in for Debian's stock config
    copies the CRI section without `runtimes.runc`; containerd 1.6 replaces the section, and the
    CRI plugin does not load (every CRI call: unknown service runtime.v1.RuntimeService)."""
    node = cri_nodes.new(DEBIAN_STOCK)
    proc = subprocess.run([str(NVIDIA_CTK_1_20), "runtime", "configure", "--runtime=containerd",
                           f"--config={node.config}", f"--drop-in-config={node.drop_in}",
                           f"--nvidia-runtime-path={gpu_install.prefix}/nvidia-container-runtime"],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert proc.returncode == 0, proc.stderr
    drop_in = node.drop_in.read_text()
    assert f'[plugins."{CRI}".containerd.runtimes.nvidia]' in drop_in
    assert "runtimes.runc" not in drop_in
    with pytest.raises(RuntimeError, match="no corresponding runtime configured"):
        node.start()
    shutil.rmtree(node.drop_in.parent)
