"""nvmount.ldconfig: the host ldconfig run for a container, in its sandbox. All real.

A "container" here is a `sleep` in a private mount namespace (optionally with procfs mounts
under its rootfs, as runc has them at prestart time) and a minimal glibc rootfs in a tmp dir.
The sandbox's view is checked with a static probe program (tests/unit/ldconfig_probe.c) that
stands in for ldconfig and reports uid/gid, capabilities, fds, limits, mounts and network.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvmount._libc import Libc
from nvmount.errors import LdcacheError
from nvmount.ldcache import read_ldcache
from nvmount.ldconfig import LdconfigResult, resolve_ldconfig, run_ldconfig, seal_binary
from nvmount.ldconfig_sandbox import SandboxLimits
from tests.fixtures.containers import host_mountinfo, open_fd_count
from tests.unit._privns import sleeper

pytestmark = pytest.mark.root

HOST_LDCONFIG = resolve_ldconfig("@/sbin/ldconfig")
LIBDIR = "/usr/lib/x86_64-linux-gnu"
HOST_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", HOST_LDCONFIG)


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, pivot_root)")


# ---- fixtures -----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def probe(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The probe, compiled static (it runs inside a rootfs without our libc)."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc (packaging/setup.sh installs it)")
    out = tmp_path_factory.mktemp("probe") / "probe"
    src = Path(__file__).with_name("ldconfig_probe.c")
    subprocess.run(["gcc", "-static", "-O1", "-o", str(out), str(src)], check=True,
                   capture_output=True)
    return str(out)


@pytest.fixture(scope="session")
def foo_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared library with SONAME libfoo.so.1."""
    d = tmp_path_factory.mktemp("foo")
    (d / "foo.c").write_text("int foo(void) { return 42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", "-o",
                    str(d / "libfoo.so.1.2.3"), str(d / "foo.c")], check=True)
    return d / "libfoo.so.1.2.3"


