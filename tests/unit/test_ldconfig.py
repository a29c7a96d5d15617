"""nvmount.ldcache.ldconfig: the host ldconfig run for a container, in its sandbox. All real.

A "container" here is a `sleep` in a private mount namespace (optionally with procfs mounts
under its rootfs, as runc has them at prestart time) and a minimal glibc rootfs in a tmp dir.
The sandbox's view is checked with a static probe program (tests/fixtures/ldconfig_probe.c) that
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
from nvmount.container.cgroup import CgroupTarget
from nvmount.discover.ldcache import read_ldcache
from nvmount.errors import LdcacheError
from nvmount.ldcache.ldconfig import LdconfigResult, run_ldconfig, seal_binary
from nvmount.ldcache.sandbox import SandboxLimits
from nvmount.ldcache.setting import resolve_ldconfig
from tests.fixtures.containers import HostSnapshot
from tests.fixtures.privns import sleeper

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
    src = Path(__file__).parent.parent / "fixtures" / "ldconfig_probe.c"
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
    me = os.getpid()  # whoever reads this conf through a leak reaches the host lib dir
    (d / "conf.d/evil.conf").write_text(f"{d}/lib\n/proc/{me}/root{d}/lib\n"
                                        f"/hostproc/{me}/root{d}/lib\n")
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
def container(rootfs: Path, *, procfs: bool = False, userns: bool = False) -> Iterator[Ctr]:
    """A sleep in a private mount namespace; with procfs, the host-pid-ns proc is mounted at
    rootfs/proc and rootfs/hostproc inside it (what a runc container looks like at prestart,
    plus a privileged-style extra procfs); with userns, the mount namespace belongs to a new
    user namespace (rootless-style)."""
    args = ("-U", "--map-root-user") if userns else ()
    with sleeper(*args, "-m", "--propagation", "private") as pid:
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
             limits: SandboxLimits | None = None,
             cgroups: tuple[CgroupTarget, ...] = ()) -> LdconfigResult:
    return run_ldconfig(mntns_fd=ctr.mntns_fd, rootfs=str(ctr.rootfs), dirs=dirs,
                        ldconfig_path=path, uid=uid, gid=gid, timeout=timeout, libc=Libc(),
                        limits=limits, cgroups=cgroups)


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

@pytest.mark.parametrize("userns", [False, True], ids=["host-userns", "container-userns"])
def test_updates_the_container_cache_and_soname_links(rootfs: Path, host: Host,
                                                      userns: bool) -> None:
    snap = HostSnapshot()  # filtered: another daemon's mounts meanwhile do not count
    with container(rootfs, userns=userns) as ctr:
        res = ldconfig(ctr)
    assert (res.ran, res.ok, res.exit_code, res.warning) == (True, True, 0, "")
    keys = cache_keys(rootfs)
    assert keys["libfoo.so.1"] == f"{LIBDIR}/libfoo.so.1"
    assert keys["libc.so.6"] == "/lib/x86_64-linux-gnu/libc.so.6"
    assert os.readlink(rootfs / LIBDIR[1:] / "libfoo.so.1") == "libfoo.so.1.2.3"
    host.assert_unchanged()
    snap.assert_unchanged()  # host mounts (ours) and this process's fds


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
    assert (res.ran, res.ok, res.exit_code) == (True, False, 0)  # it wrote our scratch only
    assert "create a temp file next to /etc/ld.so.cache: permission denied" in res.warning


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


# ---- the sandbox, seen from inside (probe) and from the host ----------------------------------

@pytest.mark.parametrize(("uid", "gid"), [(0, 0), (1000, 1000)], ids=["root-owner", "uid-1000"])
def test_sandbox_gives_nothing_but_the_container_root(rootfs: Path, probe: str, uid: int,
                                                      gid: int) -> None:
    """F19 and CVE-2024-0136/0137: fds 0-2 only, no capabilities, empty env, own net ns."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        os.chown(rootfs / "etc", uid, gid)  # the owner installs the cache there
        with container(rootfs, procfs=True) as ctr:
            res = ldconfig(ctr, path=probe, dirs=("/report", f"/connect={port}"), uid=uid,
                           gid=gid)
    assert res.ok, res
    got = probe_report(res)
    assert got["argv"] == (f"{probe} -i -f /proc/ld.so.conf -C /proc/ld.so.cache /report "
                           f"/connect={port}")  # our conf, our scratch: never the image's
    assert got["pid"] == "2"  # in a new pid namespace, below the worker (pid 1)
    assert (got["uid"], got["gid"], got["groups"]) == (f"{uid},{uid},{uid}", f"{gid},{gid},{gid}",
                                                       str(gid))
    assert (got["cap_eff"], got["cap_prm"], got["cap_inh"]) == ("0" * 16,) * 3
    assert (got["cap_bnd_count"], got["cap_amb_count"], got["no_new_privs"]) == ("0", "0", "1")
    assert int(got["securebits"]) & 0x3 == 0x3  # SECBIT_NOROOT, locked: exec as root gains nothing
    assert got["fds"] == "0,1,2"
    assert (got["envc"], got["cwd"], got["marker"]) == ("0", "/", "container-root")
    # /sys and /dev are empty read-only tmpfs mounts, /proc the scratch tmpfs with our conf
    # (the container's procfs is hidden)
    assert (got["proc_entries"], got["sys_entries"], got["dev_entries"]) == ("1", "0", "0")
    assert (got["rlimit_cpu"], got["rlimit_as"], got["rlimit_nofile"]) == ("10", str(2 << 30),
                                                                         "64")
    assert (got["rlimit_fsize"], got["rlimit_core"], got["sigpipe_default"]) == (
        str(64 << 20), "0", "1")
    assert (got["rlimit_data"], got["rlimit_nproc"]) == (str(256 << 20), "1")
    assert got["netifs"] == "lo"
    assert got["connect"] == "Network is unreachable"


