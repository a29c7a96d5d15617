"""The security suite's rig: GPU containers under runc with the simulated driver, malicious
rootfs builders and the host/container oracles (security.md §0 "goal of every test").

Built on the e2e harness (tests/fixtures/containers.py): `ContainerFactory` bundles and runs,
the session rootfs cache and the installed hook launcher. Added here:

- `AttackRig`: a factory whose prestart hooks are the simulation's /proc/driver step and
  nvhook's launcher (both through the isolated `nvhook install` launcher), with per-test
  config.toml variants, hook env (fault injection) and attacker steps (`plant`).
- `HostOracle`: what no container start may change on the host - random marker paths that
  must never appear, sha256 of sensitive files, driver-looking names in host directories
  the engine would write to if it escaped, the host mount table and core_pattern.
- `Outcome`: one start's result; the container's own mountinfo (printed by `PROBE`) is
  checked for mounts whose source is outside the bundle and the driver root
  (`foreign_mounts`), and a failed start's hook error is extracted as one line.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvhook.demo.bundle import HookEntry, Runc, RuncResult
from nvhook.demo.driver import nvhook_hook_entry, sim_prestart_entry
from nvhook.demo.rootfs import RootfsFlavor
from nvhook.sim import SimRoot
from tests.fixtures.containers import ContainerFactory, host_mountinfo

TOOLS = Path(__file__).parent / "tools"
LIB = "/usr/lib/x86_64-linux-gnu"
DRIVER_VERSION = "550.54.15"
WITNESS = ".nvhook-passed"  # written into the bundle (cwd) by a hook after nvhook's
START_LIMIT_S = 10.0  # "bounded time": a start (hook included) on 2 shared cores
# Names the engine would leave in a host directory if a path escaped the rootfs.
_ARTEFACT = re.compile(r"nvidia|libcuda|libnv|nvcuvid|gsp_|HOST_|OWNED|HOSTMARK")
_WATCHED_DIRS = (
    "/", "/etc", "/etc/ld.so.conf.d", "/usr/bin", "/usr/sbin", "/usr/lib",
    f"{LIB}", "/usr/lib64", "/usr/local/lib", "/usr/local/cuda", "/lib/firmware",
    "/lib/firmware/nvidia", "/run", "/var/run", "/var/cache/ldconfig", "/dev", "/proc/driver",
)
_WATCHED_FILES = (
    "/etc/shadow", "/etc/passwd", "/etc/group", "/etc/hostname", "/etc/ld.so.cache",
    "/etc/ld.so.conf", "/sbin/ldconfig", "/sbin/ldconfig.real", "/usr/sbin/ldconfig",
    "/proc/sys/kernel/core_pattern",
)
PROBE = (
    "echo @@mountinfo; cat /proc/self/mountinfo; echo @@dev; ls -1 /dev; echo @@end"
)


def token() -> str:
    return secrets.token_hex(5)


# ---- host oracle ------------------------------------------------------------------------------

def _sha(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        return "absent"
    except OSError as err:
        return f"error {err.errno}"


def _artefacts() -> set[str]:
    found: set[str] = set()
    for d in _WATCHED_DIRS:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        found.update(f"{d.rstrip('/')}/{n}" for n in names if _ARTEFACT.search(n))
    return found


@dataclass
class HostOracle:
    """Host state that no container start may change (taken when created)."""

    markers: list[str] = field(default_factory=list)
    hashes: dict[str, str] = field(default_factory=dict)
    artefacts: set[str] = field(default_factory=set)
    mounts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.hashes = {p: _sha(p) for p in _WATCHED_FILES}
        self.artefacts = _artefacts()
        self.mounts = host_mountinfo()

    def marker(self, directory: str = "/tmp", tag: str = "HOST") -> str:
        """A fresh host path `<directory>/<tag>_<random>` that must never come to exist."""
        path = f"{directory.rstrip('/')}/{tag}_{token()}"
        assert not os.path.lexists(path)
        self.markers.append(path)
        return path

    def problems(self) -> list[str]:
        out = [f"host marker exists: {m}" for m in self.markers if os.path.lexists(m)]
        out += [f"host file changed: {p}" for p, h in self.hashes.items() if _sha(p) != h]
        out += [f"new host entry: {a}" for a in sorted(_artefacts() - self.artefacts)]
        now = host_mountinfo()
        out += [f"host mount added: {m}" for m in sorted(set(now) - set(self.mounts))]
        out += [f"host mount removed: {m}" for m in sorted(set(self.mounts) - set(now))]
        return out

    def assert_clean(self) -> None:
        problems = self.problems()
        assert not problems, "host changed:\n" + "\n".join(problems)


# ---- one start --------------------------------------------------------------------------------

def sections(stdout: str) -> dict[str, list[str]]:
    """`@@name` headed sections of the probe output."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith("@@"):
            current = out.setdefault(line[2:].strip(), [])
        elif current is not None:
            current.append(line)
    return out


