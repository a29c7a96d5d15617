"""`bench/run.py --engines`: set up the stacks and daemons, measure, report (bench/engines.py).

The work directory is private (/tmp/nvb-*), removed at the end with everything the daemons
made (their cgroups, the shared paths of tests/fixtures/clientrig/host.py). The figures go to
`--out`/engines-<time>.json and a markdown report on stdout (bench/engines_report.py).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import engines as E
import engines_node as N
import stacks as S
from engines_report import markdown


def log(message: str) -> None:
    sys.stderr.write(f"bench: {message}\n")
    sys.stderr.flush()


def make_sim(work: Path, name: str, gpus: int, delay_ms: int = 0) -> Path:
    from nvhook.dev.demo.driver import nvhook_command

    root = work / name
    argv = [*nvhook_command(), "sim", "create", str(root), "--gpus", str(gpus), "--ipc",
            "--build-cache", str(work / "sim-cache")]
    if delay_ms:
        argv += ["--nvml-init-delay", str(delay_ms)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench: nvhook sim create {root}: {proc.stderr.strip()}")
    return root


def images(work: Path, scenarios: list[str], libraries: int) -> dict[str, Path]:
    from nvhook.dev.demo.rootfs import build_rootfs, copy_rootfs

    rootfs = build_rootfs(work / "rootfs")
    out = {E.IMAGE: rootfs}
    if "large-image" in scenarios:
        from nvhook.dev.sim.image import add_libraries

        large = copy_rootfs(rootfs, work / "rootfs-large")
        add_libraries(large, count=libraries)
        out[E.LARGE] = large
    return out


def build(args: object, work: Path, rig: E.Rig, node: Any,
          unusable: dict[str, str]) -> tuple[list[E.Series], dict[str, object]]:
    """Every stack, daemon and series (module docstring of bench/engines.py), on `node`
    (bench/engines_node.py) without the NVIDIA stacks that are `unusable` there."""
    a: object = args
    scenarios = a.scenarios.split(",")  # type: ignore[attr-defined]
    clients = a.clients.split(",")  # type: ignore[attr-defined]
    modes = [m for m in a.modes.split(",") if m] or S.nvhook_modes()  # type: ignore[attr-defined]
    py, nvhook, enter = node.python(), node.nvhook_command(), node.enter()
    imgs = images(work, scenarios, a.libraries)  # type: ignore[attr-defined]
    sim8 = make_sim(work, "sim8", 8)
    main = S.all_stacks(work, sim8, "main", modes, py, nvhook, unusable)
    slow: list[S.Stack] = []
    if "slow-nvml" in scenarios:
        slow = S.all_stacks(work, make_sim(work, "sim-slow", 1, a.nvml_delay),  # type: ignore[attr-defined]
                            "slow", modes, py, nvhook, unusable)
    persist: list[S.Stack] = []
    if "persist-nvml" in scenarios:
        persist = S.all_stacks(work, make_sim(work, "sim-persist", 8,
                                              a.persist_delay),  # type: ignore[attr-defined]
                               "persist", modes, py, nvhook, unusable)
    runc_sh = S.runc_wrapper(work)
    ctx: dict[str, tuple[object, E.CpuGroup]] = {}
    hook_a = next((st.hook_dir for st in main if st.family == "nvhook"), None)
    nv117 = next((st for st in main if st.family == "nvidia-1.17.8"), None)
    if "docker" in clients:
        runtimes = {st.name: st.runtime for st in (*main, *slow, *persist)}
        ctx["docker"] = E.start_docker(rig, "docker-a", {**runtimes, "runc-sh": runc_sh},
                                       hook_a, imgs, enter)
        if nv117 is not None:
            ctx["docker-B"] = E.start_docker(rig, "docker-b", {}, nv117.hook_dir,
                                             {E.IMAGE: imgs[E.IMAGE]}, enter)
    if "ctr" in clients:
        ctx["ctr"] = E.start_containerd(rig, imgs, enter)
    if "cri" in clients:
        from engines_cri import start_cri

        handlers = {st.name: st.runtime for st in (*main, *slow, *persist)}
        ctx["cri"] = start_cri(rig, imgs[E.IMAGE], {**handlers, "runc-sh": runc_sh}, enter)
    plain = {k: v for k, v in ctx.items() if k != "docker-B"}
    series = [*E.base_rows("main", E.IMAGE, plain, runc_sh)]
    if "podman" in clients and "main" in scenarios:
        from engines_cdi import podman_rows

        series += podman_rows(rig, node, imgs, main, sim8)
    if "main" in scenarios:
        series += E.stack_rows("main", main, [("no GPU", None), ("GPU 0", "0"),
                                              ("all 8 GPUs", "all")], E.IMAGE, plain)
        series += E.gpus_rows(ctx, nv117 is not None)
    if slow:
        series += E.stack_rows("slow-nvml", slow, [("GPU 0", "0")], E.IMAGE, plain)
    if persist:
        series += E.stack_rows("persist-nvml", persist, [("GPU 0", "0"), ("all 8 GPUs", "all")],
                               E.IMAGE, plain)
    if "large-image" in scenarios:
        series += E.base_rows("large-image", E.LARGE, plain)
        series += E.stack_rows("large-image", main, [("GPU 0", "0")], E.LARGE, plain)
    setup = {"modes": modes, "stacks": [st.label for st in main], "scenarios": scenarios,
             "clients": clients, "nvml_delay_ms": a.nvml_delay,  # type: ignore[attr-defined]
             "persist_delay_ms": a.persist_delay,  # type: ignore[attr-defined]
             "timing_logs": {f"{st.name}": str(st.timing_log) for st in (*main, *slow, *persist)
                             if st.timing_log}}
    return series, setup


def host_info(node: Any) -> dict[str, object]:
    """The machine, and the engines' versions as `node` has them."""
    found = N.versions(node)
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "node": node.name, "engines": N.node_summary(node.name, found), **found,
            "load_start": os.getloadavg()[0]}


