"""packaging/setup.sh on a node that runs Docker CE: it removes nothing and says what it refused.

A clean bookworm root (tests/fixtures/debroot.py: mmdebstrap from this machine's Debian mirror,
cached; the one tests/e2e/test_deb.py uses) gets dummy packages with the names and relations
of Docker CE's (`docker-ce`, `docker-ce-cli`, `containerd.io`: Debian's docker.io, containerd
and runc conflict with them) and a `podman` from another origin. In it, as root without sudo
(as the README's commands run on a minimal image):

1. `setup.sh --clients` refuses before installing anything, naming each of them;
2. `setup.sh` (the demo's and unit tests' packages) installs them, keeping containerd.io as
   the provider of runc, and removes nothing;
3. with an engine the script does not know by name (a package conflicting with podman and
   crun), `setup.sh --clients` refuses from apt's simulation, naming the packages that would
   remove it, and installs nothing;
4. when apt fails (an unreachable mirror), its output is shown.

Needs root, mmdebstrap and the Debian mirror (~1 min: apt installs the compiler and headers).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.debroot import RELEASES, deps_tarball, extract, in_root

pytestmark = [pytest.mark.root, pytest.mark.e2e]
REPO = Path(__file__).resolve().parent.parent.parent
SETUP = "bash /src/packaging/setup.sh --no-venv"
# Docker CE's relations (download.docker.com's bookworm packages), on empty packages
DUMMIES = {
    "containerd.io": "Conflicts: containerd, runc\nReplaces: containerd, runc\n"
                     "Provides: containerd, runc\n",
    "docker-ce-cli": "Conflicts: docker (<< 1.5~), docker-engine, docker.io\n"
                     "Replaces: docker-ce (<< 5:0), docker-engine\n",
    "docker-ce": "Depends: containerd.io (>= 1.6.24), docker-ce-cli\n"
                 "Conflicts: docker (<< 1.5~), docker-engine, docker.io\n"
                 "Replaces: docker-engine\n",
    "podman": "",  # version 100:9.9: from another origin (newer than Debian's)
    "acme-engine": "Conflicts: podman, crun\n",  # an engine setup.sh knows nothing about
}


def _dummy(directory: Path, name: str, relations: str) -> Path:
    stage = directory / name
    (stage / "DEBIAN").mkdir(parents=True)
    version = "100:9.9" if name == "podman" else "5:27.3.1-1~debian.12~bookworm"
    (stage / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
        f"Maintainer: tests <t@t>\n{relations}Description: dummy {name} (test_setup.py)\n")
    out = directory / f"{name}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(stage), str(out)],
                   capture_output=True, check=True)
    return out


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A bookworm root with Docker CE's packages and a foreign podman installed."""
    tarball = deps_tarball(RELEASES["bookworm"])  # the package test's root: one bootstrap
    work = tmp_path_factory.mktemp("setup")
    root = extract(tarball, work / "root")
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    (root / "src/packaging").mkdir(parents=True)
    shutil.copy(REPO / "packaging/setup.sh", root / "src/packaging/setup.sh")
    for name, relations in DUMMIES.items():
        shutil.copy(_dummy(work, name, relations), root / "tmp")
    proc = in_root(root, "dpkg -i /tmp/containerd.io.deb /tmp/docker-ce-cli.deb "
                   "/tmp/docker-ce.deb /tmp/podman.deb && ! command -v sudo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield root
    shutil.rmtree(work, ignore_errors=True)


def packages(root: Path) -> dict[str, str]:
    proc = in_root(root, "dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\\n'")
    return {p: v for s, p, v in (line.split() for line in proc.stdout.splitlines())
            if s == "ii"}


def kept(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What changed among the packages that were installed before (must be nothing)."""
    return sorted(p for p in before if after.get(p) != before[p])


def test_clients_refused_next_to_docker_ce(node: Path) -> None:
    before = packages(node)
    proc = in_root(node, f"{SETUP} --clients", timeout=600)
    assert proc.returncode == 1, proc.stderr
    refused = [x for x in proc.stderr.splitlines() if x.startswith("setup: refusing: ")]
    assert [x.split()[2] for x in refused] == ["docker-ce", "docker-ce-cli", "containerd.io",
                                               "podman"], proc.stderr
    assert "container engine from another origin" in refused[0]
    assert "podman 100:9.9 is installed from another origin" in refused[3]
    assert "nothing was installed or removed" in proc.stderr
    assert packages(node) == before


def test_base_setup_keeps_docker_ce(node: Path) -> None:
    before = packages(node)
    proc = in_root(node, SETUP, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "setup: base: runc is provided by containerd.io (installed): keeping containerd.io" \
        in proc.stderr
    after = packages(node)
    assert kept(before, after) == []
    assert {"gcc", "busybox-static", "python3-venv", "libcap-dev"} <= set(after)
    assert "runc" not in after
    again = in_root(node, SETUP, timeout=600)  # idempotent: nothing to do
    assert again.returncode == 0 and "installing" not in again.stderr, again.stderr


def test_unknown_engine_refused_from_apts_simulation(node: Path) -> None:
    proc = in_root(node, "dpkg -r docker-ce docker-ce-cli containerd.io podman >/dev/null && "
                   "dpkg -i /tmp/acme-engine.deb >/dev/null")
    assert proc.returncode == 0, proc.stderr
    before = packages(node)
    proc = in_root(node, f"{SETUP} --clients", timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert ("setup: refusing: installing podman crun would make apt remove acme-engine "
            "(installed)") in proc.stderr
    assert "nothing was installed or removed" in proc.stderr
    assert packages(node) == before


def test_apt_output_is_shown_when_apt_fails(node: Path) -> None:
    proc = in_root(node, "echo 'deb http://127.0.0.1:9/debian bookworm main' "
                   f"> /etc/apt/sources.list && {SETUP}", timeout=600)
    assert proc.returncode == 1
    assert "127.0.0.1:9" in proc.stderr  # apt's warning: the update itself exits 0
    assert "E: Unable to locate package runc" in proc.stderr  # the failed step's whole log
    assert proc.stderr.rstrip().endswith("runc failed (its output is above)")
