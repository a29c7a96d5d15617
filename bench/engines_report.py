"""The end-to-end benchmark's figures as markdown: one table (docker and ctr side by side),
then the issue's goals as ratios of added times from the same run (bench/engines.py)."""

from __future__ import annotations

import statistics
from typing import Any

CLIENTS = (("docker", "docker run"), ("ctr", "ctr run"))


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _base_row(row: str) -> str:
    scenario = row.split(" | ")[0]
    return f"{'large-image' if scenario == 'large-image' else 'main'} | no GPU | runc (base)"


def index(results: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(row, client) -> series; docker-B (NVIDIA's --gpus daemon) rows keep their client."""
    return {(s["row"], s["client"]): s for s in results["series"]}


def added(idx: dict[tuple[str, str], dict[str, Any]], row: str, client: str,
          what: str = "wall_ms") -> float | None:
    s, base = idx.get((row, client)), idx.get((_base_row(row), client))
    if s is None or base is None or s is base:
        return None
    a, b = _median(s[what]), _median(base[what])
    return None if a is None or b is None else a - b


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(results: dict[str, Any]) -> list[str]:
    idx = index(results)
    rows = list(dict.fromkeys(s["row"] for s in results["series"]))
    head = ["| scenario | containers | stack"]
    for _, label in CLIENTS:
        head.append(f" {label} (ms) | added | added CPU")
    out = ["|".join(head) + " |", "|---" * 9 + "|"]
    for row in rows:
        cells = row.split(" | ")
        for client, _ in CLIENTS:
            key = (row, client) if (row, client) in idx else (row, client + "-B")
            s = idx.get(key)
            if s is None:
                cells += ["-", "-", "-"]
                continue
            fail = f" ({s['failures']} failed)" if s["failures"] else ""
            cells += [_fmt(_median(s["wall_ms"])) + fail, _fmt(added(idx, row, key[1])),
                      _fmt(added(idx, row, key[1], "cpu_ms"))]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b <= 0 else f"{a / b:.2f}"


def goals(results: dict[str, Any]) -> list[str]:
    idx = index(results)
    modes = results["setup"]["modes"]
    out = ["Ratios of added wall time (nvhook / NVIDIA) from this run, docker | ctr:", ""]
    checks = [("main", "GPU 0"), ("main", "all 8 GPUs"), ("main", "no GPU"),
              ("slow-nvml", "GPU 0"), ("persist-nvml", "GPU 0"), ("persist-nvml", "all 8 GPUs"),
              ("large-image", "GPU 0")]
    for scenario, kind in checks:
        for mode in modes:
            ours = f"{scenario} | {kind} | nvhook {mode}"
            parts = []
            for peer in ("NVIDIA 1.17.8 legacy", "NVIDIA 1.20.0 jit-cdi"):
                theirs = f"{scenario} | {kind} | {peer}"
                r = [_ratio(added(idx, ours, c), added(idx, theirs, c)) for c, _ in CLIENTS]
                parts.append(f"vs {peer.split(' ')[1]} {r[0]} | {r[1]}")
            out.append(f"- {scenario}, {kind}, nvhook {mode}: " + "; ".join(parts))
    for kind in ("GPU 0", "all 8 GPUs"):
        ours = added(idx, f"main | {kind} | --gpus, nvhook hook", "docker")
        theirs = added(idx, f"main | {kind} | --gpus, NVIDIA 1.17.8 hook", "docker-B")
        out.append(f"- `docker run --gpus`, {kind} (hook only): {_ratio(ours, theirs)} "
                   "(goal <= 1.2)")
    totals = results.get("hook_total_ms") or {}
    if totals:
        out += ["", "nvhook's own hook time (median `total_ms` of its timing records): "
                + ", ".join(f"{k} {v:.1f} ms" for k, v in totals.items())]
    return out


def engines(host: dict[str, Any]) -> str:
    """The engines the run used: the node's summary (bench/engines_node.py), or the versions
    of a result file written before `--node` existed."""
    return host.get("engines") or f"{host['docker']}, {host['containerd']}, {host['runc']}"


def markdown(results: dict[str, Any]) -> str:
    host = results["host"]
    lines = [f"{results['runs']} rounds, round-robin after a warm-up round; {host['date']}, "
             f"kernel {host['kernel']}, {host['cpus']} vCPUs, {engines(host)}; load average "
             f"{host['load_start']:.1f} at the start, {host.get('load_end', 0):.1f} at the end. "
             "Medians; added = minus the same client's plain runc; CPU = client + daemon side "
             "(cpuacct).", "",
             *table(results), "", *goals(results)]
    failed = [s for s in results["series"] if s["failures"]]
    if failed:
        lines += ["", "Failures:"] + [f"- {s['row']} ({s['client']}): {s['failures']}x: "
                                       f"{s['error'][-300:]}" for s in failed]
    return "\n".join(lines) + "\n"