def host_root_device() -> str:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == "/":
                return fields[2]
    raise AssertionError("no / in mountinfo")


def foreign_mounts(mountinfo: Iterable[str], allowed_roots: Sequence[str]) -> list[str]:
    """Mounts of the host's root filesystem whose source is outside `allowed_roots`
    (the bundle and the driver root): a host directory exposed in the container."""
    dev = host_root_device()
    bad = []
    for line in mountinfo:
        fields = line.split()
        if len(fields) < 5 or fields[2] != dev:
            continue
        root = fields[3]
        if not any(root == a or root.startswith(a.rstrip("/") + "/") for a in allowed_roots):
            bad.append(line)
    return bad


def hook_error(stderr: str) -> str:
    """The failing hook's own stderr out of runc's log line (logfmt: `msg="... error running
    hook #N: ..., stderr: <text, escaped>"`), unescaped, without the final newline."""
    _, sep, rest = stderr.partition("stderr: ")
    if not sep:
        return stderr.strip()
    text = rest.strip()
    if text.endswith('"'):
        text = text[:-1]
    text = text.replace("\\\\", "\0").replace("\\n", "\n").replace('\\"', '"')
    return text.replace("\0", "\\").removesuffix("\n")


@dataclass
class Outcome:
    result: RuncResult
    bundle: Path
    allowed_roots: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.result.returncode == 0

    @property
    def sections(self) -> dict[str, list[str]]:
        return sections(self.result.stdout)

    @property
    def error(self) -> str:
        return hook_error(self.result.stderr)

    @property
    def hook_passed(self) -> bool:
        """nvhook's hook (and the steps after it) succeeded: the last hook ran."""
        return (self.bundle / WITNESS).exists()

    @property
    def rootfs(self) -> Path:
        return self.bundle / "rootfs"

    def describe(self) -> str:
        """runc's result without the long mountinfo section."""
        text = self.result.describe()
        head, sep, rest = text.partition("@@mountinfo\n")
        if not sep:
            return text
        _, sep2, tail = rest.partition("@@dev\n")
        return head + "@@mountinfo (left out)\n" + (sep2 + tail if sep2 else rest[-2000:])

    def assert_contained(self, limit_s: float = START_LIMIT_S) -> None:
        """Bounded time; when started, no foreign mount inside; when refused, one line."""
        assert self.result.seconds < limit_s, self.describe()
        if self.ok:
            mounts = self.sections.get("mountinfo")
            assert mounts, f"probe output missing\n{self.describe()}"
            bad = foreign_mounts(mounts, self.allowed_roots)
            assert not bad, "host directories mounted into the container:\n" + "\n".join(bad)
        else:
            self.assert_one_line_error()

    def assert_one_line_error(self, *needles: str, alone: bool = True) -> str:
        """The hook failed with one error line naming `needles` (its last stderr line; with
        `alone`, the only one: no warnings logged before it). Returns that line."""
        assert not self.ok, f"expected the start to fail\n{self.describe()}"
        lines = [ln for ln in self.error.splitlines() if ln.strip()]
        assert lines, self.describe()
        err = lines[-1]
        assert "Traceback" not in self.result.stderr, self.describe()
        assert "internal error" not in err, self.describe()
        assert len(lines) == 1 or not alone, f"not one line: {lines!r}"
        for needle in needles:
            assert needle in err, f"{needle!r} not in the hook error {err!r}"
        return err


# ---- the rig -----------------------------------------------------------------------------------

Mutator = Callable[[Path], None]


