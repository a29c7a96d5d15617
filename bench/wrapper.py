"""What the runtime wrapper (`nvhook-runtime`) adds in front of runc.

    sudo .venv/bin/python bench/wrapper.py [-n 30]      (also: bench/run.py --wrapper)

Series (each: one warm-up, then N timed runs; the wall time of the whole command):
  - the interpreter floor: `/usr/bin/python3 -IS -c pass`;
  - `runc state <no such container>` directly and through the wrapper (every non-create
    command: an argv scan, the config keys it needs, the runtime lookup, exec);
  - `runc run` of /bin/true in a non-GPU container, directly and through the wrapper (create
    reads config.json and finds no NVIDIA variable: it is passed on untouched);
  - through the wrapper, a GPU container (8 simulated GPUs, NVIDIA_VISIBLE_DEVICES=all) in
    legacy delivery (hook added), in spec delivery (the wrapper delivers the plan; the hook
    only mounts the simulated procfs) and in spec delivery without the simulated procfs (no
    hook at all, as on a node whose kernel shows /proc/driver/nvidia).
The wrapper is the launcher `nvhook install` writes (a sh front that starts /usr/bin/python3 -IS
only for creates that may want GPUs), with copies of the simulated driver's config.toml that
set `runtime-mode`. Figures, not
assertions.
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
from collections.abc import Callable, Sequence
from pathlib import Path

from nvhook.dev.demo.bundle import container_spec, new_container_id, write_bundle
from nvhook.dev.demo.driver import install_hook, nvhook_command
from nvhook.dev.demo.rootfs import build_rootfs

RUNC = shutil.which("runc") or "/usr/sbin/runc"


def timed(n: int, make: Callable[[int], list[str]], env: dict[str, str],
          expect: int | None = 0) -> list[float]:
    """Warm-up + n runs of the argv `make(i)` builds; wall seconds of the timed ones."""
    times = []
    for i in range(n + 1):
        argv = make(i)
        start = time.monotonic()
        proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              check=False)
        elapsed = time.monotonic() - start
        if expect is not None and proc.returncode != expect:
            raise SystemExit(f"bench: {' '.join(argv)} -> {proc.returncode}\n"
                             f"{proc.stderr.decode(errors='replace')}")
        if i:
            times.append(elapsed)
    return times


def median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1000


def wrapper_series(work: Path, runs: int, rootfs: Path | None = None) -> dict[str, float]:
    """Median ms per series (module docstring)."""
    rootfs = rootfs or build_rootfs(work / "rootfs")
    prefix = work / "prefix"
    install_hook(prefix)
    sim = work / "sim"
    subprocess.run([*nvhook_command(), "sim", "create", str(sim), "--gpus", "8"], check=True,
                   capture_output=True)
    text = (sim / "config.toml").read_text()  # it ends in its [nvhook] table
    legacy_config, spec_config, bare_config = (work / f"{n}.toml" for n in ("l", "s", "b"))
    legacy_config.write_text(text + 'runtime-mode = "legacy"\n')
    spec_config.write_text(text + 'runtime-mode = "spec"\n')
    # a real node's kernel shows /proc/driver/nvidia: no hook for the sim's procfs
    bare_config.write_text(text.replace("sim-procfs = true", "sim-procfs = false")
                           + 'runtime-mode = "spec"\n')
    wrapper = str(prefix / "nvhook-runtime")
    base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "NVIDIA_CTK_CONFIG_FILE_PATH": str(legacy_config)}

    def run(binary: str, env_vars: list[str], tag: str) -> Callable[[int], list[str]]:
        def make(i: int) -> list[str]:
            bundle = work / f"b-{tag}-{i}"
            write_bundle(bundle, rootfs, container_spec(["/bin/true"], env_vars))
            return [binary, "run", "--bundle", str(bundle), new_container_id("wbench")]
        return make

    out = {
        "python3 -IS -c pass": median_ms(timed(runs, lambda i: ["/usr/bin/python3", "-IS", "-c",
                                                                  "pass"], base)),
        "runc state (no such container)": median_ms(timed(
            runs, lambda i: [RUNC, "state", "nvhook-none"], base, expect=1)),
        "wrapper state (no such container)": median_ms(timed(
            runs, lambda i: [wrapper, "state", "nvhook-none"], base, expect=1)),
        "runc run, non-GPU": median_ms(timed(runs, run(RUNC, [], "rn"), base)),
        "wrapper run, non-GPU": median_ms(timed(runs, run(wrapper, [], "wn"), base)),
        "wrapper run, GPU legacy (8 GPUs)": median_ms(timed(
            runs, run(wrapper, ["NVIDIA_VISIBLE_DEVICES=all"], "wl"), base)),
        "wrapper run, GPU spec mode (8 GPUs)": median_ms(timed(
            runs, run(wrapper, ["NVIDIA_VISIBLE_DEVICES=all"], "ws"),
            {**base, "NVIDIA_CTK_CONFIG_FILE_PATH": str(spec_config)})),
        "wrapper run, GPU spec mode, no hook (8 GPUs, no sim procfs)": median_ms(timed(
            runs, run(wrapper, ["NVIDIA_VISIBLE_DEVICES=all"], "wb"),
            {**base, "NVIDIA_CTK_CONFIG_FILE_PATH": str(bare_config)})),
    }
    return out


def markdown(results: dict[str, float], runs: int) -> str:
    lines = [f"Runtime wrapper: median of {runs} runs after 1 warm-up, load average "
             f"{os.getloadavg()[0]:.1f}", "", "| series | median (ms) |", "|---|---|"]
    lines += [f"| {name} | {ms:.1f} |" for name, ms in results.items()]
    added = results["wrapper state (no such container)"] - results["runc state (no such "
                                                                   "container)"]
    floor = results["python3 -IS -c pass"]
    lines += ["", f"wrapper overhead on `state`: {added:.1f} ms (interpreter floor "
                  f"{floor:.1f} ms, so {added - floor:.1f} ms above it); on a non-GPU "
                  f"`run`: {results['wrapper run, non-GPU'] - results['runc run, non-GPU']:.1f} ms"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=30)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: must run as root")
    work = Path(tempfile.mkdtemp(prefix="nvhook-wbench-"))
    try:
        results = wrapper_series(work, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(markdown(results, args.runs))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = out / time.strftime("wrapper-%Y%m%d-%H%M%S.json")
    name.write_text(json.dumps({"runs": args.runs, "median_ms": results}, indent=2) + "\n")
    sys.stdout.write(f"\nresults: {name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
