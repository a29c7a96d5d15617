"""Container start-time benchmark: runc with and without the nvhook prestart hook.

    sudo .venv/bin/python bench/run.py [-n 20] [--gpus 1,8,64] [--rss-runs 5] [--out bench/results]

Series (each: one warm-up, then N `runc run` of /bin/true, a fresh rootfs copy per run, untimed):
  - runc alone (no hook),
  - runc + the simulated driver's prestart step alone (it provides /proc/driver; the sim's cost),
  - runc + sim step + nvhook (NVIDIA_VISIBLE_DEVICES=all) for each simulated GPU count.
For the nvhook series the hook writes one timing record per container to the config's
`[nvhook] timing-log`; the per-phase medians come from there. A separate pass runs the hook
under a fork/wait4 wrapper to get its process wall time and peak RSS. The hook is the launcher
that `nvhook install` writes (/usr/bin/python3 -I -S). Not a test: figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from nvhook.demo.bundle import (
    HookEntry,
    Runc,
    container_spec,
    new_container_id,
    runc_run,
    write_bundle,
)
from nvhook.demo.driver import DriverSetup, create_sim_driver, install_hook, nvhook_hook_entry
from nvhook.demo.rootfs import build_rootfs

PHASES = ("config", "spec", "inventory", "plan", "mounts", "ldcache", "cgroup")
RSS_WRAPPER = """\
import json, os, sys, time
out, argv = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execv(argv[0], [os.path.basename(argv[0]), *argv[1:]])
_, status, ru = os.wait4(pid, 0)
with open(out, "a") as f:
    f.write(json.dumps({"maxrss_kib": ru.ru_maxrss, "wall_s": time.monotonic() - t0}) + "\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"median": statistics.median(ms), "p90": percentile(ms, 0.9),
            "min": min(ms), "max": max(ms)}


class Bench:
    def __init__(self, work: Path, runs: int) -> None:
        self.work = work
        self.runs = runs
        self.runc = Runc()
        self.rootfs = build_rootfs(work / "rootfs")
        self.launcher = install_hook(work / "prefix")

    def time_series(self, name: str, hooks: Sequence[HookEntry], env: Sequence[str]) -> list[float]:
        """Warm-up + N timed `runc run` of /bin/true; each run gets a fresh bundle."""
        spec = container_spec(["/bin/true"], env, prestart=hooks)
        times = []
        for i in range(self.runs + 1):
            bundle = self.work / f"b-{name}-{i}"
            write_bundle(bundle, self.rootfs, spec)
            start = time.monotonic()
            res = runc_run(bundle, new_container_id("bench"), runc=self.runc)
            elapsed = time.monotonic() - start
            if res.returncode != 0:
                raise SystemExit(f"bench: {name}: container failed\n{res.describe()}")
            shutil.rmtree(bundle)
            if i:  # run 0 is the warm-up
                times.append(elapsed)
        return times

    def sim(self, gpus: int) -> tuple[DriverSetup, Path]:
        """A simulated driver with `gpus` GPUs and a config copy that asks for timing records."""
        sim = create_sim_driver(self.work / f"sim-{gpus}", gpus, self.launcher)
        log = self.work / f"timing-{gpus}.jsonl"
        config = self.work / f"config-{gpus}.toml"
        if sim.config is None:
            raise SystemExit(f"bench: nvhook sim create {sim.root} wrote no config.toml")
        config.write_text(with_timing_log(sim.config.read_text(), log))
        return sim, config

    def rss_pass(self, sim: DriverSetup, config: Path, runs: int) -> list[dict[str, float]]:
        wrapper = self.work / "rsswrap.py"
        wrapper.write_text(RSS_WRAPPER)
        out = self.work / f"rss-{config.stem}.jsonl"
        hook = nvhook_hook_entry(self.launcher, config)
        wrapped = HookEntry("/usr/bin/python3",
                            ("python3", "-I", "-S", str(wrapper), str(out), hook.path,
                             *hook.args[1:]))
        spec = container_spec(["/bin/true"], ["NVIDIA_VISIBLE_DEVICES=all"],
                              prestart=[*sim.prestart, wrapped])
        for i in range(runs):
            bundle = self.work / f"rss-{config.stem}-{i}"
            write_bundle(bundle, self.rootfs, spec)
            res = runc_run(bundle, new_container_id("bench"), runc=self.runc)
            if res.returncode != 0:
                raise SystemExit(f"bench: rss pass failed\n{res.describe()}")
            shutil.rmtree(bundle)
        return [json.loads(line) for line in out.read_text().splitlines()]


def with_timing_log(config_text: str, log: Path) -> str:
    """The config text with `[nvhook] timing-log` set to `log` (other keys kept)."""
    line = f'timing-log = "{log}"'
    out, in_table, done = [], False, False
    for raw in config_text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("["):
            in_table = stripped == "[nvhook]"
            if in_table:
                out.append(raw)
                out.append(line)
                done = True
                continue
        if in_table and stripped.startswith("timing-log"):
            continue
        out.append(raw)
    if not done:
        out += ["", "[nvhook]", line]
    return "\n".join(out) + "\n"


