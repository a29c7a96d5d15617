"""packaging/setup.sh's elevation and the test rig around it: the script runs as root without
sudo and re-runs itself with sudo only when not root (the README's commands work verbatim both
ways); CI turns a skip for a missing client into a failure; the package tests take their
Debian mirror from the machine's apt sources (one-line and deb822). The script's apt behaviour
next to Docker CE is tests/e2e/test_setup.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures import required
from tests.fixtures.debroot import (
    SourceEntry,
    archive_uri,
    machine_sources,
    parse_deb822,
    parse_one_line,
)

REPO = Path(__file__).resolve().parent.parent.parent
SETUP = REPO / "packaging/setup.sh"


def _stub_bin(tmp_path: Path, uid: int, sudo: bool) -> Path:
    """A PATH with a stub `id` (printing `uid`), optionally a recording `sudo`, and the few
    real tools the script runs before it elevates."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    if sudo:
        (bindir / "sudo").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/sudo.args\n')
    for tool in ("readlink", "dirname", "sed", "cat"):
        real = shutil.which(tool)
        assert real is not None
        (bindir / tool).symlink_to(real)
    for stub in bindir.iterdir():
        if not stub.is_symlink():
            stub.chmod(0o755)
    return bindir


def test_a_user_with_sudo_gets_the_same_command_under_sudo(tmp_path: Path) -> None:
    bindir = _stub_bin(tmp_path, 1000, sudo=True)
    proc = subprocess.run(["/bin/bash", str(SETUP), "--clients", "--", ".venv/bin/nvhook",
                           "demo"], env={"PATH": str(bindir)}, capture_output=True,
                          text=True, timeout=30, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sudo.args").read_text().splitlines() == [
        "--", "bash", str(SETUP), "--clients", "--", ".venv/bin/nvhook", "demo"]


def test_a_user_without_sudo_is_told_to_run_it_as_root(tmp_path: Path) -> None:
    bindir = _stub_bin(tmp_path, 1000, sudo=False)
    proc = subprocess.run(["/bin/bash", str(SETUP)], env={"PATH": str(bindir)},
                          capture_output=True, text=True, timeout=30, check=False)
    assert (proc.returncode, proc.stderr) == (
        1, "setup: needs root: run it as root (sudo is not installed)\n")


def test_usage_errors_and_help() -> None:
    proc = subprocess.run(["bash", str(SETUP), "--bogus"], capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 1 and "unknown argument --bogus" in proc.stderr
    usage = subprocess.run(["bash", str(SETUP), "--help"], capture_output=True, text=True,
                           timeout=30, check=True).stdout
    assert "--clients" in usage and "--no-remove" in usage


def test_ci_sets_up_the_clients_and_requires_them() -> None:
    lines = (REPO / ".ci/run").read_text().splitlines()
    setup = lines.index("bash packaging/setup.sh --clients")
    assert lines.index(f"export {required.REQUIRE_ENV}=1") == setup + 1


def test_readme_commands_need_no_sudo() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    for line in lines[3:5]:
        assert line.startswith("bash packaging/setup.sh -- .venv/bin/"), line
        assert "sudo" not in line.split("#")[0]


def test_a_missing_client_skips_outside_ci_and_fails_in_ci(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(required.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs /usr/bin/x"):
        required.missing("needs /usr/bin/x")
    monkeypatch.setenv(required.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=r"needs /usr/bin/x .*CI requires it"):
        required.missing("needs /usr/bin/x")


ONE_LINE = """\
# comment
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian/ bookworm main
deb http://security.example/debian-security bookworm-security main
deb-src http://src.example/debian bookworm main
"""
DEB822 = """\
Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb deb-src
URIs: http://a.example/debian http://b.example/debian
Suites: bookworm bookworm-updates
Components: main

Enabled: no
Types: deb
URIs: http://off.example/debian
Suites: trixie
"""


def test_mirror_from_one_line_sources() -> None:
    entries = parse_one_line(ONE_LINE)
    assert entries[0] == SourceEntry(("deb",), ("http://mirror.example/debian/",),
                                     ("bookworm",))
    assert archive_uri(entries, "debian") == "http://mirror.example/debian"
    assert archive_uri(entries[1:], "debian") is None  # security and deb-src only
    assert archive_uri(entries, "ubuntu") is None


def test_mirror_from_deb822_sources(tmp_path: Path) -> None:
    assert archive_uri(parse_deb822(DEB822), "debian") == "http://a.example/debian"
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/debian.sources").write_text(DEB822)
    (tmp_path / "sources.list.d/x.list.disabled").write_text(
        "deb http://no.example/debian sid main\n")
    (tmp_path / "sources.list.d/ubuntu.list").write_text(
        "deb http://u.example/ubuntu noble main universe\n")
    entries = machine_sources(str(tmp_path))
    assert archive_uri(entries, "debian") == "http://a.example/debian"
    assert archive_uri(entries, "ubuntu") == "http://u.example/ubuntu"


def test_this_machine_has_a_debian_mirror() -> None:
    """Where the package tests run (CI): the mirror is this machine's apt's."""
    if not os.path.exists("/etc/debian_version"):
        pytest.skip("not a Debian-based machine")
    entries = machine_sources()
    assert archive_uri(entries, "debian") or archive_uri(entries, "ubuntu")


def test_a_half_built_root_cache_is_never_trusted(tmp_path: Path) -> None:
    import json
    import time

    from tests.fixtures.debroot import _trusted

    tarball, manifest = tmp_path / "bookworm-deps-k.tar", tmp_path / "bookworm-deps-k.json"
    tarball.write_bytes(b"complete")
    st = tarball.stat()
    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "created": time.time()}
    manifest.write_text(json.dumps(record))
    assert _trusted(tarball, manifest)
    tarball.write_bytes(b"rewritten by a run that died")  # no new manifest
    assert not _trusted(tarball, manifest)
    assert not tarball.exists() and not manifest.exists()  # removed: rebuilt next time
    tarball.write_bytes(b"no manifest at all")
    assert not _trusted(tarball, manifest)
    manifest.write_text(json.dumps({**record, "created": time.time() - 8 * 86400}))
    assert not _trusted(tarball, manifest)  # too old
