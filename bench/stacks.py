"""The GPU stacks of the end-to-end benchmark (bench/engines.py), against one simulated driver.

A `Stack` is a runtime executable for Docker's `runtimes` and `ctr run --runc-binary`:

- nvhook's runtime (`nvhook install --config`, the launchers a user gets) in each runtime
  mode asked for (`legacy`, `spec`, and `auto` once the config accepts it);
- NVIDIA 1.17.8 (`/opt/peer`) in legacy mode: its runtime adds its prestart hook, which runs
  nvidia-container-cli 1.17.0;
- NVIDIA 1.20.0 (`/opt/peer-1.20`) in its default mode (`auto`, which resolves to jit-cdi):
  a CDI spec made in memory from NVML, six createContainer hooks (`nvidia-ctk hook ...`).

Every runtime is started through the same two-line `sh` wrapper (NVIDIA's read their config
from XDG_CONFIG_HOME, 1.20's NVML is found through LD_LIBRARY_PATH: `../shared/tools/peer`),
so each stack pays the same exec; the benchmark measures that wrapper around plain runc too.

The simulated driver has no kernel module, so a container's /proc/driver must be made before
a legacy hook mounts its /proc/driver/nvidia view: each stack's prestart hook is a wrapper
(`hook_dir`/nvidia-container-runtime-hook, also what `docker run --gpus` finds on dockerd's
PATH) that runs the sim's `nvsim-prestart` (a small C program: setns, tmpfs, exec; ~1 ms) and
then execs the stack's real hook with the same state. A real driver needs no such step; both
legacy stacks pay it alike, and jit-cdi (no prestart hook) does not.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

PEER_117 = Path("/opt/peer")
PEER_120 = Path("/opt/peer-1.20")
PEERS = {"nvidia-1.17.8": PEER_117, "nvidia-1.20": PEER_120}  # NVIDIA's stacks: family -> prefix
HOOK_NAME = "nvidia-container-runtime-hook"


@dataclass(frozen=True)
class Stack:
    name: str  # the runtime's name in daemon.json
    label: str  # how the table names it
    family: str  # "nvhook", "nvidia-1.17.8", "nvidia-1.20"
    runtime: Path  # a runc-compatible executable
    hook_dir: Path | None = None  # holds nvidia-container-runtime-hook (docker --gpus)
    timing_log: Path | None = None  # nvhook's timing records
    config: Path | None = None  # nvhook's config.toml
    prefix: Path | None = None  # nvhook's launchers (nvhook-hook: its CDI spec's hook)


def script(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + "\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def sim_step_hook(directory: Path, sim: Path, then: list[str]) -> Path:
    """`directory`/nvidia-container-runtime-hook: the sim's /proc/driver step, then `then`."""
    step = sim / "nvsim/bin/nvsim-prestart"
    argv = " ".join(shlex.quote(a) for a in (str(step), "--with-nvidia-dir", "--then", *then))
    return script(directory / HOOK_NAME, [f'exec {argv} "$@"'])


def runtime_wrapper(path: Path, binary: Path, env: dict[str, str] | None = None) -> Path:
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return script(path, [f'{assigns + " " if assigns else ""}exec {shlex.quote(str(binary))} "$@"'])


def peer_available(prefix: Path) -> bool:
    return all((prefix / "bin" / n).is_file() for n in ("nvidia-container-runtime", HOOK_NAME,
                                                        "nvidia-ctk"))


