"""`apply-cuda-memory-limits --driver-root ROOT --gpu-id UUID ...` (NVIDIA's open pull request
#1995, merged for 1.21 as #2075): NVML's CUDA memory limits (NVML 13.4,
`nvmlDeviceSetMemoryLimits_v1`, root only) on the container's cgroup v2 directory for each GPU
named, from the container's environment in config.json:

| variable                                               | limit | unit |
|--------------------------------------------------------|-------|------|
| NVIDIA_GPU_MEMORY_REQUESTS (else NVIDIA_GPU_MEMORY_REQUEST) | soft  | MiB  |
| NVIDIA_GPU_MEMORY_LIMITS (else NVIDIA_GPU_MEMORY_LIMIT)     | hard  | MiB  |

Both or nothing is done; a request above the limit, a value that is not a number of MiB, a
container outside cgroup v2 or an NVML failure is one line and a failed container. Where nvhook
differs from NVIDIA's hook: the cgroup is the container process's own (/proc/PID/cgroup's
`0::` line on the runtime's cgroup2 mount), not one derived from a systemd `slice:prefix:name`
cgroupsPath, so cgroupfs-driven runtimes work too; NVML runs in a child process (its threads
never enter the hook, which may enter namespaces after); the numbers are bounded. The
decisions are pure functions; `apply` holds the effects.
"""

from __future__ import annotations

import os

from nvhook.errors import NvhookError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

MIB = 1 << 20
MAX_MIB = 1 << 30  # 1 PiB: no GPU has more
REQUESTS = ("NVIDIA_GPU_MEMORY_REQUESTS", "NVIDIA_GPU_MEMORY_REQUEST")
LIMITS = ("NVIDIA_GPU_MEMORY_LIMITS", "NVIDIA_GPU_MEMORY_LIMIT")
NVML_TIMEOUT = 30.0


class MemoryLimitError(NvhookError):
    """The limits cannot be applied: the container must not start."""


def _lookup(env: Sequence[object], names: tuple[str, ...]) -> tuple[str, str] | None:
    values: dict[str, str] = {}
    for entry in env:
        if isinstance(entry, str):
            name, sep, value = entry.partition("=")
            if sep and name in names:
                values[name] = value  # the last one of a name wins
    for name in names:
        if name in values:
            return name, values[name]
    return None


def _mib(name: str, value: str) -> int:
    text = value.strip()
    if not text.isdigit() or len(text) > 10 or int(text) > MAX_MIB:
        raise MemoryLimitError(f"apply-cuda-memory-limits: {name}={value[:40]!r} is not a "
                               f"number of MiB (at most {MAX_MIB}; fix the container's "
                               "environment)")
    return int(text)


def limits_of(env: Sequence[object]) -> tuple[int, int] | None:
    """(soft, hard) in bytes from the environment; None unless both are set."""
    request, limit = _lookup(env, REQUESTS), _lookup(env, LIMITS)
    if request is None or limit is None:
        return None
    soft, hard = _mib(*request), _mib(*limit)
    if soft > hard:
        raise MemoryLimitError(f"apply-cuda-memory-limits: memory request ({soft} MiB, "
                               f"{request[0]}) exceeds memory limit ({hard} MiB, {limit[0]})")
    return soft * MIB, hard * MIB


def cgroup2_mounts(mountinfo: str) -> list[str]:
    """The cgroup2 mount points of a mountinfo text, the latest first (a later mount hides
    an earlier one at or above its point: hybrid hosts' /sys/fs/cgroup/unified)."""
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if sep and tail.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            found.append(fields[4].replace("\\040", " "))
    return found[::-1]


def cgroup_dir(proc_cgroup: str, mounts: list[str],
               isdir: Callable[[str], bool] = os.path.isdir) -> str:
    """The cgroup v2 directory of a process (its /proc/PID/cgroup text) under the first of
    `mounts` where it exists."""
    path = next((line[3:] for line in proc_cgroup.splitlines() if line.startswith("0::")), "")
    if path.startswith("/") and "/../" not in f"{path}/":
        for mount in mounts:
            candidate = mount.rstrip("/") + (path if path != "/" else "")
            if isdir(candidate):
                return candidate
    raise MemoryLimitError("apply-cuda-memory-limits: the container is not in a mounted cgroup "
                           "v2 hierarchy (setting GPU memory limits needs cgroup v2)")


def apply(env: Sequence[object], pid: int, driver_root: str, uuids: Sequence[str],
          *, set_limits: Callable[..., None] | None = None) -> str:
    """Apply the environment's limits for `uuids` to the cgroup of host process `pid`; what
    was done ("" when the container asks for none)."""
    limits = limits_of(env)
    if limits is None or not uuids:
        return ""
    cgroup = cgroup_dir(_read(f"/proc/{pid}/cgroup"), cgroup2_mounts(_read("/proc/self/mountinfo")))
    (set_limits or set_in_child)(driver_root, tuple(uuids), cgroup, *limits)
    return (f"CUDA memory limits {limits[0] // MIB}/{limits[1] // MIB} MiB on {cgroup} for "
            f"{', '.join(uuids)}")


def _read(path: str) -> str:
    try:
        with open(path, "rb") as stream:
            return stream.read(1 << 20).decode("utf-8", "surrogateescape")
    except OSError as err:
        raise MemoryLimitError(f"apply-cuda-memory-limits: read {path}: {err.strerror}") from err


def set_in_child(driver_root: str, uuids: tuple[str, ...], cgroup: str, soft: int,
                 hard: int) -> None:
    """nvmlDeviceSetMemoryLimits_v1 for each GPU, in a forked child (NVML's threads stay out
    of the hook); the child's one-line error raised here."""
    from nvmount.api import nvml_path

    path = nvml_path(driver_root or "/")
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(rfd)
        os._exit(_child(path, uuids, cgroup, soft, hard, wfd))
    os.close(wfd)
    try:
        message = _collect(rfd, pid)
    finally:
        os.close(rfd)
    if message:
        raise MemoryLimitError(f"apply-cuda-memory-limits: {message}")


def _child(path: str, uuids: tuple[str, ...], cgroup: str, soft: int, hard: int,
           wfd: int) -> int:  # pragma: no cover - child process
    import signal

    signal.alarm(int(NVML_TIMEOUT))
    message = ""
    try:
        from nvmount.api import open_nvml

        with open_nvml(path) as nvml:
            for uuid in uuids:
                try:
                    nvml.set_memory_limits(uuid, cgroup, soft, hard)
                except Exception as err:  # one line for the parent, whatever failed
                    message = f"GPU {uuid}: {err}"
                    break
    except Exception as err:  # the child reports every failure as a line
        message = str(err)
    os.write(wfd, message.encode("utf-8", "replace")[:4096])
    return 1 if message else 0


def _collect(rfd: int, pid: int) -> str:
    chunks = []
    while True:
        data = os.read(rfd, 4096)
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", "replace").strip()
    if os.WIFSIGNALED(status):
        return text or f"NVML did not answer in {NVML_TIMEOUT:g} s (signal {os.WTERMSIG(status)})"
    return text if os.waitstatus_to_exitcode(status) else ""


def env_of(config: Any) -> list[object]:
    """process.env of a decoded config.json ([] when it has none)."""
    process = config.get("process") if isinstance(config, dict) else None
    env = process.get("env") if isinstance(process, dict) else None
    return env if isinstance(env, list) else []
