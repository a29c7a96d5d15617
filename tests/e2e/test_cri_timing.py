"""A GPU pod's container start through CRI: nvhook against NVIDIA's runtimes, in one run.

    NVHOOK_LONG=1 .venv/bin/python -m pytest tests/e2e/test_cri_timing.py -o log_cli=true \\
        --log-cli-level=INFO                                   (about 1-2 minutes; figures only)

One private containerd 1.6 with CRI (Debian's stock config) gets these runtime handlers, all
against the same simulated driver (8 GPUs), each pod asking for one GPU by UUID
(NVIDIA_VISIBLE_DEVICES, the device plugin's envvar strategy), rounds interleaved:

    runc          no GPU: the floor
    nvhook        nvhook's wrapper, legacy mode (the hook mounts the sim's procfs itself)
    nvhook-spec   nvhook's wrapper, runtime-mode = "spec"
    sim-step      runc behind a wrapper that only adds the simulated procfs prestart step
    nvidia-1.17.8 /opt/peer's nvidia-container-runtime (legacy: its hook + nvidia-container-cli),
                  behind the same step wrapper (the sim's procfs: /work/shared/tools/peer)
    nvidia-1.20.0 /opt/peer-1.20's runtime, mode auto = jit-cdi (no prestart hook, no step)

Logged per handler: the medians of StartContainer (runc create and start of the GPU container:
every hook runs in it), of the whole pod (RunPodSandbox .. RemovePodSandbox; the pause
container and the shim's runc calls pass through the handler's binary too), and of the pod's
CPU time in containerd's cgroup (containerd, the shims, runc, the wrappers and hooks; the
containers themselves are elsewhere). NVIDIA 1.17.8's own cost is its figure minus sim-step's.
Figures, not assertions: each handler must only give the pod its GPU node. Skipped unless
NVHOOK_LONG=1 and NVIDIA's stacks are built (/opt/peer*).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import sys
from pathlib import Path

import pytest

from nvhook.dev.demo.driver import sim_prestart_entry
from tests.fixtures.cri import DEBIAN_STOCK, CriNode, CriNodes
from tests.fixtures.gpu_clients import GpuInstall

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("NVHOOK_LONG") != "1",
                                 reason="long variant (NVHOOK_LONG=1)")]
log = logging.getLogger(__name__)
PEER_1_17, PEER_1_20 = Path("/opt/peer"), Path("/opt/peer-1.20")
ROUNDS = 12
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STEP_WRAPPER = """#!/usr/bin/python3 -IS
# a runtime wrapper for the timing test: on create, the simulated procfs step goes first into
# hooks.prestart (then NVIDIA's hook with its config: the runtime keeps a hook already there),
# then {runtime} runs (with XDG_CONFIG_HOME for NVIDIA's config)
import json, os, sys
args = sys.argv[1:]
if "create" in args and "--bundle" in args:
    path = os.path.join(args[args.index("--bundle") + 1], "config.json")
    with open(path) as f:
        spec = json.load(f)
    spec.setdefault("hooks", {{}}).setdefault("prestart", [])[:0] = {hooks}
    with open(path, "w") as f:
        json.dump(spec, f)
os.environ["XDG_CONFIG_HOME"] = {xdg!r}
os.execv({runtime!r}, [{runtime!r}, *args])
"""
ENV_WRAPPER = """#!/bin/sh
export XDG_CONFIG_HOME={xdg} LD_LIBRARY_PATH={lib}
exec {runtime} "$@"
"""


def peer_config(sim: str, peer: Path, mode: str) -> str:
    return f"""[nvidia-container-cli]
path = "{PEER_1_17}/inst/bin/nvidia-container-cli"
root = "{sim}"
ldconfig = "@/sbin/ldconfig"
load-kmods = false

[nvidia-container-runtime]
mode = "{mode}"
runtimes = ["/usr/sbin/runc"]

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = ""

[nvidia-container-runtime-hook]
path = "{peer}/bin/nvidia-container-runtime-hook"

[nvidia-ctk]
path = "{peer}/bin/nvidia-ctk"

