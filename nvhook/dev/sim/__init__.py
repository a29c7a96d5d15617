"""The simulated NVIDIA driver: a driver root that nvmount, NVIDIA's tools and pynvml accept.

`create_sim_root(path, SimSpec(gpus=8))` compiles (with the system gcc) a fake
libnvidia-ml.so.1 and libcuda.so.1 with the real ABIs, stub libraries with the real SONAMEs
for every capability, nvidia-smi and the other binaries, and writes firmware, an ld.so.cache
made by the system ldconfig, /dev nodes, a /proc/driver tree and (optionally) IPC sockets.
The fake libraries read their GPU inventory from the proc tree at init, so they work
unchanged inside a container that got the simulated driver mounted by nvhook.

Stage: tooling, off the hook's path (except `prestart`, a small hook step of its own).
"""

from __future__ import annotations

from nvhook.dev.sim.records import (
    SimDeviceNode,
    SimFile,
    SimGpu,
    SimMigDevice,
    SimRoot,
    SimSpec,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    import os

__all__ = [
    "SimDeviceNode",
    "SimFile",
    "SimGpu",
    "SimMigDevice",
    "SimRoot",
    "SimSpec",
    "create_sim_root",
]


def create_sim_root(path: str | os.PathLike[str], spec: SimSpec | None = None,
                    force: bool = False,
                    cache_dir: str | os.PathLike[str] | None = None) -> SimRoot:
    """Build a simulated driver root for `spec` (default: 8 A100s, no MIG) at `path`.

    `force` replaces an earlier simulated root at `path`; `cache_dir` keeps the compiled
    libraries and binaries so that later roots with the same versions skip gcc."""
    from nvhook.dev.sim.build import create_sim_root as _create

    return _create(path, spec if spec is not None else SimSpec(), force, cache_dir)
