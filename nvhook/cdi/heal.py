"""Specs that heal (issue 31): a CDI spec is written, and kept, only when it is whole for this
host. Effects: reads procfs and stats the paths a spec names; `prepare_host` creates nodes
and loads modules; `locked` takes a lock on the spec's directory.

| check                | what it looks at                                                   |
|----------------------|--------------------------------------------------------------------|
| `missing_gpus`       | a GPU the driver lists (/proc/driver/nvidia/gpus/*/information,     |
|                      | `Device Minor`) that no device of an nvidia.com/gpu spec names      |
| `check.vanished`     | a node the spec names that is gone or renumbered, a mounted file    |
|                      | that is gone                                                        |
| `only_all`           | a `*/gpu` spec offering `all` alone: the device plugin's per-UUID   |
|                      | requests (nvidia.com/gpu=GPU-...) would not resolve                 |

`prepare_host` is what NVIDIA's refresh service does first (toolkit #1979): on the real host
the modules are loaded (`nvmount.apply.host_nodes.load_modules`), then the missing control
nodes and the listed GPUs' nodes are created, by the driver's params (`ModifyDeviceFiles: 0`
creates nothing). A refresh generates after it, and writes only a spec `incomplete` finds
nothing wrong with; otherwise it waits, then refuses and keeps the spec it had.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager

from nvhook.errors import CdiError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

MAX_GPUS = 256
_GPU_NODE = re.compile(r"^/dev/nvidia(\d{1,3})$")


def driver_gpus(proc_root: str) -> dict[int, str]:
    """{minor: bus id} of the GPUs the driver lists in procfs (no NVML)."""
    top = os.path.join(proc_root, "driver/nvidia/gpus")
    try:
        names = sorted(os.listdir(top))[:MAX_GPUS]
    except OSError:
        return {}
    found: dict[int, str] = {}
    for bus in names:
        minor = _device_minor(os.path.join(top, bus, "information"))
        if minor is not None:
            found.setdefault(minor, bus)
    return found


def _device_minor(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(fd, 1 << 14).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Device Minor" and value.strip().isdigit() and len(value) < 8:
            return int(value.strip())
    return None


def spec_gpu_minors(spec: dict[str, Any]) -> set[int]:
    """The /dev/nvidia<N> nodes the spec's devices name (container paths)."""
    found = set()
    for device in spec["devices"]:
        for node in device["containerEdits"].get("deviceNodes") or ():
            match = _GPU_NODE.match(str(node.get("path", "")))
            if match:
                found.add(int(match.group(1)))
    return found


def is_gpu_kind(spec: dict[str, Any]) -> bool:
    """A spec of whole GPUs (`nvidia.com/gpu`, `management.nvidia.com/gpu` ...), not DRA's
    claim specs (`k8s.gpu.nvidia.com/claim`)."""
    return str(spec.get("kind", "")).endswith("/gpu")


def missing_gpus(spec: dict[str, Any], proc_root: str) -> list[str]:
    """The driver's GPUs a GPU spec lacks, one phrase each."""
    if not is_gpu_kind(spec) or only_all(spec):
        return []
    named = spec_gpu_minors(spec)
    return [f"GPU {bus} (/dev/nvidia{minor}) is not in it" for minor, bus in
            sorted(driver_gpus(proc_root).items()) if minor not in named]


def only_all(spec: dict[str, Any]) -> bool:
    return is_gpu_kind(spec) and [str(d["name"]) for d in spec["devices"]] == ["all"]


def incomplete(spec: dict[str, Any], proc_root: str) -> list[str]:
    """What makes `spec` not whole for this host (empty: nothing)."""
    from nvhook.cdi.check import vanished

    return missing_gpus(spec, proc_root) + vanished(spec)


def only_all_note(spec: dict[str, Any]) -> str:
    return (f"offers only {spec['kind']}=all: a request for one GPU (the device plugin's "
            f"{spec['kind']}=GPU-<uuid>) does not resolve")


def prepare_host(root: str, proc_root: str, *, modules: bool = True) -> list[str]:
    """Load the modules (real host only; with `modules`) and create the missing control and
    GPU nodes; the nodes created."""
    from nvmount.api import host_nodes

    if modules:
        host_nodes.load_modules(root, proc_root)
    made = host_nodes.ensure_nodes(root, proc_root)
    return made + host_nodes.ensure_gpu_nodes(root, proc_root, sorted(driver_gpus(proc_root)))


def checked(spec: dict[str, Any], proc_root: str, output: str) -> dict[str, Any]:
    """`spec`, when it is whole; else a CdiError naming what is missing (the refresh retries
    it while it waits for the driver, then keeps the spec it had)."""
    problems = incomplete(spec, proc_root)
    if problems:
        more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
        raise CdiError(f"{output}: not written: the spec would be incomplete: "
                       f"{'; '.join(problems[:2])}{more}; the spec there is kept (create the "
                       "missing nodes: nvidia-ctk system create-device-nodes --control-devices, "
                       "nvidia-modprobe -c MINOR)")
    return spec


@contextmanager
def locked(output: str) -> Iterator[None]:
    """An exclusive flock on the spec's directory while a refresh reads, generates and
    renames (two refreshes at once: one after the other, one whole spec)."""
    import fcntl

    directory = os.path.dirname(os.path.abspath(output))
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise CdiError(f"cdi refresh: lock {directory}: {err.strerror} (the spec's directory "
                       "must be a directory root can write)") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