[features]
allow-cuda-compat-libs-from-container = true
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def handlers(work: Path, install: GpuInstall) -> dict[str, Path]:
    sim = install.sim.path
    step = sim_prestart_entry(Path(install.sim.config_path),
                              install.prefix / "nvhook-hook").to_json()
    step["args"] = [*step["args"], "--with-nvidia-dir"]  # type: ignore[misc]  # NVIDIA's CLI
    out = {"nvhook": install.prefix / "nvidia-container-runtime",
           "nvhook-spec": install.spec_prefix / "nvidia-container-runtime",
           "sim-step": write(work / "sim-step", STEP_WRAPPER.format(
               hooks=json.dumps([step]), runtime="/usr/sbin/runc", xdg=str(work)))}
    for name, peer, mode in (("nvidia-1.17.8", PEER_1_17, "legacy"),
                             ("nvidia-1.20.0", PEER_1_20, "auto")):
        xdg = work / name
        config = write(xdg / "nvidia-container-runtime" / "config.toml",
                       peer_config(sim, peer, mode))
        runtime = str(peer / "bin" / "nvidia-container-runtime")
        hook = {"path": f"{peer}/bin/nvidia-container-runtime-hook", "env": [PATH],
                "args": ["nvidia-container-runtime-hook", "-config", str(config), "prestart"]}
        out[name] = write(work / f"{name}-runtime", STEP_WRAPPER.format(
            hooks=json.dumps([step, hook]), runtime=runtime, xdg=str(xdg)) if mode == "legacy"
            else ENV_WRAPPER.format(xdg=xdg, lib=f"{sim}/usr/lib/x86_64-linux-gnu",
                                    runtime=runtime))
    return out


def daemon_cpu_cgroup(node: CriNode) -> Path:
    """A cpuacct cgroup holding containerd (and so its shims, runc, the runtime wrappers and
    the hooks they run; not the containers, which runc moves to the pods' cgroups)."""
    assert node._daemon is not None
    path = Path("/sys/fs/cgroup/cpuacct") / node.cgroup / "daemon"
    path.mkdir(parents=True)
    (path / "cgroup.procs").write_text(str(node._daemon.pid))
    return path


@pytest.mark.skipif(not all(os.access(p / "bin/nvidia-container-runtime", os.X_OK)
                            for p in (PEER_1_17, PEER_1_20)), reason="needs /opt/peer*")
def test_gpu_pod_start_through_cri(cri_nodes: CriNodes, gpu_install: GpuInstall,
                                   tmp_path: Path) -> None:
    node = cri_nodes.new(DEBIAN_STOCK)
    paths = handlers(gpu_install.prefix.parent / "timing", gpu_install)
    for name, path in paths.items():
        proc = node.configure(f"--runtime-name={name}", f"--runtime-path={path}")
        assert proc.returncode == 0, proc.stderr
    node.start()
    node.import_images()
    cpu = daemon_cpu_cgroup(node)
    uuid = gpu_install.sim.gpus[1].uuid
    probe = ["sh", "-c", "ls /dev | grep -E '^nvidia[0-9]+$' || true"]
    starts: dict[str, list[float]] = {"runc": [], **{n: [] for n in paths}}
    pods: dict[str, list[float]] = {n: [] for n in starts}
    cpus: dict[str, list[float]] = {n: [] for n in starts}
    for i in range(ROUNDS + 1):
        for name in starts:
            used = int((cpu / "cpuacct.usage").read_text())
            result = node.run_pod(node.pod(probe, handler=name,
                                           envs={"NVIDIA_VISIBLE_DEVICES": uuid}))
            cpus[name].append((int((cpu / "cpuacct.usage").read_text()) - used) / 1e9)
            want = "" if name in ("runc", "sim-step") else "nvidia1\n"
            assert (result.exit_code, result.output) == (0, want), f"{name}: {result.describe()}"
            if i:  # round 0 warms up
                starts[name].append(result.seconds["StartContainer"])
                pods[name].append(sum(result.seconds.values()))
    lines = [f"{'handler':14} {'StartContainer':>15} {'whole pod':>10} {'pod CPU':>8}  (median "
             f"ms, {ROUNDS} rounds, load {os.getloadavg()[0]:.1f}, Python "
             f"{sys.version.split()[0]})"]
    for name in starts:
        lines.append(f"{name:14} {statistics.median(starts[name]) * 1000:15.0f} "
                     f"{statistics.median(pods[name]) * 1000:10.0f} "
                     f"{statistics.median(cpus[name][1:]) * 1000:8.0f}")
    log.info("GPU pod through CRI:\n%s", "\n".join(lines))
