"""The GPU create of the runtime wrapper in `auto`, phase by phase (issue 32).

    sudo .venv/bin/python bench/createprof.py [-n 30] [--gpus 8] [--importtime FILE]

One simulated driver (`--gpus`, no procfs step: a real node's kernel shows /proc/driver), nvhook
installed with `runtime-mode = "auto"` and a low-level runtime that does nothing (`/bin/true`),
so the create is the launcher, the interpreter, the imports and the wrapper's work alone; it
is called with runc's `--log FILE --log-format json`, as containerd's shim calls it.
Series, interleaved round by round after a warm-up round, each a process timed with wait4
(wall, and user + system CPU of it and its children):

- `python3 -IS -c pass`: the interpreter's floor;
- `python3 -IS -c "import ..."`: the floor plus the modules a GPU create imports (read from
  the wrapper's own `sys.modules`, so the list follows the code);
- `python3 -IS` + the create pack's preload (`use_pack(..., "create")`, as the wrapper loads
  it): what any GPU create in one Python process pays before its first step of work;
- `wrapper create, GPU 0`: the sh launcher and the whole create, with the create pack
  `nvhook install` wrote (`nvhook.launch.pack`) and without it (moved aside for that series);
- `runc run` of the config.json the create wrote (GPU) and of the unedited one (no GPU):
  what runc's own mounts and device nodes cost;
- `runc run`, no GPU, with a prestart hook `/bin/true`, and with the simulated driver's C step
  before it (`nvsim-prestart --with-nvidia-dir --then /bin/true`: a tmpfs on /proc/driver,
  then exec): the difference is what the legacy stacks of bench/engines.py pay for the
  simulation before their hook (a real driver's kernel module needs no step).

The wrapper's timing record gives the phases inside the create (`config`, `spec`, `inventory`,
`plan`, `mounts`, `rootfs`); `--importtime FILE` writes `python3 -X importtime` of one create.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nvhook.dev.demo.bundle import (
    CUDA_IMAGE_ENV,
    HookEntry,
    container_spec,
    new_container_id,
    write_bundle,
)
from nvhook.dev.demo.driver import nvhook_command
from nvhook.dev.demo.rootfs import build_rootfs

RUNC = shutil.which("runc") or "/usr/sbin/runc"
PY = "/usr/bin/python3"
NO_PACK = "wrapper create, GPU 0, without the create pack"
PRELOAD = "python3 -IS + the create pack's preload (no work)"
GPU_ENV = [*CUDA_IMAGE_ENV, "NVIDIA_VISIBLE_DEVICES=0"]  # a CUDA image, GPU 0 (the last wins)
# the launcher's Python, with execve made a no-op: the create runs, then sys.modules is written
PROBE = ("import sys, os\nfrom nvhook.runtime.wrapper import main\n"
         "os.execve = lambda *a: None\n"
         "main([sys.argv[1], *sys.argv[4:]], recorded=sys.argv[2])\n"
         "open(sys.argv[3] + '/modules.txt', 'w').write(' '.join(sorted(sys.modules)))\n")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms) of one process and its children."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.returncode != 0:
        raise SystemExit(f"createprof: {' '.join(argv)} -> {proc.returncode}\n{err.decode()}")
    return wall * 1000, (usage.ru_utime + usage.ru_stime) * 1000


class Bench:
    def __init__(self, work: Path, gpus: int) -> None:
        self.work = work
        self.rootfs = build_rootfs(work / "rootfs")
        sim = work / "sim"
        subprocess.run([*nvhook_command(), "sim", "create", str(sim), "--gpus", str(gpus)],
                       check=True, capture_output=True)
        # what the legacy stacks of bench/engines.py pay before their hook (bench/stacks.py)
        step = sim / "nvsim/bin/nvsim-prestart"
        self.step = HookEntry(str(step), (step.name, "--with-nvidia-dir", "--then", "/bin/true",
                                          "true"))
        self.timing = work / "timing.jsonl"
        text = (sim / "config.toml").read_text().replace("sim-procfs = true", "sim-procfs = false")
        text = text.replace("[nvhook]\n", f'[nvhook]\ncache-dir = "{work / "cache"}"\n'
                                          f'timing-log = "{self.timing}"\nruntime-mode = "auto"\n')
        self.config = work / "config.toml"
        self.config.write_text('nvidia-container-runtime.runtimes = ["/bin/true"]\n' + text)
        self.prefix = work / "prefix"
        subprocess.run([*nvhook_command(), "--config", str(self.config), "install", "--python",
                        PY, "--prefix", str(self.prefix)], check=True, capture_output=True)
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        self.count = 0
        timed(self.create(self.bundle(GPU_ENV)), self.env)  # the first create fills the cache

    def bundle(self, env: list[str], prestart: tuple[HookEntry, ...] = ()) -> Path:
        self.count += 1
        path = self.work / f"b{self.count}"
        write_bundle(path, self.rootfs, container_spec(["/bin/true"], env, prestart=prestart))
        return path

    def create(self, bundle: Path) -> list[str]:
        """The create as containerd's runc shim runs it (docker's too): `--log` and
        `--log-format json` first, so the wrapper writes its records as it would there."""
        return [str(self.prefix / "nvidia-container-runtime"), "--log", str(bundle / "log.json"),
                "--log-format", "json", "create", "--bundle", str(bundle),
                new_container_id("cprof")]

    def modules(self) -> list[str]:
        """The modules a GPU create imports (the wrapper's sys.modules after the create)."""
        bundle = self.bundle(GPU_ENV)
        argv = [PY, "-IS", "-c", f"import sys\nsys.path[:0] = [{str(Path.cwd())!r}]\n" + PROBE,
                "nvidia-container-runtime", str(self.config), str(self.work), "create",
                "--bundle", str(bundle), "cprof-probe"]
        subprocess.run(argv, env=self.env, check=True, capture_output=True)
        base = set(subprocess.run([PY, "-IS", "-c", "import sys; print(' '.join(sys.modules))"],
                                  capture_output=True, check=True, text=True).stdout.split())
        mods = (self.work / "modules.txt").read_text().split()
        self.stdlib = [m for m in mods if m not in base and not m.startswith(("nvhook", "nvmount"))]
        return [m for m in mods if m not in base and m.startswith(("nvhook", "nvmount"))]

    def series(self) -> dict[str, Callable[[], list[str]]]:
        imports = "import " + ", ".join(self.modules())
        path = f"import sys\nsys.path[:0] = [{str(Path.cwd())!r}]\n"
        gpu_bundles: list[Path] = []

        def gpu_create() -> list[str]:
            bundle = self.bundle(GPU_ENV)
            gpu_bundles.append(bundle)
            return self.create(bundle)

        def runc_gpu() -> list[str]:
            return [RUNC, "run", "--bundle", str(gpu_bundles[-1]), new_container_id("cprof")]

        def runc_plain() -> list[str]:
            return [RUNC, "run", "--bundle", str(self.bundle([])), new_container_id("cprof")]

        def runc_hook(hook: HookEntry) -> Callable[[], list[str]]:
            return lambda: [RUNC, "run", "--bundle", str(self.bundle([], (hook,))),
                            new_container_id("cprof")]

        return {
            "python3 -IS -c pass": lambda: [PY, "-IS", "-c", "pass"],
            "python3 -IS + the create's imports": lambda: [PY, "-IS", "-c", path + imports],
            PRELOAD: lambda: [PY, "-IS", "-c", path + "import gc\ngc.disable()\n"
                              "from nvhook.launch.pack import use_pack\n"
                              f"assert use_pack({str(Path.cwd())!r}, 'create')"],
            "wrapper create, GPU 0 (runtime: /bin/true)": gpu_create,
            NO_PACK: gpu_create,
            "runc run, the created config.json (GPU 0)": runc_gpu,
            "runc run, no GPU": runc_plain,
            "runc run, no GPU, prestart hook /bin/true": runc_hook(
                HookEntry("/bin/true", ("true",))),
            "runc run, no GPU, prestart hook nvsim-prestart, then /bin/true": runc_hook(
                self.step),
        }

    def importtime(self, out: Path) -> None:
        bundle = self.bundle(GPU_ENV)
        argv = [PY, "-X", "importtime", "-IS", "-c",
                f"import sys\nsys.path[:0] = [{str(Path.cwd())!r}]\n" + PROBE,
                "nvidia-container-runtime", str(self.config), str(self.work), "create",
                "--bundle", str(bundle), "cprof-it"]
        proc = subprocess.run(argv, env=self.env, check=True, capture_output=True, text=True)
        out.write_text(proc.stderr)


@contextlib.contextmanager
def without_pack(off: bool) -> Iterator[None]:
    """The create pack (nvhook.launch.pack) moved aside for one series."""
    from nvhook.launch.pack import PACK_NAME

    pack = Path(__file__).resolve().parents[1] / "nvhook" / PACK_NAME
    if not off or not pack.exists():
        yield
        return
    pack.rename(pack.with_suffix(".off"))
    try:
        yield
    finally:
        pack.with_suffix(".off").rename(pack)


def phases(timing: Path) -> dict[str, float]:
    records = [json.loads(line) for line in timing.read_text().splitlines() if line.strip()]
    keys = sorted({k for r in records for k in r.get("phases_ms", {})})
    out = {k: statistics.median(r["phases_ms"].get(k, 0.0) for r in records) for k in keys}
    out["total"] = statistics.median(r.get("total_ms", 0.0) for r in records)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=30)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--importtime", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvhook-createprof-") as tmp:
        bench = Bench(Path(tmp), args.gpus)
        if args.importtime:
            bench.importtime(args.importtime)
        series = bench.series()
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in series}
        load = os.getloadavg()[0]
        for i in range(args.runs + 1):
            for name, make in series.items():
                with without_pack(name == NO_PACK):
                    result = timed(make(), bench.env)
                if i:
                    samples[name].append(result)
        bench.timing.write_text("\n".join(bench.timing.read_text().splitlines()[1:]) + "\n")
        print(f"{args.runs} rounds, {args.gpus} simulated GPUs, load {load:.1f} -> "
              f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print("| series | wall ms | CPU ms |\n|---|---|---|")
        for name, values in samples.items():
            print(f"| {name} | {statistics.median(v[0] for v in values):.1f} | "
                  f"{statistics.median(v[1] for v in values):.1f} |")
        print("| phase (the create's timing record) | wall ms |\n|---|---|")
        for name, value in phases(bench.timing).items():
            print(f"| {name} | {value:.2f} |")
        subprocess.run(["sh", "-c", f"for c in $({RUNC} list -q | grep '^cprof'); do "
                        f"{RUNC} delete -f $c; done"], check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
