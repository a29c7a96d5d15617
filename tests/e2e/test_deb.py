"""The Debian package: `packaging/build-deb` builds it, `apt-get install ./nvhook_*.deb` installs
it into a clean Debian root (mmdebstrap, apt variant: no Python yet) resolving its dependencies
from Debian, and there `nvhook --version`, `config check`, `doctor` and a GPU dry run against
the simulated driver work with the system python3 and Debian's python3-prctl/-psutil. Then
`dpkg -r` leaves only the conffile and `dpkg -P` nothing.

Needs root, mmdebstrap (packaging/setup.sh installs it) and the Debian mirror (about 40 s).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook import __version__
from nvhook.sim import SimRoot

pytestmark = [pytest.mark.root, pytest.mark.e2e]
REPO = Path(__file__).resolve().parent.parent.parent
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
LAUNCHERS = ("nvhook", "nvidia-container-runtime-hook", "nvidia-container-runtime",
             "nvidia-container-cli", "nvhook-runtime", "nvhook-hook")


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([str(REPO / "packaging/build-deb"), "--output", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip())
    assert path == out / f"nvhook_{__version__}_all.deb" and path.is_file()
    return path


@pytest.fixture(scope="module")
def debian_root(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None:
        pytest.skip("needs root and mmdebstrap (bash packaging/setup.sh)")
    root = tmp_path_factory.mktemp("debian") / "root"
    install = f'chroot "$1" apt-get install -y --no-install-recommends /tmp/{deb.name}'
    proc = subprocess.run(
        ["mmdebstrap", "--variant=apt", "--quiet", f"--customize-hook=copy-in {deb} /tmp",
         f"--customize-hook={install} > \"$1\"/tmp/apt.log 2>&1",
         SUITE, str(root), MIRROR],
        capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:] + _read(root / "tmp/apt.log")[-3000:]
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def in_root(root: Path, script: str, *, binds: tuple[str, ...] = (),
            stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`script` (sh) chrooted into `root` in a private mount namespace with /proc, /dev and
    the `binds` (host directories, at the same path)."""
    mounts = "mount -t proc proc \"$R/proc\" && mount --rbind /dev \"$R/dev\""
    for path in binds:
        mounts += f' && mkdir -p "$R{path}" && mount --bind {path} "$R{path}"'
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f'{mounts} && exec chroot "$R" /bin/sh -c "$0"', script],
        env={"R": str(root), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
        input=stdin, capture_output=True, text=True, timeout=300, check=False)


def test_package_fields_and_files(deb: Path) -> None:
    fields = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True,
                            check=True).stdout
    assert "Architecture: all" in fields
    assert ("Depends: python3 (>= 3.9), python3-prctl, python3-psutil, "
            "python3 (>= 3.11) | python3-tomli, python3-yaml") in fields
    for name in ("Conflicts", "Replaces"):
        line = next(x for x in fields.splitlines() if x.startswith(name + ":"))
        assert "nvidia-container-toolkit," in line and "libnvidia-container-tools" in line
    assert "Provides: nvidia-container-toolkit (= 1.17.8)" in fields
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    for path in [f"./usr/bin/{n}" for n in LAUNCHERS] + [
            "./etc/nvidia-container-runtime/config.toml",
            "./usr/share/containers/oci/hooks.d/oci-nvidia-hook.json",
            "./usr/lib/python3/dist-packages/nvhook/cli.py",
            "./usr/lib/python3/dist-packages/nvmount/engine.py",
            "./usr/share/man/man1/nvhook.1.gz", "./usr/share/doc/nvhook/copyright",
            "./lib/systemd/system/nvhook-cdi-refresh.service",
            "./lib/systemd/system/nvhook-cdi-refresh.path",
            "./lib/systemd/system/nvhook-cdi-refresh.timer",
            "./lib/udev/rules.d/71-nvhook-cdi-refresh.rules"]:
        assert f" {path}" in listing, path
    assert "__pycache__" not in listing and ".pyc" not in listing
    conffiles = subprocess.run(["dpkg-deb", "-I", str(deb), "conffiles"], capture_output=True,
                               text=True, check=True).stdout
    assert conffiles == "/etc/nvidia-container-runtime/config.toml\n"


