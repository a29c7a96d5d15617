"""What the createContainer hooks of NVIDIA's CDI spec cost a container start: nvhook's
drop-ins (`nvidia-cdi-hook`, or `nvidia-ctk hook` as 1.20's jit-cdi writes them) beside
NVIDIA 1.20.0's own `nvidia-cdi-hook` (`/opt/peer-1.20`), in the same run.

    sudo .venv/bin/python bench/cdihooks.py [-n 20] [--jit-cdi] [--libs N] [--out DIR]

Every round runs `runc run` of /bin/true once per series, round-robin (round 0 is a warm-up),
each with a fresh bundle: the spec `nvidia-ctk cdi generate` 1.20.0 wrote for the simulated
8-GPU driver (tests/data/nvidia-specs), device 0, applied to config.json as a CDI runtime
does (its mounts, device nodes, env and six createContainer hooks). Series:

  - runc, the spec's mounts and nodes, no hook (the base);
  - the same with the six hooks as NVIDIA 1.20.0's binary;
  - the same with the six hooks as nvhook's drop-in (installed by `nvhook install`).

Each hook runs under a small C wrapper (a fork and `wait4`) that records the hook process's
own CPU time (user + system, its children included: ldconfig) and wall time, so the table
has a line per hook. The hooks run where runc runs createContainer hooks: in the container's
namespaces, before pivot_root. On this host there is no /proc/driver/nvidia: NVIDIA's
`disable-device-node-modification` finds no params and does nothing; nvhook's is configured
as in the tests (`[nvhook] sim-procfs`: it mounts the simulated driver's procfs view, more
work than a real driver's one file bind). `--libs N` puts N extra shared libraries into the
image's library folder (a larger image: ldconfig's and the cache writer's work grow).
Figures, not assertions; compare only figures of the same run; the load average is printed.
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
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nvhook.dev.demo.bundle import Runc, container_spec, new_container_id  # noqa: E402
from nvhook.dev.demo.driver import launcher_python  # noqa: E402
from nvhook.dev.demo.rootfs import build_rootfs, copy_rootfs  # noqa: E402

PEER_HOOK = Path(os.environ.get("PEER_CDI_HOOK", "/opt/peer-1.20/bin/nvidia-cdi-hook"))
SPEC = REPO / "tests/data/nvidia-specs/nvidia-ctk-1.20.0.yaml"
LIBS = "usr/lib/x86_64-linux-gnu"
WRAPPER_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* Runs a hook, appends "cpu_ms wall_ms rc WORDS..." to OUT. hookwrap PATH ARG0 ARGS...; or,
   with -DINTERP, as a launcher's interpreter: shwrap SCRIPT ARGS... runs INTERP with the same
   arguments (the script's own path stays its $0). */
int main(int argc, char **argv) {
    struct timespec t0, t1;
    struct rusage ru;
    int status = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid == 0) {
#ifdef INTERP
        argv[0] = INTERP;
        execv(INTERP, argv);
#else
        if (argc < 3) _exit(2);
        execv(argv[1], argv + 2);
#endif
        _exit(127);
    }
    if (pid < 0 || wait4(pid, &status, 0, &ru) < 0) return 2;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    FILE *out = fopen(OUT, "a");
    if (out) {
        double cpu = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                     (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
        double wall = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        fprintf(out, "%.3f %.3f %d", cpu, wall, WIFEXITED(status) ? WEXITSTATUS(status) : 128);
        for (int i = FIRST; i < argc && i < FIRST + 4; i++) fprintf(out, " %s", argv[i]);
        fputc('\n', out);
        fclose(out);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
"""


def hook_label(words: list[str]) -> str:
    """The hook's name among the first words of its argv (after global flags and `hook`)."""
    names = [w for w in words if not w.startswith("-") and w != "hook"]
    return names[0] if names else "?"


def nvidia_spec(sim_root: Path) -> dict[str, Any]:
    """The committed 1.20.0 spec with its driver root moved to `sim_root`."""
    text = SPEC.read_text()
    doc = yaml.safe_load(text)
    old = next(n["hostPath"] for n in doc["containerEdits"]["deviceNodes"]
               if n["path"] == "/dev/nvidiactl")[: -len("/dev/nvidiactl")]
    loaded = yaml.safe_load(text.replace(old + "/", str(sim_root) + "/"))
    assert isinstance(loaded, dict)
    return loaded


