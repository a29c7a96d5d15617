"""The mount phase alone: what the hook's `phases_ms.mounts` measures, without runc's noise.

    sudo .venv/bin/python bench/mounts.py [-n 40] [--gpus 1,8] [--syscalls] [--profile]

For each simulated GPU count: the plan of a GPU container (NVIDIA_VISIBLE_DEVICES=all,
utility+compute) against the demo rootfs, then N repetitions, each in a forked child with a
private mount namespace on a fresh copy of the rootfs (made outside the timed section) whose
/proc is a procfs with the simulated /proc/driver tmpfs in it, as the container's is at
prestart. The timed section is `nvmount.effects.Run._mount` without the setns (the child is the
namespace): the host's peer groups, the sources cloned, the rootfs opened, the plan applied
and the journal committed. Reported: wall and CPU (the child's, during the section) medians,
and with --syscalls the syscalls of the section by name (`strace -c` attached to the child
around it; a separate pass: its times are not comparable; strace 6.1 does not list
statmount, one per attach), with --calls its Python and C function calls (one more run,
deterministic), with --profile a cProfile of one run per count.
The module imports are done before the timed section: the hook's phase also imports the
apply modules (about 1 ms), which `bench/run.py`'s phase figures include.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nvhook.dev.demo.rootfs import build_rootfs, copy_rootfs


def sim_root(work: Path, gpus: int) -> Path:
    root = work / f"sim-{gpus}"
    subprocess.run([sys.executable, "-m", "nvhook", "sim", "create", str(root), "--gpus",
                    str(gpus), "--ipc"], check=True, capture_output=True)
    return root


def make_plan(sim: Path, rootfs: Path, devices: str = "all") -> object:
    from nvhook.config.load import load_config
    from nvhook.hook.mount import engine_options
    from nvmount import pipeline
    from nvmount._libc import Libc
    from nvmount.capabilities import DriverCapability as C
    from nvmount.requests import EngineRequest

    config = load_config(str(sim / "config.toml"), {})
    options = engine_options(config)
    request = EngineRequest(devices=(devices,), capabilities=C.UTILITY | C.COMPUTE)
    plan = pipeline.plan_only(request, str(rootfs), options, Libc())
    assert plan is not None, f"no driver in {sim}"
    return plan


def _proc_driver(rootfs: Path) -> None:
    """The container's /proc at prestart: procfs, with the sim step's /proc/driver tmpfs."""
    from nvhook.dev.sim.prestart import _make_tmpfs
    from nvmount import _libc

    libc = _libc.Libc()
    libc.mount("proc", str(rootfs / "proc"), "proc", 0)
    tmpfs = _make_tmpfs(libc)
    os.mkdir("nvidia", 0o555, dir_fd=tmpfs)
    target = os.open(rootfs / "proc/driver", os.O_PATH | os.O_DIRECTORY)
    libc.move_mount(tmpfs, "", target, "", _libc.MOVE_MOUNT_F_EMPTY_PATH
                    | _libc.MOVE_MOUNT_T_EMPTY_PATH)


def hook_faults() -> object:
    """The fault points as the hook has them (`Faults.from_env` of a production start)."""
    from nvmount.faults import Faults

    return Faults.from_env({}, debug=False, enabled=False)


def mount_phase(plan: object, rootfs: Path) -> dict[str, float]:
    """`Run._mount` without setns: (wall ms, CPU ms) of the section."""

    from nvmount._libc import Libc
    from nvmount.apply.journal import Journal
    from nvmount.apply.mounts import peer_groups
    from nvmount.apply.steps import apply_plan, clone_sources
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

    libc = Libc()
    journal = Journal("container mounts")
    faults = hook_faults()
    t0, c0 = time.perf_counter(), time.process_time()
    with ProcFs.open(libc) as procfs:
        host_peers = peer_groups(procfs)
        sources = clone_sources(plan, libc, faults)  # type: ignore[arg-type]
        with Root.open(str(rootfs), libc, procfs=procfs, require_proc_dir=True) as root:
            root.check_proc_mounted()
            apply_plan(plan, root, sources, journal, libc,  # type: ignore[arg-type]
                       procfs=procfs, host_peers=host_peers, faults=faults)
            journal.commit()
    return {"wall_ms": (time.perf_counter() - t0) * 1000,
            "cpu_ms": (time.process_time() - c0) * 1000}


def in_child(plan: object, rootfs: Path, *, profile: str = "", syscalls: bool = False,
             calls: bool = False) -> dict[str, float]:
    """One repetition in a forked child with a private mount namespace."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(r)
        out: dict[str, float] = {}
        try:
            from nvmount import _libc
            from nvmount.log import WARNING, Sink, install

            install(Sink(WARNING))  # as the hook: records below WARNING cost one comparison
            libc = _libc.Libc()
            libc.unshare(_libc.CLONE_NEWNS)
            libc.mount(None, "/", None, _libc.MS_REC | _libc.MS_PRIVATE)
            _proc_driver(rootfs)
            out = count_calls(plan, rootfs) if calls else measured(plan, rootfs, profile,
                                                                      syscalls)
        except BaseException as err:  # reported to the parent
            out = {"error": repr(err)}  # type: ignore[dict-item]
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = json.loads(f.read() or b"{}")
    os.waitpid(pid, 0)
    if "error" in data:
        raise SystemExit(f"bench: mount phase failed: {data['error']}")
    return data  # type: ignore[no-any-return]