def _inspect_helper(token: str, w: int, deadline: float) -> None:  # pragma: no cover - child
    """Find the process whose cmdline has `token`; report its namespaces and exe (T-0135)."""
    out: dict[str, object] = {"found": False}
    while time.monotonic() < deadline and not out["found"]:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if token.encode() not in f.read():
                        continue
                out = {"found": True, "exe": os.readlink(f"/proc/{pid}/exe"),
                       "ns": {n: os.readlink(f"/proc/{pid}/ns/{n}")
                              for n in ("mnt", "pid", "net", "ipc", "uts")}}
                for mode, name in ((os.O_WRONLY, "open_wronly"), (os.O_RDWR, "open_rdwr")):
                    try:
                        os.close(os.open(f"/proc/{pid}/exe", mode))
                        out[name] = "opened"
                    except OSError as err:
                        out[name] = err.errno
                break
            except OSError:
                continue
        time.sleep(0.01)
    os.write(w, json.dumps(out).encode())


def test_helper_runs_from_a_sealed_copy_in_new_namespaces(rootfs: Path, probe: str,
                                                          host: Host) -> None:
    """CVE-2024-0135: /proc/<pid>/exe of the helper is the memfd, not writable; all five
    namespaces differ from the hook's and the container's; the timeout kills the helper."""
    token = f"/token-{os.getpid()}-{time.monotonic_ns()}"
    shutil.copy2(probe, host.dir / "probe")
    host.before = _host_state(host.dir)
    r, w = os.pipe()
    with container(rootfs) as ctr:
        helper = os.fork()
        if helper == 0:  # pragma: no cover - child
            os.close(r)
            _inspect_helper(token, w, time.monotonic() + 5)
            os._exit(0)
        os.close(w)
        res = ldconfig(ctr, path=str(host.dir / "probe"), dirs=("/sleep", token), timeout=1.5)
        ctr_ns = {n: os.readlink(f"/proc/{ctr.pid}/ns/{n}") for n in ("mnt", "pid", "net")}
    os.waitpid(helper, 0)
    with os.fdopen(r, "rb") as f:
        seen = json.loads(f.read())
    assert seen["found"], "the probe never showed up in /proc"
    assert seen["exe"].startswith("/memfd:nvhook-ldconfig")
    assert seen["open_wronly"] != "opened" and seen["open_rdwr"] != "opened"
    for ns, link in seen["ns"].items():
        assert link != os.readlink(f"/proc/self/ns/{ns}"), ns
    for ns in ("mnt", "pid", "net"):
        assert seen["ns"][ns] != ctr_ns[ns], ns
    assert (res.ran, res.ok, res.reason) == (True, False, "timeout")
    assert "timed out after 1.5 s" in res.warning
    assert 1.5 <= res.duration < 3.0
    assert subprocess.run(["pgrep", "-f", token], capture_output=True).returncode == 1
    host.assert_unchanged()