def phase_medians(log: Path) -> dict[str, float]:
    """Median milliseconds per phase (+ total) over the timing records in `log`."""
    per: dict[str, list[float]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        rec = json.loads(line)
        phases = rec.get("phases_ms", rec.get("phases", {}))
        for key, value in phases.items():
            per.setdefault(key, []).append(float(value))
        if "total_ms" in rec:
            per.setdefault("total", []).append(float(rec["total_ms"]))
    return {k: statistics.median(v) for k, v in per.items()}


def run_bench(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="nvhook-bench-"))
    try:
        bench = Bench(work, args.runs)
        results: dict[str, object] = {"runs": args.runs, "host": host_info(), "series": {}}
        series: dict[str, object] = results["series"]  # type: ignore[assignment]
        series["runc, no hook"] = {"start_ms": summary_ms(bench.time_series("base", (), ()))}
        sims = {n: bench.sim(n) for n in args.gpus}
        first_sim = sims[args.gpus[0]][0]
        series["runc + sim step"] = {"start_ms": summary_ms(
            bench.time_series("sim", first_sim.prestart, ()))}
        for n, (sim, config) in sims.items():
            hooks = (*sim.prestart, nvhook_hook_entry(bench.launcher, config))
            times = bench.time_series(f"hook{n}", hooks, ["NVIDIA_VISIBLE_DEVICES=all"])
            rss = bench.rss_pass(sim, config, args.rss_runs)
            series[f"runc + sim step + nvhook, {n} GPU"] = {
                "gpus": n,
                "start_ms": summary_ms(times),
                "phases_ms": phase_medians(Path(str(config).replace("config-", "timing-"))
                                           .with_suffix(".jsonl")),
                "hook_process_ms": summary_ms([r["wall_s"] for r in rss]),
                "hook_peak_rss_mib": max(r["maxrss_kib"] for r in rss) / 1024,
            }
        return results
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def host_info() -> dict[str, object]:
    runc_version = subprocess.run([str(Runc().binary), "--version"], capture_output=True,
                                  text=True, check=False).stdout.splitlines()[:1]
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "python": subprocess.run(["/usr/bin/python3", "--version"], capture_output=True,
                                     text=True, check=False).stdout.strip(),
            "runc": runc_version[0] if runc_version else "?",
            "load": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def markdown(results: dict[str, object]) -> str:
    series: dict[str, dict[str, object]] = results["series"]  # type: ignore[assignment]
    host: dict[str, object] = results["host"]  # type: ignore[assignment]
    sim_step = series.get("runc + sim step", {}).get("start_ms")
    sim_median = sim_step["median"] if isinstance(sim_step, dict) else None
    out = [f"{results['runs']} timed `runc run` of /bin/true per series (after 1 warm-up); "
           f"{host['date']}, kernel {host['kernel']}, {host['cpus']} CPUs, {host['python']}, "
           f"{host['runc']}, load average {host['load']:.1f}", "",
           "| series | start median (ms) | start p90 (ms) | added by nvhook (ms) "
           "| hook process median (ms) | hook peak RSS (MiB) |", "|---|---|---|---|---|---|"]
    for name, s in series.items():
        st: dict[str, float] = s["start_ms"]  # type: ignore[assignment]
        hp: dict[str, float] | None = s.get("hook_process_ms")  # type: ignore[assignment]
        rss = s.get("hook_peak_rss_mib")
        added = (f"{st['median'] - sim_median:.1f}" if hp and sim_median is not None else "-")
        hp_text = f"{hp['median']:.1f}" if hp else "-"
        rss_text = f"{rss:.1f}" if isinstance(rss, float) else "-"
        out.append(f"| {name} | {st['median']:.1f} | {st['p90']:.1f} | {added} | {hp_text} "
                   f"| {rss_text} |")
    out += _phase_table(series)
    return "\n".join(out) + "\n"


def _phase_table(series: dict[str, dict[str, object]]) -> list[str]:
    phased = [s for s in series.values() if s.get("phases_ms")]
    if not phased:
        return []
    seen = {k for s in phased for k in s["phases_ms"]}  # type: ignore[attr-defined]
    keys = [p for p in PHASES if p in seen] + sorted(seen - {*PHASES, "total"})
    keys += ["total"] if "total" in seen else []
    out = ["", "Hook phases, median ms over the same runs (the hook's timing-log records; "
           "total = from the hook's first line to its record):", "",
           "| GPUs | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for s in phased:
        ph: dict[str, float] = s["phases_ms"]  # type: ignore[assignment]
        out.append(f"| {s['gpus']} | " + " | ".join(
            f"{ph[k]:.1f}" if k in ph else "-" for k in keys) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="timed runs per series")
    parser.add_argument("--gpus", default="1,8,64", help="simulated GPU counts (comma list)")
    parser.add_argument("--rss-runs", type=int, default=5, help="runs of the RSS/wall pass")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--wrapper", action="store_true",
                        help="the runtime wrapper's series instead (bench/wrapper.py)")
    args = parser.parse_args(argv)
    if args.wrapper:
        from wrapper import main as wrapper_main  # bench/wrapper.py, next to this file

        return wrapper_main(["--runs", str(args.runs), "--out", args.out])
    args.gpus = [int(x) for x in args.gpus.split(",") if x]
    if os.geteuid() != 0:
        raise SystemExit("bench: must run as root (sudo .venv/bin/python bench/run.py)")
    results = run_bench(args)
    table = markdown(results)
    sys.stdout.write(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = out / time.strftime("bench-%Y%m%d-%H%M%S.json")
    name.write_text(json.dumps(results, indent=2) + "\n")
    sys.stdout.write(f"\nresults: {name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