def measured(plan: object, rootfs: Path, profile: str, syscalls: bool) -> dict[str, float]:
    if profile:
        import cProfile

        prof = cProfile.Profile()
        out = prof.runcall(mount_phase, plan, rootfs)
        prof.dump_stats(profile)
        return out
    if not syscalls:
        return mount_phase(plan, rootfs)
    summary = os.environ.get("BENCH_STRACE_OUT") or f"{rootfs}.strace"  # strace -c, around it
    tracer = subprocess.Popen(["strace", "-c", "-o", summary, "-p", str(os.getpid())],
                              stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # strace attaches
    out = mount_phase(plan, rootfs)
    tracer.send_signal(2)
    tracer.wait()
    counts = strace_counts(Path(summary).read_text())
    for name in NOT_THE_SECTION:
        counts.pop(name, None)
    out["syscalls"] = float(sum(counts.values()))
    out.update({f"sys.{k}": float(v) for k, v in counts.items()})
    return out


NOT_THE_SECTION = ("clock_nanosleep", "kill", "wait4", "getrusage", "clock_gettime")


def strace_counts(text: str) -> dict[str, int]:
    """{syscall: calls} from a `strace -c` table."""
    out = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            out[fields[-1]] = int(fields[3])
        elif len(fields) >= 5 and fields[0].isdigit() and fields[0] != "0":
            pass
    return out


def count_calls(plan: object, rootfs: Path) -> dict[str, float]:
    """The section with every Python and C function call counted (`sys.setprofile`): a
    deterministic measure of the interpreter's share (callgrind cannot run it: valgrind 3.19
    has no open_tree, move_mount or fsopen)."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        out = mount_phase(plan, rootfs)
    finally:
        sys.setprofile(None)
    out["calls"] = float(count)
    return out


def run(args: argparse.Namespace) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="nvhook-mbench-"))
    try:
        rootfs = build_rootfs(work / "rootfs")
        results: dict[str, object] = {}
        for gpus in args.gpus:
            sim = Path(args.sim.format(gpus=gpus)) if args.sim else sim_root(work, gpus)
            plan = make_plan(sim, rootfs)
            rows = []
            for i in range(args.runs + 1):
                copy = work / f"r-{gpus}-{i}"
                copy_rootfs(rootfs, copy)
                prof = str(Path(args.out) / f"mounts-{gpus}.prof") if args.profile and i == 1 \
                    else ""
                rows.append(in_child(plan, copy, profile=prof, syscalls=args.syscalls))
                shutil.rmtree(copy, ignore_errors=True)
            rows = rows[1:]  # warm-up
            results[str(gpus)] = {
                "entries": len(plan.entries),  # type: ignore[attr-defined]
                **{k: statistics.median(r[k] for r in rows) for k in rows[0]}}
            if args.calls:
                copy = work / f"r-{gpus}-calls"
                copy_rootfs(rootfs, copy)
                calls = in_child(plan, copy, calls=True)["calls"]
                results[str(gpus)]["calls"] = calls  # type: ignore[index]
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=40)
    parser.add_argument("--gpus", default="1,8")
    parser.add_argument("--syscalls", action="store_true", help="count syscalls (strace -c)")
    parser.add_argument("--profile", action="store_true", help="cProfile of one run per count")
    parser.add_argument("--calls", action="store_true",
                        help="Python and C function calls of the section (one more run)")
    parser.add_argument("--sim", default="", help="an existing simulated driver root per "
                        "GPU count ({gpus} is replaced), instead of new ones")
    parser.add_argument("--json", action="store_true", help="the figures as JSON only")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    args.gpus = [int(x) for x in args.gpus.split(",") if x]
    if os.geteuid() != 0:
        raise SystemExit("bench: must run as root")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    results = run(args)
    if args.json:
        sys.stdout.write(json.dumps(results) + "\n")
        return 0
    load = os.getloadavg()[0]
    sys.stdout.write(f"mount phase, medians of {args.runs} runs, load {load:.1f}\n")
    for gpus, row in results.items():
        sys.stdout.write(f"  {gpus} GPU: {json.dumps(row)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