def hook_totals(paths: dict[str, str]) -> dict[str, float]:
    """Median hook time (its own timing records, `total_ms`) per nvhook stack, warm-up out."""
    out = {}
    for name, path in paths.items():
        p = Path(path)
        if p.exists():
            totals = [json.loads(line)["total_ms"] for line in p.read_text().splitlines()[1:]]
            if totals:
                out[name] = sorted(totals)[len(totals) // 2]
    return out


def main(argv: list[str]) -> int:
    args = E.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: must run as root (starts private dockerd and containerd)")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fixtures.clientrig
    from tests.fixtures.clientrig.host import SharedPaths

    shared = SharedPaths()
    work = Path(tempfile.mkdtemp(prefix="nvb-", dir="/tmp"))
    rig = E.Rig(work)
    try:
        node, close_node = N.start(args.node)
        rig.closers.append(close_node)  # the last to go: the daemons run in it
        unusable = N.add_peers(node, S.peer_available)
        for family, why in unusable.items():
            log(f"{family} left out: {why}")
        info = host_info(node)
        series, setup = build(args, work, rig, node, unusable)
        setup["unusable"] = unusable
        log(f"{len(series)} series, {args.runs} rounds (+1 warm-up)")
        E.check(series, log)
        E.measure(series, args.runs, log)
        info["load_end"] = os.getloadavg()[0]
        results = {"runs": args.runs, "host": info, "setup": setup,
                   "hook_total_ms": hook_totals(setup["timing_logs"]),  # type: ignore[arg-type]
                   "series": [{"row": s.row, "client": s.client, "wall_ms": s.wall_ms,
                               "cpu_ms": s.cpu_ms, "failures": s.failures, "error": s.error,
                               "check": s.check}
                              for s in series]}
    finally:
        rig.close()
        shared.cleanup()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(markdown(results))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = out / time.strftime("engines-%Y%m%d-%H%M%S.json")
    name.write_text(json.dumps(results, indent=1) + "\n")
    sys.stdout.write(f"\nresults: {name}\n")
    return 0
