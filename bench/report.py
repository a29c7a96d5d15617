"""The benchmark's results as markdown: the series table, the goals as ratios, the phases."""

from __future__ import annotations

import statistics
from typing import Any

GPU_BASE = "sim step"
NONE_BASE = "runc, no hook"


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _added(series: dict[str, Any], name: str, what: str = "wall_ms") -> float | None:
    base = GPU_BASE if "GPU" in name and "no GPU" not in name else NONE_BASE
    if name in (GPU_BASE, NONE_BASE) or name not in series:
        return None
    return _median(series[name][what]) - _median(series[base][what])


def markdown(results: dict[str, Any]) -> str:
    host, series = results["host"], results["series"]
    out = [f"{results['runs']} rounds (round-robin, after 1 warm-up round); {host['date']}, "
           f"kernel {host['kernel']}, {host['cpus']} CPUs, Python {host['python']}, "
           f"{host['runc']}, load average {host['load']:.1f} at the start; NVIDIA's stack: "
           f"{host['nvidia']}", "",
           "| series | wall median (ms) | wall p90 (ms) | CPU median (ms) | added wall (ms) "
           "| added CPU (ms) |", "|---|---|---|---|---|---|"]
    for name, s in series.items():
        wall = sorted(s["wall_ms"])
        p90 = wall[int(0.9 * (len(wall) - 1))] if wall else float("nan")
        aw, ac = _added(series, name), _added(series, name, "cpu_ms")
        out.append(f"| {name} | {_median(s['wall_ms']):.1f} | {p90:.1f} | "
                   f"{_median(s['cpu_ms']):.1f} | {'-' if aw is None else f'{aw:.1f}'} | "
                   f"{'-' if ac is None else f'{ac:.1f}'} |")
    out += ["", *_goals(results), *_phases(results)]
    return "\n".join(out) + "\n"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:.2f}"


def _goals(results: dict[str, Any]) -> list[str]:
    s = results["series"]
    a = {k: (_added(s, k), _added(s, k, "cpu_ms")) for k in s}
    rows = ["Goals (issue 9), from this run:", ""]
    nv = a.get("sim step + NVIDIA, 8 GPU")
    ours = a.get("sim step + nvhook, 8 GPU")
    if nv and ours:
        rows.append(f"- 8 GPUs, nvhook / NVIDIA added: wall {_ratio(ours[0], nv[0])}, "
                    f"CPU {_ratio(ours[1], nv[1])} (goal <= 0.5)")
    floor, none = a.get("Python floor (reads stdin)"), a.get("nvhook, no GPU wanted")
    if floor and none and floor[0] is not None and none[0] is not None:
        rows.append(f"- no GPU wanted: nvhook adds {none[0]:.1f} ms wall, the floor "
                    f"{floor[0]:.1f} ms: {none[0] - floor[0]:+.1f} ms (goal <= +3 ms); CPU "
                    f"{none[1] - floor[1]:+.1f} ms")
    one, many = a.get("sim step + nvhook, 1 GPU"), a.get("sim step + nvhook, 64 GPU")
    if one and many:
        rows.append(f"- 64 GPUs / 1 GPU added: wall {_ratio(many[0], one[0])}, CPU "
                    f"{_ratio(many[1], one[1])} (goal <= 1.2)")
    rows += _load_goals(results)
    return [*rows, ""]


def _load_goals(results: dict[str, Any]) -> list[str]:
    rows = []
    single = _median(results["series"].get("sim step + nvhook, 8 GPU", {}).get("cpu_ms", []))
    for count, c in results.get("concurrent_8gpu", {}).items():
        rows.append(f"- {count} simultaneous 8-GPU starts: {c['failures']} failures, CPU per "
                    f"start {c['cpu_per_start_ms']:.1f} ms = {c['cpu_per_start_ms'] / single:.2f}"
                    f" x a single start (goal <= 1.2), median wall {c['median_wall_ms']:.0f} ms")
    mounts = results.get("with_1000_host_mounts")
    if mounts:
        added = _median(mounts["8 GPU"]["wall_ms"]) - _median(mounts["sim step"]["wall_ms"])
        before = _added(results["series"], "sim step + nvhook, 8 GPU") or 0.0
        rows.append(f"- 1000 extra host mounts: nvhook (8 GPUs) adds {added:.1f} ms instead of "
                    f"{before:.1f} ms: {added - before:+.1f} ms (goal <= +2 ms)")
        phases = results.get("phases_ms", {})
        hook, usual = mounts.get("hook_total_ms"), phases.get(8) or phases.get("8") or {}
        if hook is not None and usual.get("total") is not None:
            rows.append(f"  (the hook's own timing records: {hook:.1f} ms instead of "
                        f"{usual['total']:.1f} ms: {hook - usual['total']:+.1f} ms)")
    rss = results.get("rss_8gpu")
    if rss:
        rows.append(f"- hook process (8 GPUs): peak RSS {rss['peak_rss_mib']:.1f} MiB (goal <= "
                    f"20 MB), wall {rss['hook_wall_ms']:.1f} ms, CPU {rss['hook_cpu_ms']:.1f} ms")
    return rows


def _phases(results: dict[str, Any]) -> list[str]:
    phases = {n: p for n, p in results.get("phases_ms", {}).items() if p}
    if not phases:
        return []
    keys = [*sorted({k for p in phases.values() for k in p} - {"total"}), "total"]
    out = ["Hook phases, median ms (its timing-log records; total = from its first line to "
           "the record):", "", "| GPUs | " + " | ".join(keys) + " |",
           "|---" * (len(keys) + 1) + "|"]
    for n, p in phases.items():
        out.append(f"| {n} | " + " | ".join(f"{p[k]:.1f}" if k in p else "-" for k in keys)
                   + " |")
    return out
