"""The end-to-end benchmark's figures as markdown: one table (the clients of the run side by
side: docker, ctr, podman), the issue's goals as ratios of added times from the same run
(bench/engines.py), and the summary table docs/performance.md keeps ("Today's engines":
`summary`)."""

from __future__ import annotations

import statistics
from typing import Any

CLIENTS = (("docker", "docker run"), ("ctr", "ctr run"), ("cri", "CRI pod"),
           ("podman", "podman run"))


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


def _failed(s: dict[str, Any]) -> str:
    """What a cell says besides its figure: failed runs, a failed check (bench/engines.py)."""
    return (f" ({s['failures']} failed)" if s["failures"] else "") + \
        (" (check failed)" if s.get("check") else "")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def clients(results: dict[str, Any]) -> list[tuple[str, str]]:
    """The CLIENTS the run has series of (docker-B counts as docker), docker and ctr always."""
    have = {s["client"].removesuffix("-B") for s in results["series"]}
    return [c for c in CLIENTS if c[0] in have or c[0] in ("docker", "ctr")]


def table(results: dict[str, Any]) -> list[str]:
    idx = index(results)
    rows = list(dict.fromkeys(s["row"] for s in results["series"]))
    shown = clients(results)
    head = ["| scenario | containers | stack"]
    for _, label in shown:
        head.append(f" {label} (ms) | added | added CPU")
    out = ["|".join(head) + " |", "|---" * (3 + 3 * len(shown)) + "|"]
    for row in rows:
        cells = row.split(" | ")
        for client, _ in shown:
            key = (row, client) if (row, client) in idx else (row, client + "-B")
            s = idx.get(key)
            if s is None:
                cells += ["-", "-", "-"]
                continue
            fail = _failed(s)
            cells += [_fmt(_median(s["wall_ms"])) + fail, _fmt(added(idx, row, key[1])),
                      _fmt(added(idx, row, key[1], "cpu_ms"))]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b <= 0 else f"{a / b:.2f}"


def goals(results: dict[str, Any]) -> list[str]:
    idx = index(results)
    modes = results["setup"]["modes"]
    paths = [c for c in clients(results) if c[0] != "podman"]
    out = ["Ratios of added wall time (nvhook / NVIDIA) from this run, "
           + " | ".join(c for c, _ in paths) + ":", ""]
    cdi = [f"- podman `--device` (CDI), {kind}, nvhook's spec / NVIDIA 1.20.0's: " + _ratio(
        added(idx, f"main | {kind} | CDI, nvhook spec", "podman"),
        added(idx, f"main | {kind} | CDI, NVIDIA 1.20.0 spec", "podman"))
        for kind in ("GPU 0", "all 8 GPUs") if (f"main | {kind} | CDI, nvhook spec", "podman")
        in idx]
    checks = [("main", "GPU 0"), ("main", "all 8 GPUs"), ("main", "no GPU"),
              ("slow-nvml", "GPU 0"), ("persist-nvml", "GPU 0"), ("persist-nvml", "all 8 GPUs"),
              ("large-image", "GPU 0")]
    for scenario, kind in checks:
        for mode in modes:
            ours = f"{scenario} | {kind} | nvhook {mode}"
            parts = []
            for peer in ("NVIDIA 1.17.8 legacy", "NVIDIA 1.20.0 jit-cdi"):
                theirs = f"{scenario} | {kind} | {peer}"
                r = [_ratio(added(idx, ours, c), added(idx, theirs, c)) for c, _ in paths]
                parts.append(f"vs {peer.split(' ')[1]} " + " | ".join(r))
            out.append(f"- {scenario}, {kind}, nvhook {mode}: " + "; ".join(parts))
    for kind in ("GPU 0", "all 8 GPUs"):
        ours = added(idx, f"main | {kind} | --gpus, nvhook hook", "docker")
        theirs = added(idx, f"main | {kind} | --gpus, NVIDIA 1.17.8 hook", "docker-B")
        out.append(f"- `docker run --gpus`, {kind} (hook only): {_ratio(ours, theirs)} "
                   "(goal <= 1.2)")
    out += cdi
    totals = results.get("hook_total_ms") or {}
    if totals:
        out += ["", "nvhook's own hook time (median `total_ms` of its timing records): "
                + ", ".join(f"{k} {v:.1f} ms" for k, v in totals.items())]
    return out