def test_cpu_limit_kills_a_spinning_helper(rootfs: Path, probe: str) -> None:
    with container(rootfs) as ctr:
        res = ldconfig(ctr, path=probe, dirs=("/spin",), limits=SandboxLimits(cpu_seconds=1))
    assert (res.ran, res.ok, res.signal) == (True, False, 9)
    assert "terminated with signal 9 (killed: cpu time limit reached?)" in res.warning


@pytest.mark.parametrize(("size", "limit", "left"), [
    (3 << 20, 2 << 20, (3 << 20) - (2 << 20)),
    (16 << 20, None, 0),
], ids=["over-limit-efbig", "16mib-under-default"])
def test_file_size_limit(rootfs: Path, probe: str, size: int, limit: int | None,
                         left: int) -> None:
    """The helper starts with SIGXFSZ ignored: over the limit a write fails with EFBIG
    (ldconfig reports it and exits 1) instead of dying with signal 25."""
    limits = SandboxLimits(file_size=limit) if limit else None
    with container(rootfs) as ctr:
        res = ldconfig(ctr, path=probe, dirs=(f"/write={size}",), limits=limits)
    assert res.ok, res
    assert probe_report(res)["write_left"].split()[0] == str(left)


@pytest.mark.parametrize(("code", "ok"), [(0, True), (3, False)], ids=["exit-0", "exit-3"])
def test_exit_codes(rootfs: Path, probe: str, code: int, ok: bool) -> None:
    with container(rootfs) as ctr:
        res = ldconfig(ctr, path=probe, dirs=(f"/exit={code}",))
    assert (res.ran, res.ok, res.exit_code) == (True, ok, code)
    assert (res.warning == "") is ok
    if not ok:
        assert f"failed with exit code {code}: argv=" in res.warning


# ---- hostile layouts (security.md F8, F9, F10) --------------------------------------------------

def _link(rootfs: Path, rel: str, target: str) -> None:
    p = rootfs / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()
    p.symlink_to(target)


