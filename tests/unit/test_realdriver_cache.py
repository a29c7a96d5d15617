"""The real-driver package cache (tests/fixtures/realdriver_apt.py) without the network: the
machine's Debian mirror from its sources, the private apt configuration, and that an
interrupted run (a partial download, an extraction cut short) is never taken for complete."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures import realdriver_apt as A


def test_mirror_from_one_line_and_deb822_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb http://security.example/debian-security bookworm-security main\n")
    (tmp_path / "sources.list.d/other.list").write_text("deb https://vendor.example/apt x main\n")
    (tmp_path / "sources.list.d/debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n")
    assert A.debian_mirror(str(tmp_path)) == (
        "http://mirror.example/debian", "/usr/share/keyrings/debian-archive-keyring.gpg")
    (tmp_path / "sources.list.d/debian.sources").unlink()
    with pytest.raises(A.RealDriverError, match="no Debian 'deb' source"):
        A.debian_mirror(str(tmp_path))


def test_private_apt_config_overrides_every_host_path(tmp_path: Path) -> None:
    conf = A.write_apt_config(tmp_path, "http://mirror.example/debian", A.KEYRING).read_text()
    for key in ("Dir::Etc", "Dir::Etc::sourcelist", "Dir::Etc::sourceparts", "Dir::Etc::parts",
                "Dir::Etc::preferences", "Dir::Etc::preferencesparts", "Dir::State",
                "Dir::State::status", "Dir::Cache", "Dir::Log"):
        assert f'{key} "{tmp_path}' in conf, key
    dirs = [line.split('"')[1] for line in conf.splitlines() if line.startswith("Dir")]
    assert dirs and all(d.startswith(str(tmp_path)) for d in dirs)  # nothing of the host's
    assert 'APT::Update::Error-Mode "any"' in conf  # a failed index fails the update
    sources = (tmp_path / "etc/sources.list").read_text()
    assert "non-free non-free-firmware" in sources and "arch=amd64,i386" in sources


def _deb(work: Path, name: str, arch: str) -> Path:
    """A tiny real .deb with one file, usr/share/<name>."""
    pkg = work / f"build-{name}-{arch}"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN/control").write_text(f"Package: {name}\nVersion: 535.1.2-1\nArchitecture: "
                                        f"{arch}\nMaintainer: t <t@t>\nDescription: t\n")
    (pkg / "DEBIAN/postinst").write_text("#!/bin/sh\n")
    (pkg / "DEBIAN/postinst").chmod(0o755)
    (pkg / "usr/share").mkdir(parents=True)
    (pkg / f"usr/share/{name}-{arch}").write_text("x\n")
    out = work / f"{name}_535.1.2-1_{arch}.deb"
    subprocess.run(["dpkg-deb", "-b", "--root-owner-group", str(pkg), str(out)], check=True,
                   capture_output=True)
    return out


@pytest.fixture
def fake_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """A cache dir; the 'archive' answers apt-cache show and apt-get download from files."""
    archive = tmp_path / "archive"
    archive.mkdir()
    debs = {p: _deb(archive, *p.split(":")) for p in ("libcuda1:amd64", "nvidia-alternative:amd64")}
    monkeypatch.setattr(A, "PACKAGES", tuple(debs))
    monkeypatch.setattr(A, "CONTROL_OF", ("nvidia-alternative:amd64",))
    monkeypatch.setattr(A, "debian_mirror", lambda: ("http://mirror.example/debian", A.KEYRING))
    calls: list[str] = []

    def run_apt(conf: Path, *argv: str, cwd: Path | None = None) -> str:
        calls.append(" ".join(argv[:2]))
        if argv[:2] == ("apt-cache", "show"):
            deb = debs[argv[-1]]
            return (f"Filename: pool/{deb.name}\nSize: {deb.stat().st_size}\nSHA256: "
                    f"{hashlib.sha256(deb.read_bytes()).hexdigest()}\nVersion: 535.1.2-1\n"
                    f"Architecture: {argv[-1].split(':')[1]}\n")
        if argv[:2] == ("apt-get", "download"):
            for pkg in argv[3:]:
                (cwd / debs[pkg].name).write_bytes(debs[pkg].read_bytes())  # type: ignore[operator]
        return ""

    monkeypatch.setattr(A, "run_apt", run_apt)
    return tmp_path / "cache", calls


def test_cache_is_reused_and_a_partial_download_is_fetched_again(
        fake_archive: tuple[Path, list[str]]) -> None:
    cache, calls = fake_archive
    tree, version = A.obtain_tree(cache)
    assert version == "535.1.2" and (tree / ".complete").is_file()
    assert (tree / "usr/share/libcuda1-amd64").is_file()
    assert (tree / ".control/nvidia-alternative_amd64/postinst").is_file()
    assert "apt-get download" in calls
    calls.clear()
    assert A.obtain_tree(cache) == (tree, version) and calls == []  # warm: no apt at all
    records = json.loads((cache / "debs/COMPLETE").read_text())
    partial = cache / "debs" / records["libcuda1:amd64"]["File"]
    partial.write_bytes(partial.read_bytes()[:100])  # a download cut short
    A.obtain_tree(cache)
    assert calls.count("apt-get download") == 1 and (cache / "debs/COMPLETE").is_file()
    assert partial.stat().st_size == int(records["libcuda1:amd64"]["Size"])


def test_an_interrupted_extraction_is_redone(fake_archive: tuple[Path, list[str]]) -> None:
    cache, _ = fake_archive
    tree, _ = A.obtain_tree(cache)
    (tree / ".complete").unlink()  # as if the rename had happened before the marker
    (cache / ".tree-leftover").mkdir()  # and a temporary extraction left behind
    again, _ = A.obtain_tree(cache)
    assert (again / ".complete").is_file() and not (cache / ".tree-leftover").exists()