# the summary's stack columns; a row maps each to the (series row, client) it shows
COLUMNS = ("nvhook auto", "nvhook legacy", "NVIDIA 1.17.8 legacy", "NVIDIA 1.20.0 jit-cdi")
KINDS = ("no GPU", "GPU 0", "all 8 GPUs")
RUNTIME_PATHS = (("docker", "`docker run --runtime`"), ("ctr", "`ctr run --runc-binary`"),
                 ("cri", "CRI pod (handler)"))
SummaryRow = tuple[str, str, dict[str, tuple[str, str]]]


def summary_rows(results: dict[str, Any]) -> list[SummaryRow]:
    """(engine path, containers, {column: (series row, client)}) of the rows the run has: each
    stack through the runtime per client and scenario, then `--gpus` (nvhook's hook in the
    auto column, NVIDIA 1.17.8's in its own) and Podman's CDI (nvhook's spec in the auto
    column, NVIDIA 1.20.0's in the jit-cdi one)."""
    rows: list[SummaryRow] = []
    for client, path in RUNTIME_PATHS:
        for scenario in results["setup"]["scenarios"]:
            for kind in KINDS:
                label = kind if scenario == "main" else f"{scenario}, {kind}"
                rows.append((path, label, {c: (f"{scenario} | {kind} | {c}", client)
                                           for c in COLUMNS}))
    for kind in KINDS[1:]:
        rows.append(("`docker run --gpus` (hook only)", kind, {
            "nvhook auto": (f"main | {kind} | --gpus, nvhook hook", "docker"),
            "NVIDIA 1.17.8 legacy": (f"main | {kind} | --gpus, NVIDIA 1.17.8 hook", "docker-B")}))
        rows.append(("`podman run --device` (CDI)", kind, {
            "nvhook auto": (f"main | {kind} | CDI, nvhook spec", "podman"),
            "NVIDIA 1.20.0 jit-cdi": (f"main | {kind} | CDI, NVIDIA 1.20.0 spec", "podman")}))
    idx = index(results)
    return sorted((r for r in rows if any(key in idx for key in r[2].values())),
                  key=lambda r: r[0].startswith("`podman"))


def _cell(idx: dict[tuple[str, str], dict[str, Any]], key: tuple[str, str] | None) -> str:
    """"+wall / CPU" added ms of one series ("-" when the run has none)."""
    if key is None or key not in idx:
        return "-"
    wall, cpu = added(idx, *key), added(idx, *key, "cpu_ms")
    fail = _failed(idx[key])
    if wall is None:
        return "-" + fail
    return f"{wall:+.0f} / " + ("-" if cpu is None else f"{cpu:.0f}") + fail


def summary(results: dict[str, Any]) -> list[str]:
    """The "Today's engines" table: per row the added wall / CPU medians (ms) of each stack
    and nvhook auto's ratios to NVIDIA's (wall, CPU in brackets)."""
    idx = index(results)
    out = ["| engine | containers | " + " | ".join(COLUMNS)
           + " | auto / 1.17.8 | auto / 1.20.0 |", "|---" * (4 + len(COLUMNS)) + "|"]
    for path, label, keys in summary_rows(results):
        ours = keys.get("nvhook auto")
        ratios = []
        for peer in COLUMNS[2:]:
            theirs = keys.get(peer)
            if ours is None or theirs is None:
                ratios.append("-")
                continue
            wall = _ratio(added(idx, *ours), added(idx, *theirs))
            cpu = _ratio(added(idx, *ours, "cpu_ms"), added(idx, *theirs, "cpu_ms"))
            ratios.append(wall if wall == "-" else f"{wall} ({cpu})")
        cells = [path, label, *(_cell(idx, keys.get(c)) for c in COLUMNS), *ratios]
        out.append("| " + " | ".join(cells) + " |")
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
             *table(results), "", *goals(results), "",
             "Summary (docs/performance.md; added wall / added CPU, ms; ratios: wall (CPU)):",
             "", *summary(results)]
    checks = [s for s in results["series"] if s.get("check")]
    if checks:
        lines += ["", "Failed checks (the container did not get what its row says):"] + [
            f"- {s['row']} ({s['client']}): {s['check']}" for s in checks]
    failed = [s for s in results["series"] if s["failures"]]
    if failed:
        lines += ["", "Failures:"] + [f"- {s['row']} ({s['client']}): {s['failures']}x: "
                                       f"{s['error'][-300:]}" for s in failed]
    return "\n".join(lines) + "\n"
