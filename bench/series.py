"""Measurement core of the benchmark: series of `runc run` starts, wall and CPU time.

A `Series` is a container spec (env, prestart hooks); `Rig.measure` runs every series once per
round, round-robin, so that load drifting on a shared machine hits each series alike; round 0
is a warm-up. Wall time is measured around the `runc run` process, CPU time is its rusage from
wait4 (user + system of runc, runc init, the hooks and everything they reaped). Each run gets
a fresh bundle (made outside the timed window).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nvhook.dev.demo.bundle import HookEntry, Runc, container_spec, new_container_id, write_bundle


@dataclass
class Series:
    name: str
    hooks: tuple[HookEntry, ...] = ()
    env: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()  # () = container_spec's default (unprivileged)
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    failures: int = 0

    def median(self, what: str = "wall") -> float:
        values = self.wall_ms if what == "wall" else self.cpu_ms
        return statistics.median(values) if values else float("nan")

    def p90(self) -> float:
        ordered = sorted(self.wall_ms)
        return ordered[int(0.9 * (len(ordered) - 1))] if ordered else float("nan")


@dataclass
class Outcome:
    ok: bool
    wall_ms: float
    cpu_ms: float
    detail: str = ""


class Rig:
    """Bundles on a rootfs, `runc run` of /bin/true, timed."""

    def __init__(self, work: Path, rootfs: Path) -> None:
        self.work = work
        self.rootfs = rootfs
        self.runc = Runc()
        self.count = 0

    def bundle(self, series: Series) -> tuple[Path, str]:
        self.count += 1
        bundle = self.work / f"b{self.count}"
        extra = {"capabilities": series.capabilities} if series.capabilities else {}
        spec = container_spec(["/bin/true"], list(series.env), prestart=series.hooks, **extra)
        write_bundle(bundle, self.rootfs, spec)
        return bundle, new_container_id("bench")

    def start(self, bundle: Path, cid: str) -> subprocess.Popen[bytes]:
        argv = [str(self.runc.binary), "--root", str(self.work / "state"), "run", "--bundle",
                str(bundle), cid]
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)

    def finish(self, proc: subprocess.Popen[bytes], started: float, bundle: Path) -> Outcome:
        _, status, usage = os.wait4(proc.pid, 0)
        wall = (time.monotonic() - started) * 1000
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(bundle, ignore_errors=True)
        cpu = (usage.ru_utime + usage.ru_stime) * 1000
        return Outcome(proc.returncode == 0, wall, cpu, err.strip()[-400:])

    def run_once(self, series: Series) -> Outcome:
        bundle, cid = self.bundle(series)
        started = time.monotonic()
        return self.finish(self.start(bundle, cid), started, bundle)

    def measure(self, series: Sequence[Series], rounds: int) -> None:
        """One warm-up round, then `rounds` rounds of every series (round-robin)."""
        for r in range(rounds + 1):
            for s in series:
                out = self.run_once(s)
                if not out.ok:
                    raise SystemExit(f"bench: {s.name}: container failed: {out.detail}")
                if r:
                    s.wall_ms.append(out.wall_ms)
                    s.cpu_ms.append(out.cpu_ms)

    def concurrent(self, series: Series, count: int) -> tuple[int, float, float]:
        """`count` simultaneous starts: (failures, median wall ms, CPU ms per start)."""
        prepared = [self.bundle(series) for _ in range(count)]
        started = time.monotonic()
        procs = [(self.start(b, c), b) for b, c in prepared]
        outs = [self.finish(p, started, b) for p, b in procs]
        failures = sum(1 for o in outs if not o.ok)
        return (failures, statistics.median(o.wall_ms for o in outs),
                sum(o.cpu_ms for o in outs) / count)


def floor_hook(work: Path) -> HookEntry:
    """The bare Python floor: a hook that starts /usr/bin/python3 -IS and reads stdin."""
    path = work / "floor-hook"
    path.write_text("#!/usr/bin/python3 -IS\nimport sys\nsys.stdin.buffer.read()\n")
    path.chmod(0o755)
    return HookEntry(str(path), ("floor-hook",))