@dataclass
class AttackRig:
    """GPU containers (simulated driver, nvhook's installed launcher) for attack fixtures."""

    factory: ContainerFactory
    sim: SimRoot
    launcher: Path
    tmp: Path
    allowed: list[str] = field(default_factory=list)

    def config(self, extra: str = "", *, top: str = "",
               replace: dict[str, str] | None = None) -> Path:
        """The simulation's config.toml with `top` (top-level keys) before it and `extra`
        (tables) after it (a new file per call)."""
        text = Path(self.sim.config_path).read_text()
        for old, new in (replace or {}).items():
            text = text.replace(old, new)
        path = self.tmp / f"config-{token()}.toml"
        path.write_text(top + "\n" + text + "\n" + extra + "\n")
        return path

    def allow(self, path: Path) -> None:
        """A test-made host path that the spec mounts into containers (not an escape)."""
        self.allowed.append(str(path))

    def hooks(self, *, config: Path | None = None, hook_env: Sequence[str] = (),
              debug: bool = False, before: Sequence[HookEntry] = (),
              after: Sequence[HookEntry] = (),
              nvhook: HookEntry | None = None) -> tuple[HookEntry, ...]:
        """sim /proc/driver step, attacker steps (`before`), nvhook's hook, then `after`."""
        config = config or Path(self.sim.config_path)
        sim_step = sim_prestart_entry(config, self.launcher)
        if nvhook is None:
            nvhook = nvhook_hook_entry(self.launcher, config, *(["--debug"] if debug else []))
            nvhook = HookEntry(nvhook.path, nvhook.args, (*nvhook.env, *hook_env), timeout=60)
        witness = HookEntry("/bin/sh", ("sh", "-c", f"cat >/dev/null; : > {WITNESS}"))
        return (sim_step, *before, nvhook, *after, witness)

    def bundle(self, script: str = PROBE, *, gpus: str | None = "0",
               caps: str = "utility,compute", env: Sequence[str] = (),
               mutate: Mutator | None = None, hooks: Sequence[HookEntry] | None = None,
               flavor: RootfsFlavor = RootfsFlavor.GLIBC, readonly: bool = False,
               edit_spec: Callable[[dict[str, Any]], None] | None = None,
               **hook_kw: object) -> Path:
        gpu_env = [] if gpus is None else [f"NVIDIA_VISIBLE_DEVICES={gpus}",
                                           f"NVIDIA_DRIVER_CAPABILITIES={caps}"]
        prestart = tuple(hooks) if hooks is not None else self.hooks(**hook_kw)  # type: ignore[arg-type]
        bundle = self.factory.bundle(["/bin/sh", "-c", script], env=[*gpu_env, *env],
                                     flavor=flavor, prestart=prestart, readonly=readonly,
                                     edit_spec=edit_spec)
        if mutate is not None:
            mutate(bundle / "rootfs")
        return bundle

    def run(self, bundle: Path, *, runc: Runc | None = None, timeout: float = 60.0) -> Outcome:
        res = self.factory.run(bundle, runc=runc, timeout=timeout)
        return Outcome(res, bundle, (str(bundle), self.sim.path, *self.allowed))

    def start(self, script: str = PROBE, *, runc: Runc | None = None, **kw: Any) -> Outcome:
        return self.run(self.bundle(script, **kw), runc=runc)


def plant(script: str) -> HookEntry:
    """A prestart step that runs `script` in the container's mount namespace ($ROOTFS)."""
    return HookEntry("/usr/bin/python3", ("python3", "-I", str(TOOLS / "plant.py"), script),
                     timeout=30)


# ---- rootfs builders ---------------------------------------------------------------------------

def replace_with_symlink(rootfs: Path, path: str, target: str) -> None:
    """Make container `path` a symlink to `target` (whatever was there is removed)."""
    host = rootfs / path.lstrip("/")
    if host.is_dir() and not host.is_symlink():
        shutil.rmtree(host)
    elif host.exists() or host.is_symlink():
        host.unlink()
    host.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, host)


def symlinks(*pairs: tuple[str, str]) -> Mutator:
    def mutate(rootfs: Path) -> None:
        for path, target in pairs:
            replace_with_symlink(rootfs, path, target)
    return mutate