def _layout(rootfs: Path, name: str, canary: Path) -> None:
    """Build hostile layout `name`. Magic links go through our own pid: in the container's
    procfs (here the host's, as runc's is before pivot_root) /proc/<pid>/root is the host
    root, like the container init's /proc/1/root at prestart time."""
    up = "../" * 8
    me = os.getpid()
    if name == "cache-to-proc-root":  # F8 a
        _link(rootfs, "etc/ld.so.cache", f"/proc/{me}/root{canary}/cache-target")
    elif name == "cache-abs-dotdot":  # F8 b
        _link(rootfs, "etc/ld.so.cache", f"/../../../..{canary}/HOSTMARK")
    elif name == "cache-tmp-to-host":  # ldconfig's temp file name, pre-planted
        _link(rootfs, "etc/ld.so.cache~", f"/hostproc/{me}/root{canary}/cache-target")
    elif name == "confd-to-proc-root":  # F8 c
        _link(rootfs, "etc/ld.so.conf.d", f"/proc/{me}/root{canary}/conf.d")
    elif name == "confd-to-extra-procfs":  # a procfs the sandbox does not mask: ptrace-denied
        _link(rootfs, "etc/ld.so.conf.d", f"/hostproc/{me}/root{canary}/conf.d")
    elif name == "confd-rel-dotdot":  # F8 d
        _link(rootfs, "etc/ld.so.conf.d", f"{up[:-1]}{canary}/conf.d")
    elif name == "aux-cache-to-proc-cwd":  # F8 e
        _link(rootfs, "var/cache/ldconfig", f"/hostproc/{me}/cwd")
    elif name == "confd-regular-file":  # F8 g
        shutil.rmtree(rootfs / "etc/ld.so.conf.d")
        (rootfs / "etc/ld.so.conf.d").write_text(f"{canary}/lib\n")
    elif name == "include-via-magic-links":  # F9
        (rootfs / "etc/ld.so.conf").write_text(
            f"include /proc/{me}/root{canary}/conf.d/*.conf\n"
            f"include /hostproc/{me}/root{canary}/conf.d/*.conf\n"
            f"/hostproc/{me}/root{canary}/lib\n"
            "include /etc/ld.so.conf.d/*.conf\n")
    else:
        raise AssertionError(name)


HOSTILE = ["cache-to-proc-root", "cache-abs-dotdot", "cache-tmp-to-host", "confd-to-proc-root",
           "confd-to-extra-procfs", "confd-rel-dotdot", "aux-cache-to-proc-cwd",
           "confd-regular-file", "include-via-magic-links"]


@pytest.mark.parametrize("procfs", [True, False], ids=["ctr-procfs", "no-procfs"])
@pytest.mark.parametrize("layout", HOSTILE)
def test_hostile_layouts_stay_inside_the_container(rootfs: Path, host: Host, layout: str,
                                                   procfs: bool) -> None:
    """CVE-2025-23267 (F8 a-e, g) and F9: every symlink or include resolves inside the
    pivoted container root, where no procfs leads out; nothing on the host changes."""
    _layout(rootfs, layout, host.dir)
    snap = HostSnapshot()  # filtered: another daemon's mounts meanwhile do not count
    with container(rootfs, procfs=procfs) as ctr:
        res = ldconfig(ctr)
    host.assert_unchanged()
    snap.assert_unchanged()
    assert not (host.dir / "HOSTMARK").exists()
    assert res.ran and res.duration < 5
    assert not (host.dir / "lib/libhostonly.so.7").exists()  # no SONAME link made on the host
    if layout != "cache-tmp-to-host":  # ldconfig refuses to follow its temp file: exit 1
        assert res.ok, res
        cache = rootfs / "etc/ld.so.cache"
        assert stat.S_ISREG(cache.lstat().st_mode)  # a symlinked cache is replaced, not followed
        keys = cache_keys(rootfs)
        assert "libfoo.so.1" in keys and "libhostonly.so.7" not in keys


@pytest.mark.parametrize("where", ["etc/ld.so.conf", "etc/ld.so.conf.d/zz.conf"],
                         ids=["conf", "conf.d-entry"])
def test_fifo_config_is_skipped_without_blocking(rootfs: Path, host: Host, where: str) -> None:
    """F8 f: ldconfig would block opening a FIFO; it never reads the image's configuration
    (we do, O_NONBLOCK, regular files only): the FIFO is skipped with a note."""
    target = rootfs / where
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    with container(rootfs) as ctr:
        res = ldconfig(ctr, timeout=5)
    assert (res.ran, res.ok) == (True, True), res
    assert f"skip /{where}: a fifo (never read)" in res.notes
    assert res.duration < 1
    assert stat.S_ISFIFO((rootfs / where).lstat().st_mode)  # left as it was
    host.assert_unchanged()


