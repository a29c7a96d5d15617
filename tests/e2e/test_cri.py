"""The NVIDIA device plugin's strategies through CRI, as kubelet runs a GPU pod.

One private containerd 1.6 with CRI (tests/fixtures/cri.py) on Debian's stock config, whose
runtimes come only from `nvhook runtime configure`: `nvidia` (the simulated driver's config,
set as the default runtime), `nvidia-strict` (the installer's volume-mounts settings:
`accept-nvidia-visible-devices-as-volume-mounts = true`,
`accept-nvidia-visible-devices-envvar-when-unprivileged = false`) and `nvidia-cdi` (CDI spec
dirs holding `nvhook cdi generate`'s spec). Each pod is what kubelet asks for after the device
plugin's Allocate: the container config carries

    envvar           NVIDIA_VISIBLE_DEVICES=<uuids>
    volume-mounts    /dev/null mounted at /var/run/nvidia-container-devices/<uuid>
                     (and NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices)
    cdi-annotations  cdi.k8s.io/nvidia-device-plugin_<id> = nvidia.com/gpu=<uuid>, which
                     containerd 1.6 passes to the runtime because configure lists
                     `cdi.k8s.io/*` in the handler's container_annotations

and must see exactly its GPUs (`nvidia-smi -L` and its /dev/nvidia<N> nodes). Also: an
unprivileged pod asking by env under the strict policy gets no GPU (as NVIDIA's hook: ignored,
so CUDA images, which all set NVIDIA_VISIBLE_DEVICES=all, still start), a request nvhook refuses
fails the container with nvhook's one-line error in the CRI ContainerStatus, a pod without GPUs
through `nvidia` sees exactly what it sees through runc, and with `nvidia` as the default runtime
every pod (its pause container too) passes through the wrapper: timed against runc.
"""

from __future__ import annotations

import logging
import shutil
import statistics
from pathlib import Path

import pytest

from tests.fixtures.cri import DEBIAN_STOCK, CriNode, CriNodes
from tests.fixtures.cri_api import PodResult
from tests.fixtures.gpu_clients import GpuInstall, gpu_listing, nvhook

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.usefixtures("client_leak_check")]
log = logging.getLogger(__name__)
DEVICE_LIST = "/var/run/nvidia-container-devices"
STRICT = ('accept-nvidia-visible-devices-as-volume-mounts = true\n'
          'accept-nvidia-visible-devices-envvar-when-unprivileged = false\n')
PROBE = ["sh", "-c", "nvidia-smi -L 2>&1; echo nodes:; ls /dev | grep -E '^nvidia[0-9]+$' || true"]
VIEW = ["sh", "-c", "awk '{print $5, $6}' /proc/self/mountinfo; ls -la /dev; env | sort; id"]


@pytest.fixture(scope="module")
def node(cri_module_nodes: CriNodes, gpu_install: GpuInstall) -> CriNode:
    """The node: runtimes nvidia-strict, nvidia-cdi and nvidia (the default)."""
    base = gpu_install.prefix.parent
    sim_config = Path(gpu_install.sim.config_path).read_text()
    strict, cdi = base / "strict.toml", base / "cdi.toml"
    strict.write_text(STRICT + sim_config)
    spec_dir = base / "cdi"
    cdi.write_text(f'nvidia-container-runtime.modes.cdi.spec-dirs = ["{spec_dir}"]\n' + sim_config)
    proc = nvhook("--config", gpu_install.sim.config_path, "cdi", "generate", "--output",
                  str(spec_dir / "nvidia.yaml"), "--hook-path", f"{gpu_install.prefix}/nvhook-hook")
    assert proc.returncode == 0, proc.stderr
    gpu_install.install(base / "strict-bin", strict)
    gpu_install.install(base / "cdi-bin", cdi)
    node = cri_module_nodes.new(DEBIAN_STOCK)
    # today's containerd (1.7, 2.x) also reads CDI devices named in CRI (cdi_devices): the
    # spec goes to the node's /etc/cdi (a Debian node's root is this session's copy)
    engines = gpu_install.node
    if not engines.is_host:
        etc_cdi = engines.path("/etc/cdi")
        etc_cdi.mkdir(parents=True, exist_ok=True)
        shutil.copy(spec_dir / "nvidia.yaml", etc_cdi / "nvidia.yaml")
    cdi_on = () if engines.is_host else ("--enable-cdi",)
    for name, prefix, extra in (("nvidia-strict", base / "strict-bin", ()),
                                ("nvidia-cdi", base / "cdi-bin", ()),
                                ("nvidia", gpu_install.prefix, ("--set-as-default", *cdi_on))):
        proc = node.configure(f"--runtime-name={name}",
                              f"--runtime-path={prefix}/nvidia-container-runtime", *extra)
        assert proc.returncode == 0, proc.stderr
    node.start()
    node.import_images()
    return node


def check(result: PodResult, install_: GpuInstall, indexes: list[int]) -> None:
    assert result.state == "CONTAINER_EXITED" and result.exit_code == 0, result.describe()
    assert gpu_listing(result.output) == install_.expect(indexes), result.describe()