def build_rootfs(root: Path, foo: Path) -> Path:
    """A minimal glibc (Debian-like) rootfs with libfoo in the multiarch lib dir."""
    for d in ("etc/ld.so.conf.d", "lib/x86_64-linux-gnu", "lib64", LIBDIR[1:], "bin", "proc",
              "sys", "dev", "tmp", "hostproc"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for lib in ("libc.so.6", "ld-linux-x86-64.so.2"):
        shutil.copy2(f"/lib/x86_64-linux-gnu/{lib}", root / "lib/x86_64-linux-gnu" / lib)
    (root / "lib64/ld-linux-x86-64.so.2").symlink_to("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    shutil.copy2("/bin/busybox", root / "bin/busybox")
    (root / "etc/debian_version").write_text("12.0\n")
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text(f"{LIBDIR}\n")
    (root / "etc/probe-marker").write_text("container-root\n")
    shutil.copy2(foo, root / LIBDIR[1:] / foo.name)
    return root


@pytest.fixture
def rootfs(tmp_path: Path, foo_lib: Path) -> Path:
    _require_root()
    return build_rootfs(tmp_path / "rootfs", foo_lib)


@dataclass
class Host:
    """Host-side canaries: a tree only the host can see, and the files that must not change."""

    dir: Path  # contains conf.d/evil.conf -> lib/, lib/libhostonly.so.7.0, cache-target
    before: dict[str, str]

    def assert_unchanged(self) -> None:
        assert _host_state(self.dir) == self.before


def _host_state(d: Path) -> dict[str, str]:
    state = {p: _sha(p) for p in HOST_FILES}
    for p in sorted(d.rglob("*")):
        state[str(p)] = os.readlink(p) if p.is_symlink() else _sha(str(p)) if p.is_file() else "d"
    return state


@pytest.fixture
def host(tmp_path: Path, foo_lib: Path) -> Host:
    d = tmp_path / "host"
    (d / "conf.d").mkdir(parents=True)
    (d / "lib").mkdir()
    (d / "conf.d/evil.conf").write_text(f"{d}/lib\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libhostonly.so.7", "-o",
                    str(d / "lib/libhostonly.so.7.0"), "-x", "c", "/dev/null"], check=True)
    (d / "cache-target").write_text("HOST\n")
    return Host(d, _host_state(d))


@dataclass
class Ctr:
    pid: int
    mntns_fd: int
    rootfs: Path


@contextmanager
def container(rootfs: Path, *, procfs: bool = False) -> Iterator[Ctr]:
    """A sleep in a private mount namespace; with procfs, the host-pid-ns proc is mounted at
    rootfs/proc and rootfs/hostproc inside it (what a runc container looks like at prestart,
    plus a privileged-style extra procfs)."""
    with sleeper("-m", "--propagation", "private") as pid:
        if procfs:
            for d in ("proc", "hostproc"):
                subprocess.run(["nsenter", "-t", str(pid), "-m", "mount", "-t", "proc", "proc",
                                str(rootfs / d)], check=True)
        fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            yield Ctr(pid, fd, rootfs)
        finally:
            os.close(fd)


def ldconfig(ctr: Ctr, *, path: str = HOST_LDCONFIG, dirs: tuple[str, ...] = (LIBDIR,),
             uid: int = 0, gid: int = 0, timeout: float = 10.0,
             limits: SandboxLimits | None = None) -> LdconfigResult:
    return run_ldconfig(mntns_fd=ctr.mntns_fd, rootfs=str(ctr.rootfs), dirs=dirs,
                        ldconfig_path=path, uid=uid, gid=gid, timeout=timeout, libc=Libc(),
                        limits=limits)


def probe_report(result: LdconfigResult) -> dict[str, str]:
    return dict(line.split("=", 1) for line in result.output if "=" in line)


def cache_keys(rootfs: Path) -> dict[str, str]:
    return {e.key: e.value for e in read_ldcache(str(rootfs / "etc/ld.so.cache"))}


# ---- config value and the sealed copy -----------------------------------------------------------

@pytest.mark.parametrize(("value", "real_exists", "want"), [
    ("@{d}/ldconfig", False, "{d}/ldconfig"),
    ("@{d}/ldconfig", True, "{d}/ldconfig.real"),
    ("@{d}/ldconfig.real", False, "{d}/ldconfig"),
    ("@{d}/ldconfig.real", True, "{d}/ldconfig.real"),
], ids=["plain", "prefers-real", "real-stripped-when-missing", "real-kept"])
def test_resolve_host_ldconfig(tmp_path: Path, value: str, real_exists: bool, want: str) -> None:
    (tmp_path / "ldconfig").write_text("")
    if real_exists:
        (tmp_path / "ldconfig.real").write_text("")
    assert resolve_ldconfig(value.format(d=tmp_path)) == want.format(d=tmp_path)


@pytest.mark.parametrize("value", ["/sbin/ldconfig", "ldconfig", "", "@sbin/ldconfig"],
                         ids=["container-path", "bare-name", "empty", "relative-host-path"])
def test_resolve_refuses_container_and_relative_paths(value: str) -> None:
    with pytest.raises(LdcacheError, match=r"ldconfig '.*'.*nvidia-container-cli\.ldconfig"):
        resolve_ldconfig(value)


def test_seal_binary_makes_an_immutable_copy() -> None:
    fd = seal_binary(HOST_LDCONFIG)
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        want = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        assert seals & want == want
        assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:nvhook-ldconfig")
        assert os.fstat(fd).st_size == os.stat(HOST_LDCONFIG).st_size
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"x", 0)
        assert os.get_inheritable(fd) is False
    finally:
        os.close(fd)


@pytest.mark.parametrize(("content", "match"), [
    (b"#!/bin/sh\ntouch /OWNED\n", "not an ELF binary"),
    (None, "dynamically linked"),
], ids=["script", "dynamic-elf"])
def test_seal_binary_refuses_what_would_load_image_code(tmp_path: Path, content: bytes | None,
                                                        match: str) -> None:
    path = tmp_path / "ldconfig"
    if content is None:
        shutil.copy2("/bin/true", path)  # dynamically linked on Debian
    else:
        path.write_bytes(content)
        path.chmod(0o755)
    with pytest.raises(LdcacheError, match=match):
        seal_binary(str(path))


def test_missing_host_ldconfig_is_a_warning_not_an_exception(rootfs: Path) -> None:
    with container(rootfs) as ctr:
        res = ldconfig(ctr, path="/nonexistent/ldconfig")
    assert (res.ran, res.ok) == (False, False)
    assert "not found" in res.warning


