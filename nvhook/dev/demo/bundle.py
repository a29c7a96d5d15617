"""OCI bundles and `runc` runs for the demo, the e2e tests and the benchmark (one implementation).

Stage: demo/test support, off the hook's path. Writes bundles under a caller's directory,
starts containers with the `runc` binary and always deletes them and their cgroups again.

The spec is what `runc spec` writes (runc 1.1.5), with `process.terminal` off, a writable root,
the caller's args/env/capabilities and `hooks.prestart`. Hooks get an explicit `env` (runc would
otherwise pass its own environment through, clients.md §2).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from nvhook.errors import NvhookError
from nvmount.records import field, mutable_record, record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence

HOOK_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
CONTAINER_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# the GPU variables of NVIDIA's CUDA 12 images (nvidia/cuda:12.2.0-base-ubuntu22.04, its
# NVIDIA_REQUIRE_CUDA shortened from 20 brand terms to 4): what most GPU containers set, and
# what the hot-path tests and the benchmarks start
CUDA_IMAGE_ENV = (
    "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
    "/usr/bin:/sbin:/bin",
    "NVARCH=x86_64",
    "NVIDIA_REQUIRE_CUDA=cuda>=12.2 brand=tesla,driver>=470,driver<471 "
    "brand=unknown,driver>=470,driver<471 brand=tesla,driver>=525,driver<526 "
    "brand=unknown,driver>=525,driver<526",
    "NV_CUDA_CUDART_VERSION=12.2.53-1",
    "NV_CUDA_COMPAT_PACKAGE=cuda-compat-12-2",
    "CUDA_VERSION=12.2.0",
    "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
)
DEFAULT_CAPS = ("CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE")
RUNC_CANDIDATES = ("/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Run a command in a private mount namespace where /sys/fs/cgroup is a cgroup2 mount, so that
# runc picks its cgroup-v2 manager (clients.md §4). Append the runc argv.
CGROUP2_WRAP = (
    "unshare", "-m", "--propagation", "private", "sh", "-c",
    'mount -t cgroup2 none /sys/fs/cgroup && exec "$@"', "cgroup2-wrap",
)


@record
class HookEntry:
    """One `hooks.prestart` element."""

    path: str
    args: tuple[str, ...]
    env: tuple[str, ...] = HOOK_ENV
    timeout: int | None = None

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"path": self.path, "args": list(self.args), "env": list(self.env)}
        if self.timeout is not None:
            doc["timeout"] = self.timeout
        return doc


@record
class RuncResult:
    """What one `runc run` (or create/start) printed and returned."""

    container_id: str
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (f"{' '.join(self.argv)} -> rc {self.returncode} in {self.seconds:.3f}s\n"
                f"--- stdout:\n{self.stdout}--- stderr:\n{self.stderr}")


@mutable_record
class Runc:
    """A `runc` binary plus the argv prefix that runs it (e.g. CGROUP2_WRAP)."""

    binary: str = field(default_factory=lambda: str(find_runc()))
    wrap: tuple[str, ...] = ()
    global_args: tuple[str, ...] = ()

    def argv(self, *args: str) -> list[str]:
        return [*self.wrap, self.binary, *self.global_args, *args]


def find_runc() -> Path:
    found = shutil.which("runc")
    for cand in (found, *RUNC_CANDIDATES):
        if cand and os.access(cand, os.X_OK):
            return Path(cand)
    raise NvhookError("find runc: not installed (apt-get install runc, or run packaging/setup.sh)")


def new_container_id(tag: str = "demo") -> str:
    return f"nvhook-{tag}-{uuid.uuid4().hex[:10]}"


def container_spec(
    args: Sequence[str],
    env: Sequence[str] = (),
    *,
    prestart: Sequence[HookEntry] = (),
    capabilities: Sequence[str] = DEFAULT_CAPS,
    readonly: bool = False,
    hostname: str = "nvhook",
) -> dict[str, object]:
    """A `runc spec`-shaped config.json document for a non-terminal container."""
    caps = list(capabilities)
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": [CONTAINER_PATH, *env],
            "cwd": "/",
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted", "ambient")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": readonly},
        "hostname": hostname,
        "mounts": _default_mounts(),
        "hooks": {"prestart": [h.to_json() for h in prestart]},
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                            "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                            "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                              "/proc/sysrq-trigger"],
        },
    }


def _default_mounts() -> list[dict[str, object]]:
    def m(dest: str, typ: str, src: str, *opts: str) -> dict[str, object]:
        return {"destination": dest, "type": typ, "source": src, "options": list(opts)}

    return [
        m("/proc", "proc", "proc"),
        m("/dev", "tmpfs", "tmpfs", "nosuid", "strictatime", "mode=755", "size=65536k"),
        m("/dev/pts", "devpts", "devpts", "nosuid", "noexec", "newinstance", "ptmxmode=0666",
          "mode=0620", "gid=5"),
        m("/dev/shm", "tmpfs", "shm", "nosuid", "noexec", "nodev", "mode=1777", "size=65536k"),
        m("/dev/mqueue", "mqueue", "mqueue", "nosuid", "noexec", "nodev"),
        m("/sys", "sysfs", "sysfs", "nosuid", "noexec", "nodev", "ro"),
        m("/sys/fs/cgroup", "cgroup", "cgroup", "nosuid", "noexec", "nodev", "relatime", "ro"),
    ]


def write_bundle(bundle: Path, rootfs_src: Path, spec: dict[str, object]) -> Path:
    """Create `bundle` with a fresh copy of `rootfs_src` as rootfs/ and `spec` as config.json."""
    from nvhook.dev.demo.rootfs import copy_rootfs

    bundle.mkdir(parents=True, exist_ok=True)
    copy_rootfs(rootfs_src, bundle / "rootfs")
    write_spec(bundle, spec)
    return bundle


def write_spec(bundle: Path, spec: dict[str, object]) -> None:
    (bundle / "config.json").write_text(json.dumps(spec, indent=2) + "\n")


def runc_run(bundle: Path, container_id: str, *, runc: Runc | None = None,
             timeout: float = 60.0) -> RuncResult:
    """`runc run` the bundle in the foreground; always delete the container and its cgroups."""
    runc = runc or Runc()
    try:
        return _run(runc.argv("run", "--bundle", str(bundle), container_id), container_id,
                    timeout, cwd=bundle)
    finally:
        delete_container(container_id, runc=runc)


def runc_command(runc: Runc, container_id: str, *args: str, timeout: float = 30.0,
                 cwd: Path | None = None) -> RuncResult:
    """One `runc <args...>` call (create, start, state, kill ...), not cleaned up."""
    return _run(runc.argv(*args), container_id, timeout, cwd=cwd)


def _run(argv: list[str], container_id: str, timeout: float, *, cwd: Path | None) -> RuncResult:
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              cwd=cwd, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        out = _text(err.stdout)
        raise NvhookError(
            f"run {' '.join(argv)}: timed out after {timeout:.0f}s (output so far: {out[-500:]!r})"
        ) from err
    except FileNotFoundError as err:
        raise NvhookError(f"run {argv[0]}: not found (apt-get install runc)") from err
    return RuncResult(container_id, tuple(argv), proc.returncode, proc.stdout, proc.stderr,
                      time.monotonic() - start)


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def delete_container(container_id: str, *, runc: Runc | None = None) -> None:
    """`runc delete -f`, then remove any cgroup directory named after the container."""
    runc = runc or Runc()
    subprocess.run(runc.argv("delete", "-f", container_id), capture_output=True, timeout=30,
                   check=False, stdin=subprocess.DEVNULL)
    remove_cgroups(container_id)


def container_cgroup_dirs(container_id: str) -> list[Path]:
    """Existing cgroup dirs of `container_id` in every hierarchy (at the root or under ours)."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for ctrl in ctrls.split(",") if ctrls else ["unified"]:
                own[ctrl.removeprefix("name=")] = path
    found = []
    for hier in sorted(CGROUP_ROOT.iterdir()) if CGROUP_ROOT.is_dir() else []:
        if hier.is_symlink() or not hier.is_dir():
            continue
        parents = {"/", *(own[c] for c in hier.name.split(",") if c in own)}
        for parent in sorted(parents):
            cand = hier / parent.lstrip("/") / container_id
            if cand.is_dir():
                found.append(cand)
    return found


def remove_cgroups(container_id: str) -> None:
    for path in container_cgroup_dirs(container_id):
        for attempt in range(20):
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as err:
                if attempt == 19:
                    raise NvhookError(f"remove cgroup {path}: {err.strerror} (is a process of "
                                      f"container {container_id} still running?)") from err
                time.sleep(0.05)