def test_image_supplied_ldconfig_never_runs(rootfs: Path, host: Host) -> None:
    """F10 (CVE-2024-0136/0137): the image's ldconfig binaries are never executed."""
    script = (f"#!/bin/busybox sh\n/bin/busybox touch /OWNED /proc/{os.getpid()}/root{host.dir}"
              "/OWNED\n"
              "exit 0\n")
    for rel in ("sbin/ldconfig", "sbin/ldconfig.real", "usr/sbin/ldconfig"):
        p = rootfs / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(script)
        p.chmod(0o755)
    with pytest.raises(LdcacheError, match="not host-relative"):
        resolve_ldconfig("/sbin/ldconfig")
    with container(rootfs) as ctr:
        res = ldconfig(ctr, path=resolve_ldconfig("@/sbin/ldconfig"))
    assert res.ok, res
    assert not (rootfs / "OWNED").exists()
    assert not (host.dir / "OWNED").exists()
    host.assert_unchanged()


def test_seccomp_denylist_blocks_namespaces_and_kernel_surface(rootfs: Path, probe: str) -> None:
    """A new user namespace would give capabilities back; the deny-list refuses it (and the
    other listed syscalls, fork included) while ordinary syscalls - clock_gettime, socket -
    work."""
    with container(rootfs) as ctr:
        res = ldconfig(ctr, path=probe, dirs=("/seccomp",))
    assert res.ok, res
    got = probe_report(res)
    assert got["seccomp_mode"] == "2"
    for call in ("unshare_user", "unshare_net", "clone_newuser", "keyctl", "io_uring_setup",
                 "ptrace"):
        assert got[call] == "EPERM", call
    assert got["clone3"] == "ENOSYS"
    assert got["fork"] == "EPERM"  # ldconfig starts no process (seccomp and RLIMIT_NPROC)
    assert (got["clock_gettime"], got["socket"]) == ("ok", "ok")


def test_container_that_already_pivoted_is_reached_with_rootfs_slash(rootfs: Path) -> None:
    """After runc's pivot_root (a created/running container) the rootfs is the namespace's
    root: setns puts the sandbox there and rootfs="/" names it."""
    (rootfs / ".old").mkdir()
    script = (f"mount --bind {rootfs} {rootfs} && cd {rootfs} && pivot_root . .old && "
              "exec /bin/busybox sh -c "
              "'/bin/busybox umount -l /.old && exec /bin/busybox sleep 60'")
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if os.readlink(f"/proc/{proc.pid}/exe") == "/bin/busybox":
                    break
            except OSError:
                pass
            time.sleep(0.01)
        fd = os.open(f"/proc/{proc.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            res = run_ldconfig(mntns_fd=fd, rootfs="/", dirs=(LIBDIR,),
                               ldconfig_path=HOST_LDCONFIG, uid=0, gid=0, libc=Libc())
        finally:
            os.close(fd)
    finally:
        proc.kill()
        proc.wait()
    assert res.ok, res
    assert "libfoo.so.1" in cache_keys(rootfs)


def test_interrupted_supervision_kills_the_sandbox(rootfs: Path, probe: str) -> None:
    """An exception in the hook while it waits (here: a signal handler) never leaves the
    sandbox running."""
    import signal

    token = f"/interrupt-{os.getpid()}-{time.monotonic_ns()}"

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with container(rootfs) as ctr, pytest.raises(KeyboardInterrupt):
            ldconfig(ctr, path=probe, dirs=("/sleep", token), timeout=10)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", token], capture_output=True).returncode == 1


# ---- issue 8, class 1: devices, FIFOs and sockets of the image never reach ldconfig ------------

ZERO = os.makedev(1, 5)
OUTPUT_PATHS = ("etc/ld.so.cache~", "var/cache/ldconfig/aux-cache~")


