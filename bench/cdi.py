"""A CDI container start against the legacy hook's, in one run.

    sudo .venv/bin/python bench/cdi.py [-n 20]

Series, interleaved round by round (one warm-up round first), each a `run` of /bin/true in a
fresh bundle (made outside the timed section), 8 simulated GPUs, the launchers `nvhook
install` writes (/usr/bin/python3 -IS):
  - runc, no GPU: the floor;
  - wrapper + legacy hook: `nvhook-runtime run`, NVIDIA_VISIBLE_DEVICES=1 (the wrapper adds the
    prestart hook; the hook discovers, from its inventory cache, plans and applies);
  - wrapper + CDI: `nvhook-runtime run`, NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1 (the wrapper
    resolves the spec `nvhook cdi generate` wrote; its one hook applies links, ld.so.cache
    and the procfs view from its arguments);
  - runc + legacy hook, runc + CDI hook: `runc run` of the config.json the wrapper wrote for
    each (the hooks alone, without the wrapper).
Wall time of the command and CPU time (user + system of it and every process it waited for,
hooks included). Figures, not assertions; the machine is shared: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nvhook.dev.demo.bundle import container_spec, new_container_id, write_bundle
from nvhook.dev.demo.driver import install_hook, nvhook_command
from nvhook.dev.demo.rootfs import build_rootfs

RUNC = shutil.which("runc") or "/usr/sbin/runc"
RECORDER = """#!/bin/sh
prev=""; bundle="."
for a in "$@"; do case "$prev" in -b|--bundle) bundle="$a";; esac; prev="$a"; done
case " $* " in *" run "*|*" create "*) cp "$bundle/config.json" {copy};; esac
exec {runc} "$@"
"""


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s of the command and its waited-for descendants)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} -> {proc.returncode}\n"
                         f"{proc.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def setup(work: Path) -> tuple[Path, Path, dict[str, str], Path]:
    """(rootfs, install prefix, base env, the CDI spec dir)."""
    rootfs = build_rootfs(work / "rootfs")
    prefix = work / "prefix"
    install_hook(prefix)
    sim = work / "sim"
    subprocess.run([*nvhook_command(), "sim", "create", str(sim), "--gpus", "8"], check=True,
                   capture_output=True)
    specs = work / "cdi"
    subprocess.run([*nvhook_command(), "--config", str(sim / "config.toml"), "cdi", "generate",
                    "--hook-path", str(prefix / "nvhook-hook"), "--output",
                    str(specs / "nvidia.yaml")], check=True, capture_output=True)
    config = work / "config.toml"
    config.write_text(f'nvidia-container-runtime.modes.cdi.spec-dirs = ["{specs}"]\n'
                      + (sim / "config.toml").read_text())
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}
    return rootfs, prefix, env, specs


def edited_bundle(work: Path, rootfs: Path, prefix: Path, env: dict[str, str],
                  request: str) -> dict[str, object]:
    """The config.json the wrapper gives runc for `NVIDIA_VISIBLE_DEVICES=request`."""
    bundle = work / "probe"
    shutil.rmtree(bundle, ignore_errors=True)
    write_bundle(bundle, rootfs, container_spec(["/bin/true"],
                                                [f"NVIDIA_VISIBLE_DEVICES={request}"]))
    recorder = work / "recorder"
    copy = work / "edited.json"
    recorder.write_text(RECORDER.format(copy=copy, runc=RUNC))
    recorder.chmod(0o755)
    config = Path(env["NVIDIA_CTK_CONFIG_FILE_PATH"])
    text = config.read_text()
    if text.startswith("nvidia-container-runtime.runtimes"):
        text = text.split("\n", 1)[1]
    config.write_text(f'nvidia-container-runtime.runtimes = ["{recorder}"]\n' + text)
    subprocess.run([str(prefix / "nvhook-runtime"), "run", "--bundle", str(bundle),
                    new_container_id("cbench")], env=env, check=True, capture_output=True)
    config.write_text(f'nvidia-container-runtime.runtimes = ["{RUNC}"]\n' + text)
    doc: dict[str, object] = json.loads(copy.read_text())
    return doc


def series(work: Path, runs: int) -> dict[str, dict[str, float]]:
    rootfs, prefix, env, _ = setup(work)
    edited = edited_bundle(work, rootfs, prefix, env, "nvidia.com/gpu=1")
    hooked = edited_bundle(work, rootfs, prefix, env, "1")
    wrapper = str(prefix / "nvhook-runtime")

    def bundle(tag: str, i: int, env_vars: list[str],
               doc: dict[str, object] | None = None) -> str:
        path = work / f"b-{tag}-{i}"
        write_bundle(path, rootfs, doc or container_spec(["/bin/true"], env_vars))
        return str(path)

    makers: dict[str, Callable[[int], list[str]]] = {
        "runc, no GPU": lambda i: [RUNC, "run", "--bundle", bundle("r", i, []),
                                   new_container_id("cbench")],
        "wrapper + legacy hook (NVIDIA_VISIBLE_DEVICES=1)": lambda i: [
            wrapper, "run", "--bundle", bundle("l", i, ["NVIDIA_VISIBLE_DEVICES=1"]),
            new_container_id("cbench")],
        "wrapper + CDI (nvidia.com/gpu=1)": lambda i: [
            wrapper, "run", "--bundle", bundle("c", i, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"]),
            new_container_id("cbench")],
        "runc + legacy hook (the wrapper's config.json)": lambda i: [
            RUNC, "run", "--bundle", bundle("k", i, [], hooked), new_container_id("cbench")],
        "runc + CDI hook (the wrapper's config.json)": lambda i: [
            RUNC, "run", "--bundle", bundle("h", i, [], edited), new_container_id("cbench")],
    }
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in makers}
    for i in range(runs + 1):
        for name, make in makers.items():
            argv = make(i)
            result = measure(argv, env)
            shutil.rmtree(argv[3], ignore_errors=True)
            if i:
                figures[name].append(result)
    return {name: {"wall_ms": statistics.median(w for w, _ in values) * 1000,
                   "cpu_ms": statistics.median(c for _, c in values) * 1000}
            for name, values in figures.items()}


def markdown(results: dict[str, dict[str, float]], runs: int, load: float) -> str:
    floor = results["runc, no GPU"]
    lines = [f"CDI vs legacy: median of {runs} interleaved runs after 1 warm-up, 8 simulated "
             f"GPUs, load average {load:.1f} at the start", "",
             "| series | wall (ms) | CPU (ms) | added wall | added CPU |", "|---|---|---|---|---|"]
    for name, f in results.items():
        added = (f["wall_ms"] - floor["wall_ms"], f["cpu_ms"] - floor["cpu_ms"])
        lines.append(f"| {name} | {f['wall_ms']:.1f} | {f['cpu_ms']:.1f} | {added[0]:.1f} | "
                     f"{added[1]:.1f} |")
    legacy = results["wrapper + legacy hook (NVIDIA_VISIBLE_DEVICES=1)"]
    cdi = results["wrapper + CDI (nvidia.com/gpu=1)"]
    lines += ["", f"CDI / legacy through the wrapper: wall {cdi['wall_ms'] / legacy['wall_ms']:.2f}"
                  f", CPU {cdi['cpu_ms'] / legacy['cpu_ms']:.2f}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: must run as root")
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="nvhook-cbench-"))
    try:
        results = series(work, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(markdown(results, args.runs, load))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = out / time.strftime("cdi-%Y%m%d-%H%M%S.json")
    name.write_text(json.dumps({"runs": args.runs, "load": load, "median": results},
                               indent=2) + "\n")
    sys.stdout.write(f"\nresults: {name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