class Bench:
    def __init__(self, work: Path, jit_cdi: bool, libs: int, sim_procfs: bool,
                 baseline: Path | None = None) -> None:
        from nvhook.dev.sim import SimSpec, create_sim_root

        self.work, self.jit_cdi = work, jit_cdi
        self.rootfs = build_rootfs(work / "rootfs")
        if libs:
            extra_libs(self.rootfs, libs)
        self.sim = create_sim_root(work / "sim", SimSpec(gpus=8, ipc=True))
        self.record = work / "hooks.log"
        (work / "hookwrap.c").write_text(WRAPPER_C)
        self.wrapper, shwrap = work / "hookwrap", work / "shwrap"
        for binary, extra in ((self.wrapper, ["-DFIRST=3"]),
                              (shwrap, ["-DFIRST=2", '-DINTERP="/bin/sh"'])):
            subprocess.run(["gcc", "-O2", f'-DOUT="{self.record}"', *extra, "-o", str(binary),
                            str(work / "hookwrap.c")], check=True)
        # the simulated driver's config makes nvhook's disable-device-node-modification mount
        # the simulated procfs view; without it (the default) nvhook's hooks read the default
        # config, and see no /proc/driver/nvidia, as NVIDIA's do here
        config = Path(self.sim.config_path).read_text() if sim_procfs else ""
        self.prefix = self.install(work / "bin", config, shwrap)
        # the levers' series: the sandboxed ldconfig instead of the cache writer
        ldconfig = (config.replace("[nvhook]\n", '[nvhook]\nldcache = "ldconfig"\n')
                    if "[nvhook]\n" in config else config + '\n[nvhook]\nldcache = "ldconfig"\n')
        self.ldconfig_prefix = self.install(work / "bin-ldconfig", ldconfig, shwrap)
        self.baseline = None
        if baseline is not None:  # another nvhook's source tree (e.g. `git archive main`)
            self.baseline = work / "bin-baseline"
            flags = ["--config", str(work / "bin.toml")] if config else []
            subprocess.run([sys.executable, "-m", "nvhook", *flags, "install", "--python",
                            launcher_python(), "--prefix", str(self.baseline)],
                           capture_output=True, check=True, cwd=baseline)
        self.spec = nvidia_spec(Path(self.sim.path))
        self.runc = Runc()
        self.count = 0

    def install(self, prefix: Path, config: str, shwrap: Path) -> Path:
        """nvhook's launchers in `prefix` (with `config` when not empty), their sh fronts
        run by shwrap: the spec still names the launchers themselves (what the first hook
        of a group looks for)."""
        flags = []
        if config:
            path = prefix.with_suffix(".toml")
            path.write_text(config)
            flags = ["--config", str(path)]
        proc = subprocess.run([sys.executable, "-m", "nvhook", *flags, "install", "--python",
                               launcher_python(), "--prefix", str(prefix)],
                              capture_output=True, text=True, check=False, cwd=REPO)
        if proc.returncode != 0:
            raise SystemExit(f"bench: nvhook install: {proc.stderr.strip()}")
        for name in ("nvidia-cdi-hook", "nvidia-ctk"):
            launcher = prefix / name
            text = launcher.read_text()
            assert text.startswith("#!/bin/sh\n"), "nvhook's launcher is not a sh front"
            launcher.write_text(f"#!{shwrap}\n" + text.split("\n", 1)[1])
        return prefix

    def config(self, stack: str) -> dict[str, object]:
        """config.json of one container: the spec's edits for device 0 and its hooks run by
        `stack` ("none", "nvidia" or "nvhook") under the wrapper."""
        spec = self.spec
        edits = [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"]
                                           if d["name"] == "0")]
        doc = container_spec(["/bin/true"], [e for ed in edits for e in ed.get("env") or ()])
        mounts = doc["mounts"]
        linux = doc["linux"]
        assert isinstance(mounts, list) and isinstance(linux, dict)
        devices, rules = [], linux["resources"]["devices"]
        hooks: list[dict[str, object]] = []
        for ed in edits:
            for m in ed.get("mounts") or ():
                mounts.append({"destination": m["containerPath"], "source": m["hostPath"],
                               "type": "bind", "options": m.get("options") or ["bind"]})
            for n in ed.get("deviceNodes") or ():
                devices.append({"path": n["path"], "type": "c", "major": n["major"],
                                "minor": n.get("minor", 0), "fileMode": n.get("fileMode", 0o666),
                                "uid": 0, "gid": 0})
                rules.append({"allow": True, "type": "c", "major": n["major"],
                              "minor": n.get("minor", 0), "access": "rwm"})
            for h in ed.get("hooks") or ():
                hooks.append(self.hook(stack, h, len(hooks)))
        linux["devices"] = devices
        doc["hooks"] = {"createContainer": hooks} if stack != "none" else {}
        return doc

    def hook(self, stack: str, h: dict[str, Any], index: int) -> dict[str, object]:
        args = list(h["args"])
        env = list(h.get("env") or ())
        prefix = self.prefix
        if stack.startswith("solo"):  # each hook its own work: environments that differ
            env.append(f"NVHOOK_BENCH_HOOK={index}")
            prefix = self.ldconfig_prefix if stack == "solo-ldconfig" else prefix
        if stack == "floor":  # the bare interpreter, as nvhook's launchers start it
            return {"path": str(self.wrapper), "args": [
                "hookwrap", launcher_python(), "python3", "-IS", "-c", "pass", args[1]],
                "env": env}  # the label: "pass"
        if stack == "nvidia":
            return {"path": str(self.wrapper), "args": ["hookwrap", str(PEER_HOOK), *args],
                    "env": env}
        if stack == "baseline" and self.baseline is not None:
            name = "nvidia-ctk" if self.jit_cdi else "nvidia-cdi-hook"
            words = ["hook", *args[1:]] if self.jit_cdi else args[1:]
            return {"path": str(self.wrapper), "args": [
                "hookwrap", str(self.baseline / name), name, *words], "env": env}
        if self.jit_cdi:
            return {"path": str(prefix / "nvidia-ctk"),
                    "args": ["nvidia-ctk", "hook", *args[1:]], "env": env}
        return {"path": str(prefix / "nvidia-cdi-hook"), "args": args, "env": env}

    def run(self, stack: str) -> tuple[float, float, list[tuple[str, float, float]]]:
        self.count += 1
        bundle = self.work / f"b{self.count}"
        record = self.record
        record.unlink(missing_ok=True)
        bundle.mkdir()
        copy_rootfs(self.rootfs, bundle / "rootfs")
        (bundle / "config.json").write_text(json.dumps(self.config(stack)))
        argv = [str(self.runc.binary), "--root", str(self.work / "state"), "run", "--bundle",
                str(bundle), new_container_id("cdib")]
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = (time.monotonic() - started) * 1000
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(bundle, ignore_errors=True)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"bench: {stack}: container failed: {err.strip()[-600:]}")
        hooks = []
        if record.exists():
            for i, line in enumerate(record.read_text().splitlines()):
                cpu, hwall, rc, *words = line.split()
                label = f"{i}:{hook_label(words)}"
                if rc != "0":
                    raise SystemExit(f"bench: {stack}: hook {label} exited {rc}")
                hooks.append((label, float(cpu), float(hwall)))
        return wall, (usage.ru_utime + usage.ru_stime) * 1000, hooks