def _special(rootfs: Path, rel: str, kind: str, rdev: int = ZERO) -> None:
    from tests.fixtures.security import make_node, make_special

    if kind in ("block", "char"):
        make_node(rootfs, rel, kind, rdev)
    else:
        make_special(rootfs, rel, kind)


@pytest.mark.parametrize("where", OUTPUT_PATHS, ids=["cache-tmp", "aux-cache-tmp"])
def test_block_device_at_an_output_path_is_never_written(rootfs: Path, tmp_path: Path,
                                                         where: str) -> None:
    """Before: glibc's ldconfig opened <output>~ O_CREAT|O_TRUNC without O_EXCL, outside the
    container's device cgroup: an image's block node there got written (the host disk is a
    loop device over a scratch file here)."""
    from tests.fixtures.security import loop_device

    with loop_device(tmp_path) as disk:
        _special(rootfs, where, "block", disk.rdev)
        with container(rootfs) as ctr:
            res = ldconfig(ctr)
        assert disk.unchanged(), "the image's block node was written"
    assert res.ok, res
    assert (rootfs / where).lstat().st_rdev == disk.rdev  # left alone
    assert "libfoo.so.1" in cache_keys(rootfs)


@pytest.mark.parametrize("kind", ["fifo", "socket", "char"])
@pytest.mark.parametrize("where", OUTPUT_PATHS, ids=["cache-tmp", "aux-cache-tmp"])
def test_special_files_at_output_paths_do_not_stall(rootfs: Path, where: str,
                                                    kind: str) -> None:
    """Before: a FIFO at ldconfig's temp file stalled the start until the 10 s CPU limit."""
    _special(rootfs, where, kind)
    with container(rootfs) as ctr:
        res = ldconfig(ctr, timeout=10)
    assert res.ok, res
    assert res.duration < 2, res.duration
    assert "libfoo.so.1" in cache_keys(rootfs)


@pytest.mark.parametrize("kind", ["fifo", "char", "block", "socket"])
def test_include_naming_a_special_file_is_never_read(rootfs: Path, tmp_path: Path,
                                                     kind: str) -> None:
    """Before: the preflight looked at ld.so.conf and ld.so.conf.d/*.conf only; an include
    elsewhere naming /dev/zero let ldconfig grow to its 2 GiB address-space limit, a FIFO
    stalled it."""
    from tests.fixtures.security import loop_device

    with loop_device(tmp_path) as disk:
        rdev = disk.rdev if kind == "block" else ZERO
        _special(rootfs, "opt/conf/evil.cfg", kind, rdev)
        with open(rootfs / "etc/ld.so.conf", "a") as f:
            f.write("include /opt/conf/*.cfg\n")
        with container(rootfs) as ctr:
            res = ldconfig(ctr)
        assert disk.unchanged()
    assert res.ok, res
    assert res.duration < 2, res.duration
    assert [n for n in res.notes if n.startswith("skip /opt/conf/evil.cfg: ")], res.notes
    assert "libfoo.so.1" in cache_keys(rootfs)


def test_symlink_to_a_fifo_in_a_library_dir_is_refused(rootfs: Path) -> None:
    """ldconfig opens what a lib*.so* symlink points at: a FIFO there would block it."""
    os.mkfifo(rootfs / "opt-fifo")
    (rootfs / LIBDIR[1:] / "libevil.so.1").symlink_to("/opt-fifo")
    with container(rootfs) as ctr:
        res = ldconfig(ctr, timeout=10)
    assert (res.ran, res.ok) == (False, False)
    assert res.warning == (f"ldconfig not run: {LIBDIR}/libevil.so.1 is a symlink to a fifo "
                           "(ldconfig would block opening it)")
    assert res.duration < 2