def nvhook_stack(work: Path, sim: Path, mode: str, tag: str, launcher_python: str,
                 nvhook: Sequence[str] = ()) -> Stack:
    """nvhook installed with a config for `sim` in runtime mode `mode`, by `nvhook` (argv;
    default this checkout's: a node's is its .deb's, bench/engines_node.py)."""
    import subprocess

    from nvhook.dev.demo.driver import nvhook_command

    base = work / f"nvhook-{mode}-{tag}"
    hooks = base / "hooks"
    prefix = base / "prefix"
    timing = base / "timing.jsonl"
    text = (sim / "config.toml").read_text().replace("sim-procfs = true", "sim-procfs = false")
    text = text.replace("[nvhook]\n", f'[nvhook]\ncache-dir = "{base / "cache"}"\n'
                                      f'timing-log = "{timing}"\nruntime-mode = "{mode}"\n')
    text += f'\n[nvidia-container-runtime-hook]\npath = "{hooks / HOOK_NAME}"\n'
    config = base / "config.toml"
    base.mkdir(parents=True)
    config.write_text(text)
    proc = subprocess.run([*(nvhook or nvhook_command()), "--config", str(config), "install",
                           "--python", launcher_python, "--prefix", str(prefix)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench: nvhook install into {prefix}: {proc.stderr.strip()}")
    sim_step_hook(hooks, sim, [str(prefix / HOOK_NAME), HOOK_NAME])
    runtime = runtime_wrapper(base / "runtime", prefix / "nvidia-container-runtime")
    return Stack(f"nvhook-{mode}-{tag}", f"nvhook {mode}", "nvhook", runtime, hooks, timing,
                 config, prefix)


def nvidia117_stack(work: Path, sim: Path, tag: str) -> Stack:
    """NVIDIA 1.17.8, legacy mode: runtime -> prestart hook -> nvidia-container-cli."""
    base = work / f"nvidia-1.17.8-{tag}"
    hooks = base / "hooks"
    config = base / "xdg/nvidia-container-runtime/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"""\
[nvidia-container-cli]
path = "{PEER_117 / 'inst/bin/nvidia-container-cli'}"
root = "{sim}"
ldconfig = "@/sbin/ldconfig"
load-kmods = false

[nvidia-container-runtime]
mode = "legacy"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = ""

[nvidia-container-runtime-hook]
path = "{hooks / HOOK_NAME}"

[features]
allow-cuda-compat-libs-from-container = true
""")
    sim_step_hook(hooks, sim, [str(PEER_117 / "bin" / HOOK_NAME), HOOK_NAME, "-config",
                               str(config)])
    runtime = runtime_wrapper(base / "runtime", PEER_117 / "bin/nvidia-container-runtime",
                              {"XDG_CONFIG_HOME": str(base / "xdg")})
    return Stack(f"nvidia117-{tag}", "NVIDIA 1.17.8 legacy", "nvidia-1.17.8", runtime, hooks)


def nvidia120_stack(work: Path, sim: Path, tag: str) -> Stack:
    """NVIDIA 1.20.0 in its default mode (auto: jit-cdi here). No prestart hook."""
    base = work / f"nvidia-1.20-{tag}"
    config = base / "xdg/nvidia-container-runtime/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"""\
[nvidia-container-cli]
path = "{PEER_120 / 'inst/bin/nvidia-container-cli'}"
root = "{sim}"
ldconfig = "@/sbin/ldconfig"
load-kmods = false

[nvidia-container-runtime]
mode = "auto"

[nvidia-ctk]
path = "{PEER_120 / 'bin/nvidia-ctk'}"
""")
    runtime = runtime_wrapper(base / "runtime", PEER_120 / "bin/nvidia-container-runtime",
                              {"XDG_CONFIG_HOME": str(base / "xdg"),
                               "LD_LIBRARY_PATH": str(sim / "usr/lib/x86_64-linux-gnu")})
    return Stack(f"nvidia120-{tag}", "NVIDIA 1.20.0 jit-cdi", "nvidia-1.20", runtime)


def all_stacks(work: Path, sim: Path, tag: str, modes: list[str], launcher_python: str,
               nvhook: Sequence[str] = (), unusable: Collection[str] | None = None) -> list[Stack]:
    """nvhook in each mode, then NVIDIA's stacks that are built here and not `unusable`
    (families that cannot run on the benchmark's node: bench/engines_node.py)."""
    stacks = [nvhook_stack(work, sim, m, tag, launcher_python, nvhook) for m in modes]
    if unusable is None:
        unusable = [f for f, p in PEERS.items() if not peer_available(p)]
    if "nvidia-1.17.8" not in unusable:
        stacks.append(nvidia117_stack(work, sim, tag))
    if "nvidia-1.20" not in unusable:
        stacks.append(nvidia120_stack(work, sim, tag))
    return stacks


def runc_wrapper(work: Path) -> Path:
    """Plain runc through the same sh wrapper: what the wrapper itself costs."""
    return runtime_wrapper(work / "runc-sh" / "runtime", Path("/usr/sbin/runc"))


def nvhook_modes() -> list[str]:
    """The runtime modes this nvhook accepts: legacy and spec, plus auto once it exists."""
    from nvhook.config.model import RUNTIME_MODES

    return [m for m in ("legacy", "spec", "auto") if m in RUNTIME_MODES]
