"""The Debian package: `packaging/build-deb` builds it, `apt-get install ./nvhook_*.deb` installs
it into clean Debian roots of every release the docs name (bullseye, Python 3.9; bookworm, 3.11;
trixie, 3.13; sid, 3.14 (marked today_engines); with NVHOOK_LONG=1 also Ubuntu 22.04/24.04
where this machine's apt sources have an Ubuntu archive), and there, with the release's system
python3 and its python3-prctl and TOML reader (python3-toml on bullseye), `nvhook
--version`, `config check` (of the default file and of one outside the simple subset), a GPU
dry run against the simulated driver and `doctor` work. Then `dpkg -r` leaves only the conffile
and `dpkg -P` nothing.
NVHOOK_DEB_RELEASES="bullseye trixie" picks releases.

The roots come from tests/fixtures/debroot.py (`deps_tarball`): the machine's own Debian mirror,
bootstrapped once with the package's dependencies (an `nvhook-deps` package with the same
Depends, installed by apt from the archive, then purged) and cached; each run extracts the
cached root and installs the package with apt-get there. Needs root and mmdebstrap
(`packaging/setup.sh --clients`). Cost: ~30 s per release to bootstrap, ~10 s per release from
the cache.
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
from nvhook.dev.sim import SimRoot
from tests.fixtures.debroot import (
    RELEASES,
    Release,
    deps_tarball,
    extract,
    in_root,
    package_depends,
)

pytestmark = [pytest.mark.root, pytest.mark.e2e]
REPO = Path(__file__).resolve().parent.parent.parent
LAUNCHERS = ("nvhook", "nvidia-container-runtime-hook", "nvidia-container-runtime",
             "nvidia-container-cli", "nvhook-runtime", "nvhook-hook", "nvidia-ctk",
             "nvidia-cdi-hook")
DEFAULT_RELEASES = ("bullseye", "bookworm", "trixie", "sid")
LONG_RELEASES = ("jammy", "noble")
TODAY = ("trixie", "sid")  # marked today_engines: the releases of today's engines
# A config.toml outside the subset nvhook reads itself: the release's TOML library reads it
BEYOND_SUBSET = """\
[nvidia-container-runtime]
runtimes = [
  "runc",
]
[nvhook]
typo = { x = 0.5 }
"""


def releases() -> list[str]:
    named = os.environ.get("NVHOOK_DEB_RELEASES", "").replace(",", " ").split()
    if named:
        return named
    return [*DEFAULT_RELEASES, *(LONG_RELEASES if os.environ.get("NVHOOK_LONG") == "1" else ())]


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([str(REPO / "packaging/build-deb"), "--output", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip())
    assert path == out / f"nvhook_{__version__}_all.deb" and path.is_file()
    return path


@pytest.fixture(scope="module", params=[
    pytest.param(r, marks=[pytest.mark.today_engines] if r in TODAY else []) for r in releases()])
def release(request: pytest.FixtureRequest) -> Release:
    if request.param not in RELEASES:
        pytest.fail(f"NVHOOK_DEB_RELEASES: unknown release {request.param} "
                    f"(known: {', '.join(RELEASES)})")
    return RELEASES[request.param]


@pytest.fixture(scope="module")
def debian_root(release: Release, deb: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tarball = deps_tarball(release)
    root = extract(tarball, tmp_path_factory.mktemp(release.suite) / "root")
    shutil.copy(deb, root / "tmp")
    proc = in_root(root, f"apt-get install -y --no-install-recommends /tmp/{deb.name}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_package_fields_and_files(deb: Path) -> None:
    fields = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True,
                            check=True).stdout
    assert "Architecture: all" in fields
    assert "Tested with CPython 3.9 to 3.14" in fields
    assert ("Depends: python3 (>= 3.9), python3-prctl, "
            "python3 (>= 3.11) | python3-tomli | python3-toml, python3-yaml\n") in fields
    assert f"Depends: {package_depends()}\n" in fields  # what the cached roots were made with
    for name in ("Conflicts", "Replaces"):
        line = next(x for x in fields.splitlines() if x.startswith(name + ":"))
        assert "nvidia-container-toolkit," in line and "libnvidia-container-tools" in line
    assert "Provides: nvidia-container-toolkit (= 1.17.8)" in fields
    assert "nvidia-container-toolkit-base (= 1.20.0)" in fields  # nvidia-ctk, nvidia-cdi-hook
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    for path in [f"./usr/bin/{n}" for n in LAUNCHERS] + [
            "./etc/nvidia-container-runtime/config.toml",
            "./usr/share/containers/oci/hooks.d/oci-nvidia-hook.json",
            "./usr/lib/python3/dist-packages/nvhook/cli.py",
            "./usr/lib/python3/dist-packages/nvmount/pipeline.py",
            "./usr/share/man/man1/nvhook.1.gz", "./usr/share/doc/nvhook/copyright",
            "./lib/systemd/system/nvhook-cdi-refresh.service",
            "./lib/systemd/system/nvhook-cdi-refresh.path",
            "./lib/systemd/system/nvhook-cdi-refresh.timer",
            "./lib/systemd/system/nvhook-cdi-refresh.service.d/10-engines.conf",
            "./lib/udev/rules.d/71-nvhook-cdi-refresh.rules"]:
        assert f" {path}" in listing, path
    assert "__pycache__" not in listing and ".pyc" not in listing
    # the simulator and the demo are development tools: a production node installs neither
    for absent in ("/nvhook/dev/", "/nvhook/sim/", "/nvhook/demo/", "/nvhook/deviations"):
        assert absent not in listing, absent
    conffiles = subprocess.run(["dpkg-deb", "-I", str(deb), "conffiles"], capture_output=True,
                               text=True, check=True).stdout
    assert conffiles == "/etc/nvidia-container-runtime/config.toml\n"


def test_installed_package_runs(release: Release, debian_root: Path) -> None:
    (debian_root / "tmp/beyond.toml").write_text(BEYOND_SUBSET)
    proc = in_root(debian_root, "for n in " + " ".join(LAUNCHERS[:4]) + "; do "
                   "head -1 /usr/bin/$n; done; nvhook --version; nvhook config check; "
                   "python3 -c 'import prctl, sys, yaml; yaml.CSafeLoader; "
                   "print(\"python%d.%d\" % "
                   "sys.version_info[:2])'; dpkg -s nvhook | grep Status; "
                   "nvidia-ctk --version; nvidia-cdi-hook --version; "
                   "nvhook --config /tmp/beyond.toml config check --json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    # nvidia-container-runtime is a POSIX sh front (nvhook.launch.runtime_sh)
    assert lines[:4] == ["#!/usr/bin/python3 -IS"] * 2 + ["#!/bin/sh", "#!/usr/bin/python3 -IS"]
    assert lines[4].startswith(f"nvhook version {__version__}")
    assert "config /etc/nvidia-container-runtime/config.toml" in proc.stdout
    assert "ok: no problems found" in proc.stdout
    assert f"python{release.python}" in lines
    assert "Status: install ok installed" in proc.stdout
    assert "NVIDIA Container Toolkit CLI version 1.20.0" in proc.stdout  # the drop-ins
    assert "NVIDIA CDI Hook version 1.20.0" in proc.stdout
    report = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert report["config"] == "/tmp/beyond.toml"  # read, by the release's TOML library
    assert [f["key"] for f in report["findings"]] == ["nvhook.typo"], report  # unknown key


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
    assert found["hook"]["message"].endswith("on the caller's PATH")  # no engine in the root
    assert found["cgroups"]["message"].startswith("cgroup unknown")  # no /sys in the root


@pytest.mark.parametrize("release", ["bookworm"], indirect=True)  # one release is enough
def test_kubernetes_installer_on_a_debian_host(release: Release, deb: Path,
                                               debian_root: Path) -> None:
    """packaging/image/install-on-host against the Debian root as the node's file system:
    installs the package with the host's apt-get, the volume-mounts strategy, the containerd
    drop-in, no restart (on the bookworm root only: CI never shows it skipped)."""
    script = REPO / "packaging/image/install-on-host"
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         'mount -t proc proc "$HOST/proc" && mount --rbind /dev "$HOST/dev" && exec sh "$0"',
         str(script)],
        env={"HOST": str(debian_root), "NVHOOK_DEB_DIR": str(deb.parent), "ONESHOT": "true",
             "DEVICE_LIST_STRATEGY": "volume-mounts", "RESTART_RUNTIME": "false",
             "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
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
