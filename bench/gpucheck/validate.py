"""Validate nvhook on a machine with a real NVIDIA GPU, in one short run (or against the
simulated driver with --sim, which is how CI keeps it working).

    python3 bench/gpucheck/validate.py --out DIR [--kit .gpukit] [--runs 10] [--sim]

(`bench/gpucheck/device.sh` is the one command for a lent GPU machine.) Steps: install the
launchers from this checkout into a temp prefix; record the host (kernel, driver, nodes,
`nvhook doctor`, `nvhook info`); generate a CDI spec; then start a container running the kit's
`nvprobe` (NVML by dlopen, the /dev/nvidia* nodes opened, /proc/driver/nvidia) with GPU 0
through each path: the prestart hook under runc, the runtime wrapper in `auto` and `legacy`,
a CDI request through the wrapper, NVIDIA's own hook where it is installed, and no GPU at all
(the baseline); check what each container saw; time the paths interleaved, N rounds. Writes
summary.md, results.json, host.txt and log.txt under --out. Exit 0 when every path passed.
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from bench.gpucheck import checks  # noqa: E402
from nvhook.dev.demo import bundle as B  # noqa: E402
from nvhook.dev.demo import driver as D  # noqa: E402

PROBE = ["/usr/bin/nvprobe"]
HOST_COMMANDS = (
    ["uname", "-a"],
    ["nvidia-smi", "-L"],
    ["cat", "/proc/driver/nvidia/version"],
    ["sh", "-c", "ls -l /dev/nvidia* /dev/nvidia-caps 2>&1"],
    ["sh", "-c", "ldconfig -p | grep -E 'libnvidia-ml|libcuda' 2>&1"],
)


class Stage:
    """The work directory, the launchers, the driver and the configs of one validation."""

    def __init__(self, work: Path, kit: Path, sim: bool, gpus: int, log: list[str]) -> None:
        self.work, self.kit, self.log = work, kit, log
        self.prefix = work / "bin"
        self.nvhook(["install", "--prefix", str(self.prefix), "--python", sys.executable])
        launcher = self.prefix / D.HOOK_NAME
        self.driver = (
            D.create_sim_driver(work / "driver", gpus, launcher)
            if sim or not D.has_real_driver()
            else D.real_driver()
        )
        self.runc = shutil.which("runc") or str(B.find_runc())
        base = self.driver.config.read_text() if self.driver.config else "[nvhook]\n"
        self.spec_dir = work / "cdi"
        self.hook_config = self._config("hook", base, "")
        self.configs = {
            mode: self._config(mode, base, f'runtime-mode = "{mode}"\n')
            for mode in ("auto", "legacy")
        }
        self.configs["cdi"] = self.configs["auto"]

    def _config(self, name: str, base: str, nvhook: str) -> Path:
        top = (
            f'nvidia-container-runtime.runtimes = ["{self.runc}"]\n'
            f'nvidia-container-runtime.modes.cdi.spec-dirs = ["{self.spec_dir}"]\n'
        )
        path = self.work / f"{name}.toml"
        path.write_text(top + base + nvhook)
        return path

    def nvhook(
        self, args: list[str], config: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [*D.nvhook_command(), *(["--config", str(config)] if config else []), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        self.log.append(f"$ {' '.join(argv)}\n-> {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return proc


def host_facts(stage: Stage) -> str:
    out = [
        f"python {sys.version.split()[0]} ({sys.executable}), {platform.platform()}",
        f"driver: {'simulated at ' + str(stage.driver.root) if stage.driver.simulated else 'real'}",
    ]
    for argv in HOST_COMMANDS:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
            out.append(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
        except (OSError, subprocess.TimeoutExpired) as err:
            out.append(f"$ {' '.join(argv)}\n{err}")
    for args in (["doctor"], ["info"]):
        proc = stage.nvhook(args, stage.hook_config)
        out.append(
            f"$ nvhook {' '.join(args)}  (exit {proc.returncode})\n{proc.stdout}{proc.stderr}"
        )
    return "\n".join(out)


def nvidia_hook() -> str | None:
    """NVIDIA's own nvidia-container-runtime-hook, if this machine has it (not nvhook's)."""
    found = shutil.which("nvidia-container-runtime-hook")
    if not found:
        return None
    head = Path(found).read_bytes()[:4]
    return found if head == b"\x7fELF" else None  # nvhook's launchers are scripts


def paths(stage: Stage) -> dict[str, tuple[list[str], list[B.HookEntry], str | None]]:
    """name -> (env, prestart hooks, wrapper config or None for plain runc)."""
    gpu0 = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    hook = D.nvhook_hook_entry(stage.prefix / D.HOOK_NAME, stage.hook_config)
    table: dict[str, tuple[list[str], list[B.HookEntry], str | None]] = {
        "runc, no GPU": ([], [], None),
        "hook (prestart)": (gpu0, [*stage.driver.prestart, hook], None),
        "wrapper auto": (gpu0, [], "auto"),
        "wrapper legacy": (gpu0, [], "legacy"),
        "wrapper CDI": (["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], [], "cdi"),
    }
    theirs = nvidia_hook()
    if theirs and not stage.driver.simulated:
        table["NVIDIA hook (prestart)"] = (
            gpu0,
            [B.HookEntry(theirs, ("nvidia-container-runtime-hook", "prestart"))],
            None,
        )
    return table


def start(
    stage: Stage,
    name: str,
    how: tuple[list[str], list[B.HookEntry], str | None],
    rootfs: Path,
    n: int,
) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    env, prestart, mode = how
    bundle = B.write_bundle(
        stage.work / f"b-{n}-{abs(hash(name))}",
        rootfs,
        B.container_spec(PROBE, env, prestart=prestart, hostname="gpucheck"),
    )
    cid = B.new_container_id("gpucheck")
    if mode is None:
        argv, extra = [stage.runc, "run", "--bundle", str(bundle), cid], {}
    else:
        argv = [str(stage.prefix / "nvidia-container-runtime"), "run", "--bundle", str(bundle), cid]
        extra = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(stage.configs[mode])}
    env_run = {"PATH": os.environ["PATH"], **extra}
    cpu0, t0 = os.times(), time.monotonic()
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env=env_run,
        cwd=bundle,
    )
    wall, cpu1 = time.monotonic() - t0, os.times()
    cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    B.delete_container(cid)
    shutil.rmtree(bundle, ignore_errors=True)
    return wall, cpu, proc


def run_all(stage: Stage, rounds: int) -> dict[str, dict[str, object]]:
    rootfs = stage.kit / "rootfs"
    table = paths(stage)
    expect = checks.expected_gpu0(stage.driver.root)
    results: dict[str, dict[str, object]] = {
        k: {"walls": [], "cpus": [], "problems": []} for k in table
    }
    for n in range(rounds + 1):  # round 0: the checked (and untimed) warm-up
        for name, how in table.items():
            wall, cpu, proc = start(stage, name, how, rootfs, n)
            res = results[name]
            if n == 0:
                stage.log.append(f"== {name}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
                res["seen"] = checks.parse_probe(proc.stdout)
                res["problems"] = checks.judge(
                    name, proc.returncode, res["seen"], expect, proc.stderr
                )
            else:
                res["walls"].append(wall)  # type: ignore[attr-defined]
                res["cpus"].append(cpu)  # type: ignore[attr-defined]
    base = statistics.median(results["runc, no GPU"]["walls"] or [0.0])  # type: ignore[arg-type]
    base_cpu = statistics.median(results["runc, no GPU"]["cpus"] or [0.0])  # type: ignore[arg-type]
    for res in results.values():
        walls = res.pop("walls") or [0.0]
        res["added_cpu_ms"] = round(
            (
                statistics.median(res.pop("cpus") or [0.0])  # type: ignore[arg-type]
                - base_cpu
            )
            * 1000,
            1,
        )
        res["median_s"] = statistics.median(walls)  # type: ignore[arg-type]
        res["min_s"], res["max_s"] = min(walls), max(walls)  # type: ignore[type-var]
        res["added_ms"] = round((res["median_s"] - base) * 1000, 1)  # type: ignore[operator]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="bench/gpucheck/validate.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", required=True, help="directory for the results (created)")
    parser.add_argument(
        "--kit", default=str(REPO / ".gpukit"), help="the kit (bench/gpucheck/kit.py)"
    )
    parser.add_argument("--runs", type=int, default=10, help="timed rounds (default 10)")
    parser.add_argument(
        "--sim", action="store_true", help="the simulated driver, even on a GPU host"
    )
    parser.add_argument("--gpus", type=int, default=4, help="simulated GPUs (default 4)")
    args = parser.parse_args()
    out, kit = Path(args.out), Path(args.kit).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not (kit / "rootfs/usr/bin/nvprobe").exists():
        sys.stderr.write(
            f"gpucheck: no kit at {kit} (build it: sudo .venv/bin/python bench/gpucheck/kit.py)\n"
        )
        return 2
    os.environ["PATH"] = f"{kit / 'bin'}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    log: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="nvhook-gpucheck-"))
    try:
        stage = Stage(work, kit, args.sim, args.gpus, log)
        (out / "host.txt").write_text(host_facts(stage))
        generated = stage.nvhook(
            ["cdi", "generate", "--output", str(stage.spec_dir / "nvidia.json")], stage.hook_config
        )
        results = run_all(stage, args.runs)
        if generated.returncode != 0:
            results["wrapper CDI"]["problems"].insert(0, "cdi generate failed (log.txt)")  # type: ignore[attr-defined]
        summary = checks.summary(results, simulated=stage.driver.simulated, runs=args.runs)
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        (out / "summary.md").write_text(summary)
        sys.stdout.write(summary)
        return 0 if all(not r["problems"] for r in results.values()) else 1
    finally:
        (out / "log.txt").write_text("\n".join(log) + "\n")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