@pytest.mark.parametrize("dirs", [("relative/lib",), ("-r/",), ("/a\nb",)],
                         ids=["relative", "option-injection", "newline"])
def test_rejects_non_absolute_dirs(rootfs: Path, dirs: tuple[str, ...]) -> None:
    with container(rootfs) as ctr, pytest.raises(LdcacheError, match="not an absolute"):
        ldconfig(ctr, dirs=dirs)


# ---- the real ldconfig --------------------------------------------------------------------------

def test_updates_the_container_cache_and_soname_links(rootfs: Path, host: Host) -> None:
    mounts, fds = host_mountinfo(), open_fd_count()
    with container(rootfs) as ctr:
        res = ldconfig(ctr)
    assert (res.ran, res.ok, res.exit_code, res.warning) == (True, True, 0, "")
    keys = cache_keys(rootfs)
    assert keys["libfoo.so.1"] == f"{LIBDIR}/libfoo.so.1"
    assert keys["libc.so.6"] == "/lib/x86_64-linux-gnu/libc.so.6"
    assert os.readlink(rootfs / LIBDIR[1:] / "libfoo.so.1") == "libfoo.so.1.2.3"
    host.assert_unchanged()
    assert host_mountinfo() == mounts
    assert open_fd_count() == fds


def test_runs_with_only_the_ldcache_stage_capabilities(rootfs: Path) -> None:
    """The LDCACHE stage's effective set is enough for the whole sandbox (forked child)."""
    from nvmount import privileges

    with container(rootfs) as ctr:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 1
            try:
                privileges.limit_permitted()
                privileges.drop_to(privileges.Stage.LDCACHE)
                code = 0 if ldconfig(ctr).ok else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert "libfoo.so.1" in cache_keys(rootfs)


def test_container_owner_uid_writes_as_that_user(rootfs: Path) -> None:
    for p in [rootfs, *rootfs.rglob("*")]:
        os.lchown(p, 1000, 1000)
    with container(rootfs) as ctr:
        res = ldconfig(ctr, uid=1000, gid=1000)
    assert res.ok, res
    assert (rootfs / "etc/ld.so.cache").stat().st_uid == 1000
    assert (rootfs / LIBDIR[1:] / "libfoo.so.1").lstat().st_uid == 1000


def test_owner_without_write_access_fails_with_a_warning(rootfs: Path) -> None:
    with container(rootfs) as ctr:
        res = ldconfig(ctr, uid=1000, gid=1000)
    assert (res.ran, res.ok, res.exit_code) == (True, False, 1)
    assert "failed with exit code 1" in res.warning


@pytest.mark.parametrize("layout", ["musl", "no-etc"])
def test_images_without_an_ldcache_are_skipped(rootfs: Path, layout: str) -> None:
    if layout == "musl":
        (rootfs / "etc/ld.so.conf").unlink()
        (rootfs / "lib/ld-musl-x86_64.so.1").write_bytes(b"")
    else:
        shutil.rmtree(rootfs / "etc")
    with container(rootfs) as ctr:
        res = ldconfig(ctr)
    assert (res.ran, res.ok, res.warning) == (False, True, "")
    assert ("musl" if layout == "musl" else "/etc") in res.reason
    assert not (rootfs / "etc/ld.so.cache").exists()


def test_missing_ld_so_conf_still_caches_the_given_dirs(rootfs: Path) -> None:
    (rootfs / "etc/ld.so.conf").unlink()
    with container(rootfs) as ctr:
        res = ldconfig(ctr)
    assert res.ok, res
    assert "libfoo.so.1" in cache_keys(rootfs)


def test_rootfs_that_is_a_symlink_is_refused(rootfs: Path, tmp_path: Path) -> None:
    link = tmp_path / "rootfs-link"
    link.symlink_to(rootfs)
    with container(rootfs) as ctr:
        res = run_ldconfig(mntns_fd=ctr.mntns_fd, rootfs=str(link), dirs=(LIBDIR,),
                           ldconfig_path=HOST_LDCONFIG, uid=0, gid=0, libc=Libc())
    assert (res.ran, res.ok) == (False, False)
    assert f"open rootfs {link}" in res.warning
