"""CDI end to end: `nvhook cdi generate` for the simulated driver, Podman 4.3 (private storage,
an image from `podman import`) runs `--device nvidia.com/gpu=N` from it, and the spec's hooks
(nvhook's own launcher) finish the container. Podman 4.3 reads specs only from /etc/cdi and
/var/run/cdi: it runs in a private mount namespace whose /etc is an overlay holding the spec,
so the host's /etc is never touched."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.clientrig import podman as podman_module
from tests.fixtures.clientrig.podman import Podman
from tests.fixtures.clients import ClientRig, describe
from tests.fixtures.gpu_clients import PROBE, GpuInstall, gpu_listing, nvhook

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.usefixtures("client_leak_check")]

WRAPPER = """#!/bin/sh
# podman in a private mount namespace whose /etc is an overlay with the CDI spec in etc/cdi
exec unshare -m --propagation private sh -c 'mount -t overlay overlay \
  -o lowerdir=/etc,upperdir={upper},workdir={work} /etc && exec /usr/bin/podman "$@"' sh "$@"
"""


@pytest.fixture(scope="module")
def cdi_podman(client_rig: ClientRig, gpu_install: GpuInstall) -> tuple[Podman, Path]:
    """(podman that sees the generated spec, the spec's path in the overlay's upper dir)."""
    work = client_rig.short_dir("nvhook-cdi-")
    upper, scratch = work / "upper", work / "work"
    (upper / "cdi").mkdir(parents=True)
    scratch.mkdir()
    spec = upper / "cdi" / "nvidia.yaml"
    proc = nvhook("--config", gpu_install.sim.config_path, "cdi", "generate", "--output",
                  str(spec), "--hook-path", f"{gpu_install.prefix}/nvhook-hook")
    assert proc.returncode == 0, proc.stderr
    wrapper = work / "podman"
    wrapper.write_text(WRAPPER.format(upper=upper, work=scratch))
    wrapper.chmod(0o755)
    podman = client_rig.podman()
    return podman, spec


def test_podman_runs_one_cdi_gpu(cdi_podman: tuple[Podman, Path], client_rig: ClientRig,
                                 gpu_install: GpuInstall,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    podman, spec = cdi_podman
    wrapper = spec.parent.parent.parent / "podman"
    monkeypatch.setattr(podman_module, "PODMAN", wrapper)
    if podman.image is None:
        podman.import_rootfs(client_rig.rootfs, "nvhook.test/busybox:latest")
    proc = podman.run(["sh", "-c", PROBE[2] + "; echo libs:; ls /usr/lib/x86_64-linux-gnu "
                       "| grep -c '^libcuda.so' || true; echo gpus:; "
                       "ls /proc/driver/nvidia/gpus | wc -l"],
                      flags=["--device", "nvidia.com/gpu=1"])
    assert proc.returncode == 0, describe(proc)
    head, _, libs = proc.stdout.partition("libs:\n")
    assert gpu_listing(head) == gpu_install.expect([1]), describe(proc)
    count, _, gpus = libs.partition("gpus:\n")
    assert int(count) >= 2  # libcuda.so.<version>, libcuda.so.1 (and libcuda.so)
    assert gpus.strip() == "1"  # the procfs hook: only the container's GPU


def test_podman_cdi_all_and_by_uuid(cdi_podman: tuple[Podman, Path], client_rig: ClientRig,
                                    gpu_install: GpuInstall,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    podman, spec = cdi_podman
    monkeypatch.setattr(podman_module, "PODMAN", spec.parent.parent.parent / "podman")
    if podman.image is None:
        podman.import_rootfs(client_rig.rootfs, "nvhook.test/busybox:latest")
    uuid = next(g.uuid for g in gpu_install.sim.gpus if g.index == 3)
    proc = podman.run(PROBE, flags=["--device", f"nvidia.com/gpu={uuid}"])
    assert proc.returncode == 0, describe(proc)
    assert gpu_listing(proc.stdout) == gpu_install.expect([3]), describe(proc)
    proc = podman.run(PROBE, flags=["--device", "nvidia.com/gpu=all"])
    assert proc.returncode == 0, describe(proc)
    assert gpu_listing(proc.stdout) == gpu_install.expect(list(range(8))), describe(proc)
    assert os.path.exists(spec)


@pytest.mark.parametrize("how", ["env", "annotation"])
def test_wrapper_resolves_cdi_requests(client_rig: ClientRig, gpu_install: GpuInstall,
                                       tmp_path: Path, how: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime wrapper (runc) applies the spec's edits for `nvidia.com/gpu=2` named in
    NVIDIA_VISIBLE_DEVICES or in a cdi.k8s.io/ annotation, then runc runs the spec's hooks."""
    import json

    from tests.e2e.test_runtimes import RUNC, recorder, wrapped_run, wrapper_config

    spec_dir = tmp_path / "cdi"
    proc = nvhook("--config", gpu_install.sim.config_path, "cdi", "generate", "--output",
                  str(spec_dir / "nvidia.json"), "--hook-path",
                  f"{gpu_install.prefix}/nvhook-hook")
    assert proc.returncode == 0, proc.stderr
    script, copy = recorder(tmp_path, RUNC)
    config = wrapper_config(gpu_install, tmp_path / "c.toml", script, spec=False)
    config.write_text(f'nvidia-container-runtime.modes.cdi.spec-dirs = ["{spec_dir}"]\n'
                      + config.read_text())
    env = ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2"] if how == "env" else ["A=b"]
    if how == "annotation":
        import tests.e2e.test_runtimes as runtimes

        original = runtimes.container_spec

        def annotated(*args: Any, **kwargs: Any) -> dict[str, Any]:
            doc = original(*args, **kwargs)
            doc["annotations"] = {"cdi.k8s.io/nvidia-device-plugin_abc": "nvidia.com/gpu=2"}
            return doc

        monkeypatch.setattr(runtimes, "container_spec", annotated)
    proc, _, _ = wrapped_run(client_rig, gpu_install, tmp_path, config, env, PROBE)
    assert proc.returncode == 0, describe(proc)
    assert gpu_listing(proc.stdout) == gpu_install.expect([2]), describe(proc)
    received = json.loads(copy.read_text())
    hooks = received["hooks"]["createRuntime"]
    assert [h["args"][3] for h in hooks] == ["create-symlinks", "update-ldcache", "procfs"]
    assert not received["hooks"].get("prestart")  # no legacy hook for a CDI request
    if how == "env":
        assert "NVIDIA_VISIBLE_DEVICES=void" in received["process"]["env"]


def test_wrapper_names_an_unknown_cdi_device(client_rig: ClientRig, gpu_install: GpuInstall,
                                             tmp_path: Path) -> None:
    from tests.e2e.test_runtimes import RUNC, wrapped_run, wrapper_config

    config = wrapper_config(gpu_install, tmp_path / "c.toml", RUNC, spec=False)
    config.write_text(f'nvidia-container-runtime.modes.cdi.spec-dirs = ["{tmp_path}"]\n'
                      + config.read_text())
    proc, _, _ = wrapped_run(client_rig, gpu_install, tmp_path, config,
                             ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=9"], ["true"])
    assert proc.returncode != 0
    assert "unresolvable CDI devices nvidia.com/gpu=9" in proc.stderr
