"""Benchmark series on the real-driver roots: Debian's NVIDIA 535 user space in the Debian, flat
and lib64 layouts (tests/fixtures/realdriver.py), nvhook beside NVIDIA's stack on the same root.

    sudo .venv/bin/python bench/run.py --real-driver [-n 20]
    sudo .venv/bin/python bench/realdriver.py [-n 20] [--roots debian,flat,lib64]

Per root, measured round-robin in one run (wall time around the process, CPU time from its
rusage, children included):
  - `info`: nvhook's launcher `--config <root>/config.toml info` against
    `nvidia-container-cli --root <root> info` (both query NVML: the simulator's fake one);
  - a GPU start: `runc run` of /bin/true with the simulator's /proc/driver step + nvhook, and
    with the same step + NVIDIA's hook and CLI (8 simulated GPUs are 2 here; all of them,
    utility+compute), beside the step alone (the baseline both add to).
NVIDIA's side needs /opt/peer (../shared/tools/peer/build.sh); without it only nvhook's
figures are printed. Figures, not assertions: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from peer import find_peer, peer_config, peer_hook_entry
from series import Rig, Series

from nvhook.dev.demo.driver import install_hook, nvhook_hook_entry
from nvhook.dev.demo.rootfs import build_rootfs

GPU_ENV = ("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility")


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall ms, CPU ms of the process and its children) of one run; it must succeed."""
    t0 = time.monotonic()
    pid = os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0)])
    _, status, ru = os.wait4(pid, 0)
    wall = (time.monotonic() - t0) * 1000
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench: {' '.join(argv)} failed")
    return wall, (ru.ru_utime + ru.ru_stime) * 1000


def info_series(roots: dict[str, object], launcher: Path, cli: Path | None,
                runs: int) -> dict[str, dict[str, list[float]]]:
    cmds: dict[str, list[str]] = {}
    for name, root in roots.items():
        cmds[f"{name}: nvhook info"] = [str(launcher), "--config", str(root.config), "info"]  # type: ignore[attr-defined]
        if cli is not None:
            cmds[f"{name}: NVIDIA info"] = [str(cli), "--root", str(root.path), "info"]  # type: ignore[attr-defined]
    out: dict[str, dict[str, list[float]]] = {k: {"wall_ms": [], "cpu_ms": []} for k in cmds}
    for rnd in range(runs + 1):  # round 0 warms caches up
        for key, argv in cmds.items():
            wall, cpu = timed(argv)
            if rnd:
                out[key]["wall_ms"].append(wall)
                out[key]["cpu_ms"].append(cpu)
    return out


def start_series(work: Path, roots: dict[str, object], launcher: Path,
                 peer: tuple[Path, Path] | None, runs: int) -> dict[str, dict[str, object]]:
    from tests.fixtures.realdriver_observe import sim_step

    rig = Rig(work, build_rootfs(work / "rootfs"))
    series: dict[str, Series] = {}
    for name, root in roots.items():
        step = sim_step(root, launcher)  # type: ignore[arg-type]
        series[f"{name}: sim step"] = Series(f"{name}-sim", (step,))
        series[f"{name}: sim step + nvhook"] = Series(
            f"{name}-nvhook", (step, nvhook_hook_entry(launcher, root.config)), GPU_ENV)  # type: ignore[attr-defined]
        if peer is not None:
            config = peer_config(work / name, root.path, peer[1], 2)  # type: ignore[attr-defined]
            series[f"{name}: sim step + NVIDIA"] = Series(
                f"{name}-nv", (step, peer_hook_entry(peer[0], config)), GPU_ENV)
    rig.measure(list(series.values()), runs)
    return {k: {"wall_ms": s.wall_ms, "cpu_ms": s.cpu_ms, "failures": s.failures}
            for k, s in series.items()}


def run(runs: int, names: tuple[str, ...]) -> dict[str, object]:
    from tests.fixtures.realdriver import build_real_roots

    work = Path(tempfile.mkdtemp(prefix="nvhook-bench-real-"))
    roots = build_real_roots(work / "roots", names)
    for name, root in roots.items():
        (work / name).mkdir()
        cache = work / f"cache-{name}"  # its own inventory cache: other runs cannot evict it
        cache.mkdir(mode=0o700)
        root.config.write_text(root.config.read_text().replace(
            "[nvhook]\n", f'[nvhook]\ncache-dir = "{cache}"\n'))
    launcher = install_hook(work / "prefix")
    peer = find_peer()
    results: dict[str, object] = {
        "runs": runs, "load": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "info": info_series(roots, launcher, peer[1] if peer else None, runs),
        "start": start_series(work, roots, launcher, peer, runs)}
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return results


def report(results: dict[str, object]) -> str:
    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    lines = [f"real-driver series, {results['runs']} rounds, load {results['load']:.2f}, "
             f"{results['date']}", "", "| series | wall ms (median) | CPU ms (median) |",
             "|---|---|---|"]
    for group in ("info", "start"):
        for key, fig in results[group].items():  # type: ignore[attr-defined]
            lines.append(f"| {key} | {med(fig['wall_ms']):.1f} | {med(fig['cpu_ms']):.1f} |")
    lines += ["", "ratios nvhook / NVIDIA (wall, CPU); starts net of the sim step:"]
    info, start = results["info"], results["start"]
    for key in info:  # type: ignore[union-attr]
        if key.endswith("nvhook info") and key.replace("nvhook", "NVIDIA") in info:  # type: ignore[operator]
            a, b = info[key], info[key.replace("nvhook", "NVIDIA")]  # type: ignore[index]
            lines.append(f"- {key.split(':')[0]} info: {med(a['wall_ms']) / med(b['wall_ms']):.2f}x"
                         f" wall, {med(a['cpu_ms']) / med(b['cpu_ms']):.2f}x CPU")
    for key in start:  # type: ignore[union-attr]
        if key.endswith("sim step + nvhook") and key.replace("nvhook", "NVIDIA") in start:  # type: ignore[operator]
            base = start[key.replace(" + nvhook", "")]  # type: ignore[index]
            a, b = start[key], start[key.replace("nvhook", "NVIDIA")]  # type: ignore[index]
            added = [med(x[w]) - med(base[w]) for x in (a, b) for w in ("wall_ms", "cpu_ms")]
            lines.append(f"- {key.split(':')[0]} GPU start, added: nvhook {added[0]:.1f} ms "
                         f"wall / {added[1]:.1f} ms CPU, NVIDIA {added[2]:.1f} / {added[3]:.1f}"
                         f" ({added[0] / added[2]:.2f}x wall, {added[1] / added[3]:.2f}x CPU)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="timed rounds")
    parser.add_argument("--roots", default="debian,flat,lib64", help="layouts (comma list)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: must run as root")
    results = run(args.runs, tuple(x for x in args.roots.split(",") if x))
    sys.stdout.write(report(results))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = out / time.strftime("realdriver-%Y%m%d-%H%M%S.json")
    name.write_text(json.dumps(results, indent=2) + "\n")
    sys.stdout.write(f"\nresults: {name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