def extra_libs(rootfs: Path, count: int) -> None:
    """`count` small shared libraries (own SONAMEs, SONAME links) in the image's library
    folder, and the image's ld.so.cache rebuilt with them (as a distribution image has)."""
    src = rootfs / "tmp/x.c"
    src.write_text("int nvbench_x(void) { return 1; }\n")
    libdir = rootfs / LIBS
    for i in range(count):
        name = f"libnvbench{i}.so.1"
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o",
                        str(libdir / f"{name}.0.{i}"), str(src)], check=True)
        (libdir / name).symlink_to(f"{name}.0.{i}")
    src.unlink()
    subprocess.run(["/sbin/ldconfig", "-r", str(rootfs)], check=True)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _by_index(res: dict[str, list[float]]) -> dict[int, tuple[str, list[float], list[float]]]:
    """{hook index: (name, CPU ms, wall ms)} of one stack's results."""
    out = {}
    for key, values in res.items():
        if key[:1].isdigit() and "@" not in key:
            index, name = key.split(":", 1)
            out[int(index)] = (name, values, res.get(key + "@wall", []))
    return out


COLUMNS = (("floor", "python3 -IS floor"), ("nvidia", "NVIDIA 1.20.0"),
           ("baseline", "nvhook before (--baseline)"),
           ("solo-ldconfig", "nvhook, each hook alone, ldconfig"),
           ("solo", "nvhook, each hook alone, cache writer"), ("nvhook", "nvhook"))


