"""Container start-time benchmark: what the nvhook prestart hook adds to `runc run`, side by
side with NVIDIA's stack (when built) in the same run.

    sudo .venv/bin/python bench/run.py [-n 20] [--gpus 1,8,64] [--no-load] [--out DIR]
    sudo .venv/bin/python bench/run.py --wrapper      (the runtime wrapper: bench/wrapper.py)
    sudo .venv/bin/python bench/run.py --real-driver  (Debian's 535 files: bench/realdriver.py)
    sudo .venv/bin/python bench/run.py --engines [...]  (docker/ctr end to end: bench/engines.py)

Series, measured round-robin (bench/series.py; wall time and CPU time of `runc run` of
/bin/true with its hooks):
  - runc, no hook;                       - the Python floor (a hook that only reads stdin);
  - the simulated driver's /proc/driver step alone (the baseline of every GPU series: a real
    driver's kernel module provides /proc/driver, so this step does not exist on a GPU host);
  - nvhook for a container that wants no GPU;   - NVIDIA's hook for one (if built);
  - sim step + nvhook, N GPUs (NVIDIA_VISIBLE_DEVICES=all, utility+compute) for each N;
  - sim step + NVIDIA's hook + nvidia-container-cli, 8 GPUs (if built).
Then (not with --no-load): the hook's peak RSS and process time (a fork/wait4 wrapper), 8 and
32 simultaneous 8-GPU starts, and the 8-GPU series again with 1000 extra host mounts.
"Added" = a series' median minus its baseline's (no hook, or the sim step). Figures, not
assertions; compare only figures from the same run.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from peer import find_peer, peer_config, peer_hook_entry
from series import Rig, Series, floor_hook

from nvhook.dev.demo.bundle import HookEntry
from nvhook.dev.demo.driver import (
    DriverSetup,
    create_sim_driver,
    install_hook,
    nvhook_command,
    nvhook_hook_entry,
    sim_prestart_entry,
)
from nvhook.dev.demo.rootfs import build_rootfs

GPU_ENV = ("NVIDIA_VISIBLE_DEVICES=all",)
# issue 19, class 5: a privileged container, every GPU, capability and MIG device, MIG config
# and monitor, on 64 simulated GPUs with 7 MIG devices each (448 MIG devices)
MIG_SPEC = "all=7x1g.10gb"
MIG_ENV = ("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all",
           "NVIDIA_MIG_CONFIG_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=all")
PRIVILEGED = ("CAP_SYS_ADMIN", "CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE")
RSS_WRAPPER = """\
import json, os, sys, time
out, argv = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execv(argv[0], [os.path.basename(argv[0]), *argv[1:]])
_, status, ru = os.wait4(pid, 0)
with open(out, "a") as f:
    f.write(json.dumps({"maxrss_kib": ru.ru_maxrss, "wall_s": time.monotonic() - t0,
                        "cpu_s": ru.ru_utime + ru.ru_stime}) + "\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def phases_config(config: Path) -> Path:
    """The copy of a sim's `config` that sets `[nvhook] timing-log` (the phase pass's)."""
    return config.with_name(f"{config.stem}-phases.toml")


class Bench:
    def __init__(self, work: Path, gpus: list[int], mig: bool = False) -> None:
        self.work = work
        self.rig = Rig(work, build_rootfs(work / "rootfs"))
        self.launcher = install_hook(work / "prefix")
        self.nopack = without_pack(self.launcher)
        self.sims = {n: self._sim(n) for n in gpus}
        self.mig = self._sim(64, MIG_SPEC) if mig else None
        self.peer = find_peer()

    def _sim(self, gpus: int, mig: str = "") -> tuple[Path, Path, HookEntry]:
        """(sim root, nvhook config with a timing log, the sim's /proc/driver step)."""
        tag = f"{gpus}-mig" if mig else str(gpus)
        if mig:
            root = self.work / f"sim-{tag}"
            subprocess.run([*nvhook_command(), "sim", "create", str(root), "--gpus", str(gpus),
                            "--ipc", "--mig", mig], check=True, capture_output=True)
            setup = DriverSetup(root, root / "config.toml", (sim_prestart_entry(
                root / "config.toml", self.launcher),), simulated=True)
        else:
            setup = create_sim_driver(self.work / f"sim-{tag}", gpus, self.launcher)
        assert setup.config is not None
        text = setup.config.read_text().replace("sim-procfs = true", "sim-procfs = false")
        text = text.replace("[nvhook]\n", f'[nvhook]\ncache-dir = "{self.work}/cache"\n')
        config = self.work / f"config-{tag}.toml"  # the timed series': no timing log
        config.write_text(text)
        phases_config(config).write_text(text.replace(
            "[nvhook]\n", f'[nvhook]\ntiming-log = "{self.work}/timing-{tag}.jsonl"\n'))
        step = setup.prestart[0]
        step = HookEntry(step.path, (*step.args, "--with-nvidia-dir"), step.env)
        return setup.root, config, step

    def hook(self, gpus: int) -> HookEntry:
        return nvhook_hook_entry(self.launcher, self.sims[gpus][1])

    def phase_hooks(self, config: Path, step: HookEntry) -> tuple[HookEntry, HookEntry]:
        """The sim step and nvhook with `config`'s copy that sets `[nvhook] timing-log`."""
        return step, nvhook_hook_entry(self.launcher, phases_config(config))

    def phase_series(self) -> list[Series]:
        """Untimed starts with `[nvhook] timing-log` set, for the phase table: the log's
        import and write are not in the timed series (a node does not log timings)."""
        out = [Series(f"phases-{n}", self.phase_hooks(config, step), GPU_ENV)
               for n, (_, config, step) in self.sims.items()]
        if self.mig is not None:
            _, config, step = self.mig
            out.append(Series("phases-mig", self.phase_hooks(config, step), MIG_ENV,
                              PRIVILEGED))
        return out

    def mig_series(self) -> dict[str, Series]:
        """The 64 x 7 MIG start of issue 19 (class 5), nvhook's and NVIDIA's when built."""
        if self.mig is None:
            return {}
        root, config, step = self.mig
        out = {"sim step + nvhook, 64x7 MIG, privileged, all": Series(
            "nvhook-mig", (step, nvhook_hook_entry(self.launcher, config)), MIG_ENV,
            PRIVILEGED)}
        if self.peer:
            nv = peer_config(self.work, root, self.peer[1], 6407)
            out["sim step + NVIDIA, 64x7 MIG, privileged, all"] = Series(
                "nv-mig", (step, peer_hook_entry(self.peer[0], nv)), MIG_ENV, PRIVILEGED)
        return out

    def main_series(self) -> dict[str, Series]:
        n0 = min(self.sims)
        step = self.sims[n0][2]
        out = {"runc, no hook": Series("base"),
               "Python floor (reads stdin)": Series("floor", (floor_hook(self.work),)),
               "sim step": Series("sim", (step,)),
               "nvhook, no GPU wanted": Series("nvhook-none", (self.hook(n0),))}
        if self.peer:
            config = peer_config(self.work, self.sims[n0][0], self.peer[1], n0)
            out["NVIDIA, no GPU wanted"] = Series("nv-none", (peer_hook_entry(self.peer[0],
                                                                              config),))
        for n, (root, _, sim_step) in self.sims.items():
            out[f"sim step + nvhook, {n} GPU"] = Series(f"nvhook-{n}", (sim_step, self.hook(n)),
                                                        GPU_ENV)
            if n == 8:  # the same hook importing module by module (before the hook's pack)
                out[f"sim step + nvhook, {n} GPU, without the pack"] = Series(
                    f"nvhook-{n}-nopack", (sim_step, nvhook_hook_entry(
                        self.nopack, self.sims[n][1])), GPU_ENV)
            if self.peer and n == 8:
                config = peer_config(self.work, root, self.peer[1], n)
                out[f"sim step + NVIDIA, {n} GPU"] = Series(
                    f"nv-{n}", (sim_step, peer_hook_entry(self.peer[0], config)), GPU_ENV)
        return out

    def rss(self, gpus: int, runs: int) -> list[dict[str, float]]:
        wrapper = self.work / "rsswrap.py"
        wrapper.write_text(RSS_WRAPPER)
        out = self.work / f"rss-{gpus}.jsonl"
        hook = self.hook(gpus)
        wrapped = HookEntry("/usr/bin/python3", ("python3", "-I", "-S", str(wrapper), str(out),
                                                 hook.path, *hook.args[1:]))
        series = Series("rss", (self.sims[gpus][2], wrapped), GPU_ENV)
        for _ in range(runs):
            if not self.rig.run_once(series).ok:
                raise SystemExit("bench: the RSS pass failed")
        return [json.loads(line) for line in out.read_text().splitlines()]


def without_pack(launcher: Path) -> Path:
    """A copy of the hook launcher that does not use the pack (nvhook.launch.pack)."""
    text = launcher.read_text()
    call = next(line for line in text.splitlines() if line.strip().startswith("use_pack("))
    copy = launcher.with_name(launcher.name + "-nopack")
    copy.write_text(text.replace(call, call[:len(call) - len(call.lstrip())] + "pass"))
    copy.chmod(0o755)
    return copy


def host_mounts(work: Path, count: int) -> None:
    """This process (and the runc it starts) in a private mount namespace with `count` extra
    tmpfs mounts, as on a busy host."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x00020000) != 0 or libc.mount(b"none", b"/", None, 0x40000 | 0x4000,
                                                   None) != 0:
        raise SystemExit("bench: cannot make a private mount namespace")
    for i in range(count):
        target = work / "mnt" / str(i)
        target.mkdir(parents=True)
        if libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", 0, b"size=64k") != 0:
            raise SystemExit(f"bench: mount {target}: errno {ctypes.get_errno()}")


def run_bench(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="nvhook-bench-"))
    try:
        bench = Bench(work, args.gpus, mig=not args.no_mig)
        series = bench.main_series()
        bench.rig.measure(list(series.values()), args.runs)
        mig = bench.mig_series()
        if mig:  # its own rounds: a start takes ~0.5 s (and NVIDIA's far longer)
            bench.rig.measure(list(mig.values()), args.mig_runs)
            series.update(mig)
        results: dict[str, object] = {"runs": args.runs, "host": host_info(bench.peer),
                                      "series": {k: figures(s) for k, s in series.items()}}
        # the phase pass's records only (the load figures below append their own)
        bench.rig.measure(bench.phase_series(), min(args.runs, 10))
        results["phases_ms"] = {n: phase_medians(work / f"timing-{n}.jsonl") for n in args.gpus}
        if mig:
            results["phases_ms"]["64x7 MIG"] = phase_medians(work / "timing-64-mig.jsonl")
        if not args.no_load and 8 in bench.sims:
            results.update(load_figures(bench, series, args))
        return results
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def load_figures(bench: Bench, series: dict[str, Series],
                 args: argparse.Namespace) -> dict[str, object]:
    rss = bench.rss(8, args.rss_runs)
    out: dict[str, object] = {"rss_8gpu": {
        "peak_rss_mib": max(r["maxrss_kib"] for r in rss) / 1024,
        "hook_wall_ms": sorted(r["wall_s"] * 1000 for r in rss)[len(rss) // 2],
        "hook_cpu_ms": sorted(r["cpu_s"] * 1000 for r in rss)[len(rss) // 2]}}
    gpu8 = series["sim step + nvhook, 8 GPU"]
    conc = {}
    for count in (8, 32):
        failures, wall, cpu = bench.rig.concurrent(Series("conc", gpu8.hooks, GPU_ENV), count)
        conc[str(count)] = {"failures": failures, "median_wall_ms": wall, "cpu_per_start_ms": cpu}
    out["concurrent_8gpu"] = conc
    out["with_1000_host_mounts"] = with_host_mounts(bench, series, args.runs)
    return out


def with_host_mounts(bench: Bench, series: dict[str, Series], runs: int) -> dict[str, object]:
    """The sim step and the 8-GPU series again, in a namespace with 1000 more mounts; also the
    hook's own total (its timing records) there, which runc's noise does not reach."""
    log = bench.work / "timing-8.jsonl"
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    pid = os.fork()
    if pid == 0:  # the mounts stay in this child's namespace
        host_mounts(bench.work, 1000)
        _, config, step = bench.sims[8]
        again = {"sim step": Series("sim", series["sim step"].hooks),  # 8 GPU: with its timing log
                 "8 GPU": Series("gpu8", bench.phase_hooks(config, step), GPU_ENV)}
        bench.rig.measure(list(again.values()), runs)
        (bench.work / "mounts.json").write_text(json.dumps({k: figures(s) for k, s in
                                                            again.items()}))
        os._exit(0)
    os.waitpid(pid, 0)
    out: dict[str, object] = json.loads((bench.work / "mounts.json").read_text())
    totals = sorted(json.loads(line)["total_ms"] for line in log.read_text().splitlines()[seen:])
    out["hook_total_ms"] = totals[len(totals) // 2] if totals else None
    return out


def figures(s: Series) -> dict[str, object]:
    return {"wall_ms": s.wall_ms, "cpu_ms": s.cpu_ms, "failures": s.failures}


def phase_medians(log: Path) -> dict[str, float]:
    """Median milliseconds per phase (+ total) over the timing records in `log`."""
    per: dict[str, list[float]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        rec = json.loads(line)
        for key, value in rec.get("phases_ms", {}).items():
            per.setdefault(key, []).append(float(value))
        per.setdefault("total", []).append(float(rec.get("total_ms", 0)))
    return {k: sorted(v)[len(v) // 2] for k, v in per.items()}


def host_info(peer: object) -> dict[str, object]:
    runc = subprocess.run(["runc", "--version"], capture_output=True, text=True, check=False)
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "runc": (runc.stdout.splitlines() or ["?"])[0],
            "load": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "nvidia": "built" if peer else "absent (../shared/tools/peer/build.sh, or set "
                                           "PEER_HOOK and PEER_CLI)"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--engines" in argv:  # its own options (bench/engines.py)
        from engines_main import main as engines_main

        return engines_main([a for a in argv if a != "--engines"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="timed rounds")
    parser.add_argument("--gpus", default="1,8,64", help="simulated GPU counts (comma list)")
    parser.add_argument("--rss-runs", type=int, default=5, help="runs of the RSS pass")
    parser.add_argument("--no-mig", action="store_true",
                        help="skip the 64 x 7 MIG series (issue 19, class 5)")
    parser.add_argument("--mig-runs", type=int, default=5, help="rounds of the MIG series")
    parser.add_argument("--no-load", action="store_true",
                        help="skip RSS, concurrency and 1000-mount figures")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--wrapper", action="store_true",
                        help="the runtime wrapper's series instead (bench/wrapper.py)")
    parser.add_argument("--real-driver", action="store_true",
                        help="info and GPU starts on the real-driver roots (bench/realdriver.py)")
    parser.add_argument("--engines", action="store_true",
                        help="docker/ctr end to end instead (bench/engines.py; "
                             "--engines --help for its options)")
    args = parser.parse_args(argv)
    if args.real_driver:
        from realdriver import main as real_main  # bench/realdriver.py, next to this file

        return real_main(["--runs", str(args.runs), "--out", args.out])
    if args.wrapper:
        from wrapper import main as wrapper_main  # bench/wrapper.py, next to this file

        return wrapper_main(["--runs", str(args.runs), "--out", args.out])
    args.gpus = [int(x) for x in args.gpus.split(",") if x]
    if os.geteuid() != 0:
        raise SystemExit("bench: must run as root (sudo .venv/bin/python bench/run.py)")
    from report import markdown  # bench/report.py

    results = run_bench(args)
    sys.stdout.write(markdown(results))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = out / time.strftime("bench-%Y%m%d-%H%M%S.json")
    name.write_text(json.dumps(results, indent=2) + "\n")
    sys.stdout.write(f"\nresults: {name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
