"""The Kubernetes manifest and the installer image's recipe and script (no cluster here: their
structure, and the script's plan of commands in its dry-run mode)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent.parent
MANIFEST = REPO / "packaging/kubernetes/nvhook-daemonset.yaml"
DOCKERFILE = REPO / "packaging/image/Dockerfile"
SCRIPT = REPO / "packaging/image/install-on-host"


def _documents() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert all({"apiVersion", "kind", "metadata"} <= set(d) for d in docs)
    return {d["kind"]: d for d in docs}


def test_manifest_kinds_and_runtime_class() -> None:
    docs = _documents()
    assert set(docs) == {"Namespace", "RuntimeClass", "DaemonSet"}
    assert docs["RuntimeClass"]["apiVersion"] == "node.k8s.io/v1"
    assert docs["RuntimeClass"]["handler"] == "nvidia"  # `runtime configure`'s default name
    assert docs["DaemonSet"]["metadata"]["namespace"] == docs["Namespace"]["metadata"]["name"]


def test_daemonset_structure() -> None:
    ds = _documents()["DaemonSet"]
    assert ds["apiVersion"] == "apps/v1"
    spec = ds["spec"]
    template = spec["template"]
    labels = template["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    pod = template["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"]
    (container,) = pod["containers"]
    assert container["securityContext"] == {"privileged": True}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"HOST": "/host", "RUNTIME": "containerd", "DEVICE_LIST_STRATEGY": "envvar",
                   "RESTART_RUNTIME": "true"}  # restarts only when it changed the config
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert mounts == {"host": env["HOST"]} and volumes == {"host": "/"}
    assert container["image"].startswith("nvhook-installer:")


def test_image_recipe_uses_debian_packages_only() -> None:
    lines = [x for x in DOCKERFILE.read_text().splitlines() if x and not x.startswith("#")]
    assert lines[0] == "FROM debian:bookworm-slim"
    text = "\n".join(lines)
    assert "pip" not in text and "curl" not in text and "wget" not in text
    assert "apt-get install -y --no-install-recommends /opt/nvhook/nvhook_*_all.deb" in text
    assert "COPY packaging/image/install-on-host /usr/local/sbin/nvhook-install-on-host" in text
    assert 'ENTRYPOINT ["/usr/local/sbin/nvhook-install-on-host"]' in text


def _dry_run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "nvhook_0.1.0_all.deb").write_text("")
    full = {"PATH": "/usr/bin:/bin", "NVHOOK_DRY_RUN": "1", "HOST": "/host",
            "NVHOOK_DEB_DIR": str(tmp_path), **env}
    return subprocess.run(["sh", str(SCRIPT)], capture_output=True, text=True, env=full,
                          timeout=60, check=False)


def _commands(proc: subprocess.CompletedProcess[str]) -> list[str]:
    prefix = "nvhook-install-on-host: + "
    return [x[len(prefix):] for x in proc.stderr.splitlines() if x.startswith(prefix)]


def test_installer_plan_default(tmp_path: Path) -> None:
    proc = _dry_run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _commands(proc) == [
        f"chroot /host: /var/cache/nvhook/nvhook_0.1.0_all.deb <- {tmp_path}/nvhook_0.1.0_all.deb"
        " (staged, renamed)",
        "chroot /host apt-get install -y --no-install-recommends "
        "/var/cache/nvhook/nvhook_0.1.0_all.deb",
        "chroot /host nvhook config check",
        "chroot /host nvhook runtime configure --runtime=containerd",
        "chroot /host systemctl restart containerd",
        "chroot /host nvhook doctor",
    ]
    assert "the restart below happens only if the containerd config changed" in proc.stderr


@pytest.mark.parametrize(("strategy", "expected"), [
    ("volume-mounts", "chroot /host: /etc/nvidia-container-runtime/config.toml: accept-nvidia-"
                      "visible-devices-as-volume-mounts = true"),
    ("cdi", "chroot /host nvhook cdi generate --output /var/run/cdi/nvidia.yaml")])
def test_installer_strategies_without_restart(tmp_path: Path, strategy: str,
                                              expected: str) -> None:
    proc = _dry_run(tmp_path, DEVICE_LIST_STRATEGY=strategy, RESTART_RUNTIME="false")
    assert proc.returncode == 0, proc.stderr
    commands = _commands(proc)
    assert any(c.startswith(expected) for c in commands)
    assert not any("systemctl" in c for c in commands)
    assert "restart containerd on this node" in proc.stderr


def test_installer_uninstall_plan(tmp_path: Path) -> None:
    proc = _dry_run(tmp_path, ACTION="uninstall")
    assert proc.returncode == 0, proc.stderr
    assert _commands(proc) == [
        "chroot /host nvhook runtime configure --runtime=containerd --remove",
        "chroot /host systemctl restart containerd",
        "chroot /host apt-get remove -y nvhook",
        "chroot /host rm -rf /var/cache/nvhook",
    ]


def test_installer_refuses_bad_settings(tmp_path: Path) -> None:
    proc = _dry_run(tmp_path, DEVICE_LIST_STRATEGY="magic")
    assert proc.returncode == 1 and "use envvar, volume-mounts or cdi" in proc.stderr
    proc = _dry_run(tmp_path, RUNTIME="lxc")
    assert proc.returncode == 1 and "use containerd, crio or docker" in proc.stderr
    proc = _dry_run(tmp_path, ACTION="upgrade")
    assert proc.returncode == 1 and "use install or uninstall" in proc.stderr
    os.unlink(tmp_path / "nvhook_0.1.0_all.deb")
    proc = subprocess.run(["sh", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "NVHOOK_DRY_RUN": "1",
                               "NVHOOK_DEB_DIR": str(tmp_path)}, check=False)
    assert proc.returncode == 1 and "no nvhook_*_all.deb in" in proc.stderr


def test_cdi_refresh_units() -> None:
    """The service writes the spec where CDI runtimes look (/var/run/cdi, a default spec dir),
    only with a driver; the path unit starts it when the driver changes."""
    from nvhook.config.model import config_from_document

    service = (REPO / "packaging/systemd/nvhook-cdi-refresh.service").read_text()
    assert ("ExecStart=/usr/bin/nvhook cdi refresh --output /var/run/cdi/nvidia.yaml --wait 120"
            in service)
    # issue 31 / toolkit #1979: the service runs without /dev/nvidiactl (it makes the nodes),
    # only where a driver is loaded or installed (Debian's nvidia-current.ko too)
    assert "ConditionPathExists=/dev/nvidiactl" not in service and "Type=oneshot" in service
    assert "test -d /proc/driver/nvidia || grep -qE \"/nvidia(-current)?[.]ko\"" in service
    dropin = (REPO / "packaging/systemd/nvhook-cdi-refresh.service.d/10-engines.conf")
    assert "Before=docker.service containerd.service crio.service" in dropin.read_text()  # #2019
    timer = (REPO / "packaging/systemd/nvhook-cdi-refresh.timer").read_text()
    assert "OnUnitActiveSec=1min" in timer and "Unit=nvhook-cdi-refresh.service" in timer
    rules = (REPO / "packaging/udev/71-nvhook-cdi-refresh.rules").read_text().splitlines()
    rules = [r for r in rules if r and not r.startswith("#")]
    assert len(rules) == 2 and all(r.endswith(
        'RUN+="/bin/systemctl --no-block start nvhook-cdi-refresh.service"') for r in rules)
    assert 'SUBSYSTEM=="module", KERNEL=="nvidia|nvidia_uvm' in rules[0]  # module reload
    assert "|nvidia_current|" in rules[0]  # Debian's module name
    assert 'ENV{PCI_ID}=="10DE:*"' in rules[1] and "bind|unbind" in rules[1]  # hot-plug
    assert "/var/run/cdi" in config_from_document({}, None).runtime.modes_cdi_spec_dirs
    path = (REPO / "packaging/systemd/nvhook-cdi-refresh.path").read_text()
    assert "Unit=nvhook-cdi-refresh.service" in path
    assert "PathChanged=/lib/modules/%v/modules.dep" in path
    if subprocess.run(["which", "systemd-analyze"], capture_output=True).returncode == 0:
        proc = subprocess.run(["systemd-analyze", "verify", "--man=no",
                               str(REPO / "packaging/systemd/nvhook-cdi-refresh.path"),
                               str(REPO / "packaging/systemd/nvhook-cdi-refresh.timer"),
                               str(REPO / "packaging/systemd/nvhook-cdi-refresh.service")],
                              capture_output=True, text=True, check=False, timeout=60)
        assert "Unknown" not in proc.stderr and "syntax" not in proc.stderr, proc.stderr