def report(results: dict[str, dict[str, list[float]]], load: tuple[float, float], n: int,
           jit: bool) -> str:
    cols = [(s, title) for s, title in COLUMNS if s in results]
    per = {s: _by_index(results[s]) for s, _ in cols}
    nan = float("nan")
    lines = [f"{n} rounds, load average {load[0]:.1f} -> {load[1]:.1f} (2 vCPUs shared); "
             f"nvhook as {'nvidia-ctk hook' if jit else 'nvidia-cdi-hook'}; medians of CPU ms "
             "(user + system, children included), wall ms in brackets", "",
             "| hook | " + " | ".join(t for _, t in cols) + " | nvhook / NVIDIA |",
             "|---|" + "---|" * (len(cols) + 1)]
    for i in sorted(per.get("nvhook", {})):
        cells = []
        for s, _ in cols:
            _, cpu, wall = per[s].get(i, ("", [], []))
            cells.append(f"{median(cpu):.1f} ({median(wall):.0f})")
        ratio = median(per["nvhook"][i][1]) / median(per["nvidia"][i][1]) \
            if "nvidia" in per and i in per["nvidia"] else nan
        lines.append(f"| {i}: {per['nvhook'][i][0]} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    sums = [f"**{median(results[s]['hooks']):.1f}** ({median(results[s]['hooks@wall']):.0f})"
            for s, _ in cols]
    ratio = median(results["nvhook"]["hooks"]) / median(results["nvidia"]["hooks"]) \
        if "nvidia" in results else nan
    lines.append("| **all** | " + " | ".join(sums) + f" | **{ratio:.2f}** |")
    base_w, base_c = median(results["none"]["runc@wall"]), median(results["none"]["runc"])
    lines += ["", "| `runc run` (whole start) | wall | CPU | added wall | added CPU |",
              "|---|---|---|---|---|"]
    for s in results:
        w, c = median(results[s]["runc@wall"]), median(results[s]["runc"])
        lines.append(f"| {s} | {w:.1f} | {c:.1f} | {w - base_w:.1f} | {c - base_c:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="timed rounds")
    parser.add_argument("--jit-cdi", action="store_true",
                        help="nvhook's hooks as `nvidia-ctk hook ...` (1.20's jit-cdi form)")
    parser.add_argument("--libs", type=int, default=0, help="extra libraries in the image")
    parser.add_argument("--only", choices=("nvhook",), help="skip NVIDIA's series")
    parser.add_argument("--baseline", type=Path,
                        help="also the hooks of the nvhook source tree at this path")
    parser.add_argument("--levers", action="store_true",
                        help="also nvhook with each hook alone (no group), with the cache "
                        "writer and with the sandboxed ldconfig")
    parser.add_argument("--sim-procfs", action="store_true",
                        help="nvhook's hooks with the simulated driver's procfs (its "
                        "disable-device-node-modification then mounts a procfs view)")
    parser.add_argument("--out", default=str(REPO / "bench/results"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench: must run as root")
    stacks = ["none", "floor", "nvhook"] if args.only or not os.access(PEER_HOOK, os.X_OK) \
        else ["none", "floor", "nvidia", "nvhook"]
    if args.levers:
        stacks[-1:-1] = ["solo-ldconfig", "solo"]
    if args.baseline:
        stacks[-1:-1] = ["baseline"]
    work = Path(tempfile.mkdtemp(prefix="nvcdib-"))
    os.chmod(work, 0o755)
    load0 = os.getloadavg()[0]
    try:
        bench = Bench(work, args.jit_cdi, args.libs, args.sim_procfs, args.baseline)
        results: dict[str, dict[str, list[float]]] = {s: {} for s in stacks}
        for r in range(args.runs + 1):
            for stack in stacks:
                wall, cpu, hooks = bench.run(stack)
                if not r:
                    continue
                res = results[stack]
                res.setdefault("runc@wall", []).append(wall)
                res.setdefault("runc", []).append(cpu)
                if stack != "none":
                    res.setdefault("hooks", []).append(sum(h[1] for h in hooks))
                    res.setdefault("hooks@wall", []).append(sum(h[2] for h in hooks))
                for label, hcpu, hwall in hooks:
                    res.setdefault(label, []).append(hcpu)
                    res.setdefault(label + "@wall", []).append(hwall)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    text = report(results, (load0, os.getloadavg()[0]), args.runs, args.jit_cdi)
    sys.stdout.write(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = out / time.strftime("cdihooks-%Y%m%d-%H%M%S.json")
    name.write_text(json.dumps({"load": [load0, os.getloadavg()[0]], "runs": args.runs,
                                "jit_cdi": args.jit_cdi, "libs": args.libs,
                                "results": results}, indent=1) + "\n")
    sys.stdout.write(f"\nresults: {name}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