def test_the_view_is_nodev_nosuid_noexec(rootfs: Path, probe: str) -> None:
    """A device node of the image cannot be opened in the sandbox at all (nodev)."""
    _special(rootfs, "etc/zero", "char")
    with container(rootfs) as ctr:
        res = ldconfig(ctr, path=probe, dirs=("/open=/etc/zero", "/open=/etc/probe-marker"))
    assert res.ok, res
    got = probe_report(res)
    assert (got["open /etc/zero"], got["open /etc/probe-marker"]) == ("EACCES", "ok")


@pytest.mark.parametrize("kind", ["fifo", "block", "symlink", "directory"])
def test_cache_is_installed_by_rename(rootfs: Path, tmp_path: Path, kind: str) -> None:
    """The image's /etc/ld.so.cache (whatever it is) is replaced, never opened; a directory
    there is a clean warning."""
    from tests.fixtures.security import loop_device

    cache = rootfs / "etc/ld.so.cache"
    with loop_device(tmp_path) as disk:
        if kind == "directory":
            cache.mkdir()
        elif kind == "symlink":
            cache.symlink_to("/etc/probe-marker")
        else:
            _special(rootfs, "etc/ld.so.cache", kind, disk.rdev)
        with container(rootfs) as ctr:
            res = ldconfig(ctr)
        assert disk.unchanged()
    assert (rootfs / "etc/probe-marker").read_text() == "container-root\n"
    if kind == "directory":
        assert (res.ran, res.ok) == (True, False)
        assert "install /etc/ld.so.cache: is a directory" in res.warning
        return
    assert res.ok, res
    assert stat.S_ISREG(cache.lstat().st_mode) and cache.stat().st_mode & 0o777 == 0o644
    assert not [p for p in (rootfs / "etc").iterdir() if ".nvhook-" in p.name]


def test_aux_cache_of_the_image_is_neither_read_nor_written(rootfs: Path) -> None:
    aux = rootfs / "var/cache/ldconfig"
    aux.mkdir(parents=True)
    (aux / "aux-cache").write_bytes(b"image's own aux cache")
    with container(rootfs) as ctr:
        res = ldconfig(ctr)
    assert res.ok, res
    assert sorted(p.name for p in aux.iterdir()) == ["aux-cache"]
    assert (aux / "aux-cache").read_bytes() == b"image's own aux cache"


def test_include_cycle_ends_at_once(rootfs: Path) -> None:
    """F8-h: glibc's ldconfig followed an include cycle until the 10 s limit killed it."""
    with open(rootfs / "etc/ld.so.conf", "a") as f:
        f.write("include /etc/ld.so.conf\n")
    (rootfs / "etc/ld.so.conf.d/loop.conf").write_text("include /etc/ld.so.conf\n")
    with container(rootfs) as ctr:
        res = ldconfig(ctr, timeout=10)
    assert res.ok, res
    assert res.duration < 2
    assert "libfoo.so.1" in cache_keys(rootfs)


@pytest.mark.parametrize(("budget", "layout", "words"), [
    ("MAX_SCAN_ENTRIES", "entries", "more than 50 entries"),
    ("MAX_CONF_FILES", "files", "more than 50 files"),
    ("MAX_DIRS", "dirs", "more than 50 directories"),
    ("MAX_GLOB_ENTRIES", "glob", "more than 50 directory entries"),
    ("MAX_INCLUDE_DEPTH", "depth", "deeper than 50 levels"),
], ids=["lib-dir-entries", "conf-files", "conf-dirs", "glob-entries", "include-depth"])
def test_budgets_refuse_with_one_line(rootfs: Path, monkeypatch: pytest.MonkeyPatch,
                                      budget: str, layout: str, words: str) -> None:
    from nvmount.ldcache import ldconf

    monkeypatch.setattr(ldconf, budget, 50)  # the sandbox is forked: it sees the patch
    confd = rootfs / "etc/ld.so.conf.d"
    if layout == "entries":
        for i in range(60):
            (rootfs / LIBDIR[1:] / f"f{i}").write_bytes(b"")
    elif layout in ("files", "glob"):
        for i in range(60):
            (confd / f"c{i:02}.conf").write_text(f"/opt/l{i}\n")
    elif layout == "dirs":
        (confd / "many.conf").write_text("".join(f"/opt/l{i}\n" for i in range(60)))
    else:
        for i in range(60):
            (confd / f"d{i:02}.conf").write_text(f"include /etc/ld.so.conf.d/d{i + 1:02}.conf\n")
    with container(rootfs) as ctr:
        res = ldconfig(ctr)
    assert (res.ran, res.ok) == (False, False), res
    assert res.warning.startswith("ldconfig not run: ") and words in res.warning, res.warning
    assert "\n" not in res.warning


