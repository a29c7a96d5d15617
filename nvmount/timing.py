"""Per-phase wall time of one hook run, and the JSON record the benchmark reads.

Phases, in the order a prestart run goes through them: config, spec (the hook's side),
inventory, container (pidfd, namespaces, cgroup path, rootfs layout), plan, mounts, cgroup,
ldcache (the engine's). `PhaseTimer.phase(name)` adds the
time of a `with` block to that phase. With `[nvhook] timing-log = PATH`, the engine appends
one line per container to PATH:

    {"time": 1763731200.123, "container": "<id>", "pid": 4242, "dry_run": false,
     "mounts": 29, "binds": 28, "files": 3, "symlinks": 10, "device_rules": 4, "gpus": 1,
     "phases_ms": {"config": 3.6, "spec": 6.5, "inventory": 28.9, "container": 12.8,
                   "plan": 1.1, "mounts": 19.4, "cgroup": 0.1, "ldcache": 24.8},
     "total_ms": 127.5, "peak_rss_kb": 21244}

`total_ms` runs from the timer's creation (the hook creates it first thing) to the record.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

PHASES: tuple[str, ...] = (
    "config", "spec", "inventory", "container", "plan", "mounts", "cgroup", "ldcache")


class PhaseTimer:
    """Accumulates milliseconds per phase."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.started = clock()
        self.phases_ms: dict[str, float] = {}

    def phase(self, name: str) -> _Phase:
        """A context manager adding the time of its block to phase `name`."""
        return _Phase(self, name)

    def total_ms(self) -> float:
        return (self._clock() - self.started) * 1000.0

    def record(self, **fields: object) -> dict[str, object]:
        """The JSON-ready record: `fields`, the phases in PHASES order, total and peak RSS."""
        import resource

        ordered = {p: round(self.phases_ms[p], 3) for p in PHASES if p in self.phases_ms}
        ordered.update({p: round(v, 3) for p, v in self.phases_ms.items() if p not in ordered})
        return {
            "time": round(time.time(), 3),
            **fields,
            "phases_ms": ordered,
            "total_ms": round(self.total_ms(), 3),
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }


class _Phase:
    __slots__ = ("name", "start", "timer")

    def __init__(self, timer: PhaseTimer, name: str) -> None:
        self.timer, self.name, self.start = timer, name, 0.0

    def __enter__(self) -> None:
        self.start = self.timer._clock()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        elapsed = (self.timer._clock() - self.start) * 1000.0
        phases = self.timer.phases_ms
        phases[self.name] = phases.get(self.name, 0.0) + elapsed


def append_record(path: str, record: dict[str, object]) -> None:
    """Append `record` as one JSON line to `path`, a trusted log file (created 0644;
    `nvmount.fs.trusted.open_log`: no symlink, FIFO or hard link, no directory a user
    controls).

    One write(2) of the whole line on an O_APPEND fd, so concurrent hooks do not interleave.
    Raises OSError or TrustError; the caller decides whether that matters.
    """
    from nvmount.fs.trusted import open_log
    from nvmount.jsonio import encode

    line = (encode(record) + "\n").encode()
    fd = open_log(path, "timing log")
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