def uuids(install_: GpuInstall, *indexes: int) -> list[str]:
    return [install_.sim.gpus[i].uuid for i in indexes]


@pytest.mark.today_engines
def test_envvar_strategy(node: CriNode, gpu_install: GpuInstall) -> None:
    pod = node.pod(PROBE, handler="nvidia",
                   envs={"NVIDIA_VISIBLE_DEVICES": ",".join(uuids(gpu_install, 1, 4))})
    check(node.run_pod(pod), gpu_install, [1, 4])


def test_volume_mounts_strategy(node: CriNode, gpu_install: GpuInstall) -> None:
    (uuid,) = uuids(gpu_install, 2)
    pod = node.pod(PROBE, handler="nvidia-strict", envs={"NVIDIA_VISIBLE_DEVICES": DEVICE_LIST},
                   mounts=[("/dev/null", f"{DEVICE_LIST}/{uuid}")])
    check(node.run_pod(pod), gpu_install, [2])


@pytest.mark.today_engines
def test_cdi_annotations_strategy(node: CriNode, gpu_install: GpuInstall) -> None:
    (uuid,) = uuids(gpu_install, 7)
    pod = node.pod(PROBE, handler="nvidia-cdi",
                   annotations={"cdi.k8s.io/nvidia-device-plugin_0a1b": f"nvidia.com/gpu={uuid}"})
    check(node.run_pod(pod), gpu_install, [7])


@pytest.mark.today_engines(host=False)
def test_cdi_devices_of_a_claim(node: CriNode, gpu_install: GpuInstall) -> None:
    """A DRA-style claim: kubelet names the CDI devices in CRI's ContainerConfig.CDI_devices
    (containerd 1.7 and 2.x; 1.6 has no such field); containerd applies nvhook's spec from
    /etc/cdi itself, with plain runc, and runs the spec's hook."""
    (uuid,) = uuids(gpu_install, 5)
    pod = node.pod(PROBE, handler="runc", cdi_devices=[f"nvidia.com/gpu={uuid}"])
    check(node.run_pod(pod), gpu_install, [5])


def test_strict_policy_ignores_an_unprivileged_env_request(node: CriNode,
                                                           gpu_install: GpuInstall) -> None:
    env = {"NVIDIA_VISIBLE_DEVICES": uuids(gpu_install, 0)[0]}
    check(node.run_pod(node.pod(PROBE, handler="nvidia-strict", envs=env)), gpu_install, [])
    privileged = node.pod(PROBE, handler="nvidia-strict", envs=env, privileged=True)
    check(node.run_pod(privileged), gpu_install, [0])  # the policy lets privileged pods ask


@pytest.mark.parametrize(("envs", "error"), [
    ({"NVIDIA_VISIBLE_DEVICES": "GPU-00000000-0000-0000-0000-000000000000"},
     "GPU-00000000-0000-0000-0000-000000000000"),
    ({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_REQUIRE_CUDA": "cuda>=99.0"}, "cuda>=99.0"),
], ids=["unknown-gpu", "unmet-requirement"])
def test_refused_request_fails_the_container_with_one_line(node: CriNode, envs: dict[str, str],
                                                           error: str) -> None:
    result = node.run_pod(node.pod(PROBE, handler="nvidia", envs=envs))
    assert result.reason == "StartError" and result.exit_code == 128, result.describe()
    assert error in result.message and "Traceback" not in result.message, result.describe()
    hook_stderr = result.message.split("error running hook #0: ", 1)[1].split("stderr: ", 1)[1]
    assert len(hook_stderr.splitlines()) == 1, result.describe()  # nvhook's one line
    log.info("CRI ContainerStatus message: %s", result.message)


def test_pod_without_gpus_sees_no_change(node: CriNode) -> None:
    views = {h: node.run_pod(node.pod(VIEW, handler=h)) for h in ("runc", "nvidia")}
    for result in views.values():
        assert result.exit_code == 0, result.describe()
    assert views["nvidia"].output == views["runc"].output
    assert "nvidia" not in views["nvidia"].output


def test_nvidia_as_default_runtime(node: CriNode, gpu_install: GpuInstall) -> None:
    """Every pod through the default handler passes through the wrapper (its pause container
    too); a GPU pod needs no RuntimeClass. Pod times against runc, alternating (logged)."""
    env = {"NVIDIA_VISIBLE_DEVICES": uuids(gpu_install, 5)[0]}
    check(node.run_pod(node.pod(PROBE, envs=env)), gpu_install, [5])
    runs: dict[str, list[PodResult]] = {"runc": [], "": []}
    for _ in range(5):
        for handler, results in runs.items():
            result = node.run_pod(node.pod(["true"], handler=handler))
            assert result.exit_code == 0, result.describe()
            results.append(result)
    for handler, results in runs.items():
        calls = ("RunPodSandbox", "CreateContainer", "StartContainer", "StopPodSandbox")
        medians = {c: statistics.median(r.seconds[c] for r in results) * 1000 for c in calls}
        log.info("pods through %s (median of 5, ms): %s, sum %.0f", handler or "nvidia (default)",
                 ", ".join(f"{c} {v:.0f}" for c, v in medians.items()), sum(medians.values()))