@contextmanager
def fresh_cgroups() -> Iterator[list[str]]:
    """New cgroups for a test "container": in the v1 memory and pids hierarchies and the v2
    one, those this host has; removed afterwards (after the processes in them are gone)."""
    from nvmount.container.cgroup import parse_mountinfo

    with open("/proc/self/mountinfo") as f:
        mounts = parse_mountinfo(f.read())
    roots = [m.mount_point for m in mounts if m.fstype == "cgroup2" or (
        m.fstype == "cgroup" and {"memory", "pids"} & set(m.super_options))]
    made = []
    try:
        for root in dict.fromkeys(roots):
            path = f"{root}/nvhook-test-{os.getpid()}-{time.monotonic_ns()}"
            os.mkdir(path)
            made.append(path)
        yield made
    finally:
        for path in made:
            for _ in range(100):
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    time.sleep(0.02)


def _cgroup_of(token: str, w: int, deadline: float) -> None:  # pragma: no cover - child
    """Report /proc/<pid>/cgroup of the process whose cmdline has `token`."""
    text = ""
    while time.monotonic() < deadline and not text:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        with open(f"/proc/{pid}/cgroup") as g:
                            text = g.read()
                        break
            except OSError:
                continue
        time.sleep(0.01)
    os.write(w, text.encode())


def test_ldconfig_runs_in_the_containers_cgroups(rootfs: Path, probe: str) -> None:
    """Before: the sandbox ran outside the container's memory, pids, cpu and device cgroups
    (/dev/zero as an include let ldconfig grow to 1 GiB under a 64 MiB container limit)."""
    from nvmount.container.cgroup import process_cgroups

    token = f"/cgtoken-{os.getpid()}-{time.monotonic_ns()}"
    with fresh_cgroups() as dirs, container(rootfs) as ctr:
        if not dirs:
            pytest.skip("no memory, pids or cgroup2 hierarchy")
        for d in dirs:
            Path(d, "cgroup.procs").write_text(str(ctr.pid))
        cgroups = process_cgroups(ctr.pid)
        assert {d for d in dirs} <= {c.path for c in cgroups}
        r, w = os.pipe()
        helper = os.fork()
        if helper == 0:  # pragma: no cover - child
            os.close(r)
            _cgroup_of(token, w, time.monotonic() + 5)
            os._exit(0)
        os.close(w)
        res = ldconfig(ctr, path=probe, dirs=("/sleep", token), timeout=1.5, cgroups=cgroups)
        os.waitpid(helper, 0)
        with os.fdopen(r) as f:
            seen = f.read()
    assert res.reason == "timeout", res
    assert seen, "the probe never showed up"
    for d in dirs:
        assert d.rsplit("/", 1)[1] in seen, (d, seen)


def test_unjoinable_cgroup_means_no_ldconfig(rootfs: Path, tmp_path: Path) -> None:
    with container(rootfs) as ctr:
        res = ldconfig(ctr, cgroups=(CgroupTarget(1, str(tmp_path)),))
    assert (res.ran, res.ok) == (False, False)
    assert res.warning.startswith(f"start the ldconfig sandbox: open cgroup {tmp_path}: not a "
                                  "cgroup v1 filesystem")