def test_installed_package_runs(debian_root: Path, sim_root: SimRoot) -> None:
    proc = in_root(debian_root, "for n in " + " ".join(LAUNCHERS[:4]) + "; do "
                   "head -1 /usr/bin/$n; done; nvhook --version; nvhook config check; "
                   "python3 -c 'import prctl, psutil, yaml; yaml.CSafeLoader'; "
                   "dpkg -s nvhook | grep Status")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:4] == ["#!/usr/bin/python3 -IS"] * 4
    assert lines[4].startswith(f"nvhook version {__version__}")
    assert "config /etc/nvidia-container-runtime/config.toml" in proc.stdout
    assert "ok: no problems found" in proc.stdout
    assert "Status: install ok installed" in proc.stdout


def test_dry_run_and_doctor_in_the_installed_package(debian_root: Path,
                                                    sim_root: SimRoot) -> None:
    bundle = debian_root / "tmp/bundle"
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    env = ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=utility"]
    (bundle / "config.json").write_text(json.dumps(
        {"ociVersion": "1.0.2", "process": {"env": env}, "root": {"path": "/tmp/bundle/rootfs"}}))
    state = json.dumps({"ociVersion": "1.0.2", "id": "deb", "pid": 1, "bundle": "/tmp/bundle"})
    config = sim_root.config_path
    proc = in_root(debian_root, f"nvidia-container-runtime-hook -config {config} prestart "
                   "--dry-run", binds=(sim_root.path,), stdin=state)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["gpu_container"] is True
    assert "/dev/nvidia1" in json.dumps(plan["plan"]) and "/dev/nvidia0" not in json.dumps(
        plan["plan"])
    doctor = in_root(debian_root, f"nvhook --config {config} doctor --json",
                     binds=(sim_root.path,))
    found = {f["check"]: f for f in json.loads(doctor.stdout)["findings"]}
    assert found["driver"]["level"] == "ok", doctor.stderr
    assert found["hook"]["level"] == "ok"  # /usr/bin/nvidia-container-runtime-hook is ours


def test_kubernetes_installer_on_a_debian_host(deb: Path, debian_root: Path) -> None:
    """packaging/image/install-on-host against the Debian root as the node's file system:
    installs the package with the host's apt-get, the volume-mounts strategy, the containerd
    drop-in, no restart."""
    script = REPO / "packaging/image/install-on-host"
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         'mount -t proc proc "$HOST/proc" && mount --rbind /dev "$HOST/dev" && exec sh "$0"',
         str(script)],
        env={"HOST": str(debian_root), "NVHOOK_DEB_DIR": str(deb.parent), "ONESHOT": "true",
             "DEVICE_LIST_STRATEGY": "volume-mounts", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = (debian_root / "etc/nvidia-container-runtime/config.toml").read_text()
    assert "\naccept-nvidia-visible-devices-as-volume-mounts = true\n" in config
    assert "\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n" in config
    drop_in = (debian_root / "etc/containerd/conf.d/99-nvidia.toml").read_text()
    assert "/usr/bin/nvidia-container-runtime" in drop_in
    assert "restart containerd on this node" in proc.stderr
    assert "systemctl" not in proc.stderr
    shutil.rmtree(debian_root / "var/cache/nvhook")  # the installer's, not the package's
    shutil.rmtree(debian_root / "etc/containerd")


def test_remove_and_purge_leave_nothing(debian_root: Path, sim_root: SimRoot) -> None:
    """Runs last in this module: it removes the package."""
    find = ("find / -xdev \\( -name '*nvhook*' -o -name '*nvidia*' \\) "
            "-not -path '/var/lib/dpkg/*' -not -path '/var/log/*' -not -path '/proc/*' "
            "-not -path '/tmp/*' | sort")
    proc = in_root(debian_root, f"nvhook --config {sim_root.config_path} info >/dev/null && "
                   "ls -d /run/nvhook /usr/lib/python3/dist-packages/nvhook/__pycache__ && "
                   f"dpkg -r nvhook >/dev/null && {find} && "
                   "ls /etc/nvidia-container-runtime && echo --- && "
                   f"dpkg -P nvhook >/dev/null && {find}", binds=(sim_root.path,))
    assert proc.returncode == 0, proc.stderr
    after_remove, after_purge = proc.stdout.split("---\n")
    assert after_remove.splitlines()[2:] == ["/etc/nvidia-container-runtime",
                                             "config.toml"]
    assert after_purge == ""