def make_special(rootfs: Path, path: str, kind: str) -> None:
    """A FIFO, socket or block device at container `path` (replacing what was there)."""
    import socket

    host = rootfs / path.lstrip("/")
    if host.is_dir() and not host.is_symlink():
        shutil.rmtree(host)
    elif host.exists() or host.is_symlink():
        host.unlink()
    host.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(host)
    elif kind == "socket":  # bound at a short path, then renamed (sun_path is 108 bytes)
        short = f"/tmp/.sock-{token()}"
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(short)
        os.rename(short, host)
    elif kind == "block":
        os.mknod(host, 0o600 | stat.S_IFBLK, os.makedev(7, 0))
    else:
        raise ValueError(kind)


def flatten_usr(rootfs: Path) -> None:
    """Move /usr/{bin,sbin,lib,lib64} to the top level (un-merged /usr), so that /usr (or
    /lib) can be made a link to "/" without losing the shell."""
    for name in ("bin", "sbin", "lib", "lib64"):
        top = rootfs / name
        if top.is_symlink():
            top.unlink()
            shutil.move(str(rootfs / "usr" / name), str(top))
    shutil.rmtree(rootfs / "usr")
    (rootfs / "usr").mkdir()
    # the loader path is absolute in ELF files: keep it reachable
    loader = rootfs / "lib64" / "ld-linux-x86-64.so.2"
    if loader.is_symlink():
        loader.unlink()
        loader.symlink_to("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")


def compile_poc(out: Path, marker: str) -> Path:
    """A shared object whose constructor creates `marker` (CVE-2025-23266's poc.so)."""
    import subprocess

    src = out.with_suffix(".c")
    src.write_text(
        "#include <fcntl.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void poc(void) {\n"
        f'  int fd = open("{marker}", O_CREAT | O_WRONLY, 0644);\n'
        "  if (fd >= 0) { write(fd, \"owned\\n\", 6); close(fd); }\n}\n"
        "unsigned la_version(unsigned v) { return v; }\n"
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True,
                   capture_output=True)
    return out


# ---- a "container" without runc, and the hook run by hand --

@contextmanager
def ns_container(rootfs: Path, *, sim_proc_driver: bool = True) -> Iterator[int]:
    """Pid of a `sleep` in its own (private) mount namespace with <rootfs>/proc mounted and
    the simulation's tmpfs on <rootfs>/proc/driver: what runc leaves at prestart time."""
    from nvhook.sim.prestart import mount_proc_driver

    script = f"mount -t proc proc '{rootfs}/proc' && exec sleep 600"
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if os.readlink(f"/proc/{proc.pid}/exe").endswith("/sleep"):
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "sleeper did not start"
            time.sleep(0.005)
        if sim_proc_driver:
            mount_proc_driver(proc.pid, str(rootfs))
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def run_hook(launcher: Path, config: Path | str, state: bytes, *, cwd: Path | str = "/",
             env: Sequence[str] = (), args: Sequence[str] = (),
             timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """`nvidia-container-runtime-hook --config C prestart` with `state` on stdin."""
    environ = dict(e.split("=", 1) for e in ("PATH=/usr/sbin:/usr/bin:/sbin:/bin", *env))
    return subprocess.run(
        [str(launcher), "--config", str(config), *args, "prestart"], input=state.decode(
            errors="surrogateescape"), capture_output=True, text=True, cwd=cwd, env=environ,
        timeout=timeout, check=False)


def gpu_spec(root_path: str,
             env: Sequence[str] = ("NVIDIA_VISIBLE_DEVICES=0",)) -> dict[str, object]:
    from nvhook.demo.bundle import container_spec

    spec = container_spec(["/bin/true"], ["NVIDIA_DRIVER_CAPABILITIES=utility,compute", *env])
    spec["root"] = {"path": root_path, "readonly": False}
    return spec


def compile_tool(name: str, out_dir: Path, *, static: bool = False) -> Path:
    """Compile tests/security/tools/<name>.c into `out_dir` (once); return the binary."""
    out = out_dir / name
    if not out.exists():
        cmd = ["gcc", "-O2", *(["-static"] if static else []), "-o", str(out),
               str(TOOLS / f"{name}.c")]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"compile {name}: {proc.stderr}"
    return out


def wrap_script(script: str) -> tuple[str, ...]:
    """A `Runc.wrap` that runs `script` in a private mount namespace, then runc ("$@")."""
    return ("unshare", "-m", "--propagation", "private", "sh", "-c", script, "nvhook-wrap")
