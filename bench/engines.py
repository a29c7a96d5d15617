"""End-to-end benchmark: `docker run` and `ctr run` through nvhook's and NVIDIA's stacks.

    sudo .venv/bin/python bench/run.py --engines [-n 20]
        [--scenarios main,slow-nvml,large-image,persist-nvml] [--clients docker,ctr,cri,podman]
        [--modes legacy,spec] [--node host|sid|trixie]

On `--node` (bench/engines_node.py: this host's Debian 12 engines, or a Debian node's today's
ones), starts private daemons (tests/fixtures/clientrig: dockerd and containerd, own data
roots and sockets, loopback only, stopped by pid): dockerd A with every stack as a runtime
and nvhook's hook on its PATH (`docker run --gpus`), dockerd B with NVIDIA 1.17.8's hook on
its PATH (its `--gpus` series), one containerd for `ctr run --runc-binary`. The demo rootfs
is imported as an image (and, for the large-image scenario, a copy with 1,000 libraries in
20 directories: nvhook.dev.sim.image). Every series runs once per round, round-robin, after a
warm-up round; a run is `docker run --rm --network none IMG /bin/true` (or `ctr run --rm`).
Wall: the client command. CPU: the client's rusage plus the daemon side (the cpuacct usage of
a private cgroup holding the daemon, its shims, the runtime calls and hooks, plus the daemon's
cgroup parent of containers, where `runc init` runs createContainer hooks), read once the
runtime's last call (delete) is done. `--clients cri` (bench/engines_cri.py) and `podman`
(CDI: bench/engines_cdi.py) add their series; `check` runs each series once with a probe
before the timing. "Added" = a series' median minus its client's (and
daemon's) plain-runc median in the same run. Scenarios (bench/stacks.py for the stacks):

- main: 8 simulated GPUs; per stack a non-GPU container, GPU 0 and all 8 through the runtime
  (NVIDIA_VISIBLE_DEVICES and the other variables of a CUDA 12 image: NVIDIA_REQUIRE_CUDA,
  CUDA_VERSION, NVIDIA_DRIVER_CAPABILITIES=compute,utility; nvhook.dev.demo.bundle.CUDA_IMAGE_ENV),
  `docker run --gpus device=0|all` (hook only), and runc through the stacks' sh wrapper;
- slow-nvml (modelled): 1 GPU without persistence mode: the fake NVML's first nvmlInit in a
  process waits 1,000 ms (`--nvml-delay`; NVIDIA documents 1-3 s per GPU for a GPU that is not
  kept initialised, "Driver Persistence", and its hard 10 s driver RPC timeout is the
  "driver rpc error: timed out" users hit); GPU 0 per stack, a start after the first;
- persist-nvml (modelled, not in the default set): 8 GPUs in persistence mode: each process's
  first nvmlInit still costs 40 ms per GPU (`--persist-delay`; from NVIDIA/mig-parted#332:
  ~42 s of CPU for 68-100 NVML Init/Shutdown cycles on an 8-GPU DGX B300, 0.3-0.5 s a cycle,
  docs/performance.md); GPU 0 and all 8 per stack;
- large-image (modelled): GPU 0 per stack on the image with 1,000 libraries.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import stacks as S
from engines_node import NODES

from nvhook.dev.demo.bundle import CUDA_IMAGE_ENV

# a CUDA image's GPU variables (its NVIDIA_REQUIRE_CUDA checked by every stack), the image's
# own PATH kept; NVIDIA_VISIBLE_DEVICES per series (`gpu_env`)
GPU_ENV = tuple(e for e in CUDA_IMAGE_ENV if not e.startswith(("PATH=", "NVIDIA_VISIBLE_DEVICES=")))
IMAGE, LARGE = "nvhook.bench/demo:latest", "nvhook.bench/large:latest"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


@dataclass
class Series:
    row: str  # table row ("main | GPU 0 | nvhook legacy")
    client: str  # "docker", "docker-B" (NVIDIA's --gpus daemon) or "ctr"
    argv: Callable[[], list[str]]
    env: dict[str, str]
    group: CpuGroup
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    failures: int = 0
    error: str = ""
    grouped: bool = False  # the client itself runs in `group` (podman): its rusage is in it
    check: str = ""  # why the container did not get what its row says (`check`), "" if it did
    # an in-process client (CRI): runs the container's command, (ok, error); argv unused
    call: Callable[[tuple[str, ...]], tuple[bool, str]] | None = None


class CpuGroup:
    """A private cpuacct cgroup for a daemon and everything it starts (shims, runtimes,
    hooks): CPU time of the daemon side of a run."""

    def __init__(self, name: str, containers: str = "") -> None:
        self.path = CPUACCT / name
        self.path.mkdir()
        self.baseline = 0
        # the daemon's cgroup parent for containers: `runc init` joins the container's cgroup
        # before it runs createContainer hooks (NVIDIA 1.20's six), so their CPU is there
        self.containers = CPUACCT / containers if containers else None

    def adopt(self, pid: int) -> None:
        from tests.fixtures.clientrig.process import descendants

        for p in (pid, *descendants(pid)):
            (self.path / "cgroup.procs").write_text(str(p))
        self.baseline = len(self.procs())

    def procs(self) -> list[str]:
        """The processes in the group and below it (podman's conmon and containers)."""
        return [p for f in self.path.rglob("cgroup.procs") for p in f.read_text().split()]

    def usage_ns(self) -> int:
        """The group's CPU and its daemon's containers' (v1 cpuacct counts a removed child's
        usage in its parent)."""
        total = int((self.path / "cpuacct.usage").read_text())
        if self.containers is not None and (self.containers / "cpuacct.usage").exists():
            total += int((self.containers / "cpuacct.usage").read_text())
        return total

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until only the daemon's own processes are left (the last runtime call done)."""
        deadline = time.monotonic() + timeout
        while len(self.procs()) > self.baseline and time.monotonic() < deadline:
            time.sleep(0.005)

    def remove(self) -> None:
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.05)


TRUE = ("/bin/true",)


def run_once(s: Series, command: tuple[str, ...] = TRUE) -> tuple[bool, float, float, str]:
    """(ok, wall ms, CPU ms, error tail) of one client command running `command` in the
    container (the series' argv ends with /bin/true: replaced)."""
    if s.call is not None:
        return _call_once(s, command)
    with tempfile.TemporaryFile() as err:
        return _run_once(s, err, command)


def _run_once(s: Series, err: IO[bytes],
              command: tuple[str, ...]) -> tuple[bool, float, float, str]:
    s.group.settle()
    before = s.group.usage_ns()
    start = time.monotonic()
    argv = s.argv()
    argv = [*argv[:-1], *command] if argv[-1] == TRUE[0] else argv
    pid = os.posix_spawn(argv[0], argv, s.env, file_actions=[
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_DUP2, err.fileno(), 2)])
    _, status, usage = os.wait4(pid, 0)
    wall = (time.monotonic() - start) * 1000
    s.group.settle()
    cpu = (s.group.usage_ns() - before) / 1e6
    if not s.grouped:
        cpu += (usage.ru_utime + usage.ru_stime) * 1000
    err.seek(0)
    detail = err.read().decode(errors="replace").strip()[-600:]
    return os.waitstatus_to_exitcode(status) == 0, wall, cpu, detail


def _call_once(s: Series, command: tuple[str, ...]) -> tuple[bool, float, float, str]:
    """An in-process client (CRI: bench/engines_cri.py): its CPU is this process's (the gRPC
    calls and their threads) over the call, plus the daemon side."""
    assert s.call is not None
    s.group.settle()
    before, mine = s.group.usage_ns(), resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    ok, detail = s.call(command)
    wall = (time.monotonic() - start) * 1000
    s.group.settle()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (s.group.usage_ns() - before) / 1e6 + (
        after.ru_utime - mine.ru_utime + after.ru_stime - mine.ru_stime) * 1000
    return ok, wall, cpu, detail


LIB = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def probe(row: str) -> str:
    """The shell test a container of `row` passes when it got what the row says: no GPU
    node without a GPU; GPU 0's node (and not GPU 1's) or GPU 7's, and NVML, with GPUs."""
    kind = row.split(" | ")[1]
    if kind == "no GPU":
        return "! test -e /dev/nvidia0"
    nodes = "test -e /dev/nvidia0 && ! test -e /dev/nvidia1" if kind == "GPU 0" else \
        "test -e /dev/nvidia0 && test -e /dev/nvidia7"
    return f"{nodes} && test -e {LIB}"


def check(series: list[Series], log: Callable[[str], None]) -> None:
    """Each series once with `probe` instead of /bin/true: a stack that starts containers
    without their GPUs (or gives GPUs to a plain one) is named, not timed as if it worked."""
    for s in series:
        test = probe(s.row)
        ok, _, _, detail = run_once(s, ("/bin/sh", "-c", test))
        if not ok:
            s.check = f"`{test}` failed: {detail[-200:]}"
            log(f"check: {s.row} ({s.client}): {s.check}")


def measure(series: list[Series], rounds: int, log: Callable[[str], None]) -> None:
    """A warm-up round, then `rounds` rounds of every series, round-robin."""
    for r in range(rounds + 1):
        for s in series:
            ok, wall, cpu, detail = run_once(s)
            if not ok:
                s.failures += 1
                s.error = detail
                continue
            if r:
                s.wall_ms.append(wall)
                s.cpu_ms.append(cpu)
        log(f"round {r}/{rounds} done, load {os.getloadavg()[0]:.1f}")


@dataclass
class Rig:
    """The daemons, their cgroups and images; `close` stops and removes everything."""

    work: Path
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        while self.closers:
            try:
                self.closers.pop()()
            except Exception as err:  # keep cleaning; report
                print(f"bench: cleanup: {err}")


def start_docker(rig: Rig, name: str, runtimes: dict[str, Path], path_dir: Path | None,
                 images: dict[str, Path], enter: tuple[str, ...] = ()) -> tuple[object, CpuGroup]:
    """A private dockerd (on the node `enter` runs commands on: bench/engines_node.py)."""
    from tests.fixtures.clientrig.docker import DockerDaemon
    from tests.fixtures.clientrig.host import remove_cgroup_tree
    from tests.fixtures.clientrig.process import unique_name

    daemon = DockerDaemon(rig.work / name, settings={"runtimes": {
        k: {"path": str(v)} for k, v in runtimes.items()}},
        extra_path=(path_dir,) if path_dir else (), enter=enter)
    group = CpuGroup(unique_name(f"nvhook-bench-{name}"), daemon.cgroup_parent)
    rig.closers += [lambda: remove_cgroup_tree(daemon.cgroup_parent), group.remove, daemon.stop]
    daemon.start()
    group.adopt(daemon._daemon.pid)  # type: ignore[union-attr]
    for ref, rootfs in images.items():
        daemon.import_rootfs(rootfs, ref)
    return daemon, group


def start_containerd(rig: Rig, images: dict[str, Path],
                     enter: tuple[str, ...] = ()) -> tuple[object, CpuGroup]:
    from tests.fixtures.clientrig.containerd import ContainerdDaemon
    from tests.fixtures.clientrig.host import remove_cgroup_tree
    from tests.fixtures.clientrig.process import unique_name

    daemon = ContainerdDaemon(rig.work / "containerd", enter=enter)
    group = CpuGroup(unique_name("nvhook-bench-ctrd"), daemon.namespace)
    rig.closers += [lambda: remove_cgroup_tree(daemon.namespace), group.remove, daemon.stop]
    daemon.start()
    group.adopt(daemon._daemon.pid)  # type: ignore[union-attr]
    for ref, rootfs in images.items():
        daemon.import_rootfs(rootfs, ref)
    return daemon, group


def docker_series(daemon: object, group: CpuGroup, client: str, row: str, opts: list[str],
                  env: tuple[str, ...], image: str) -> Series:
    from tests.fixtures.clientrig.docker import DOCKER
    from tests.fixtures.clientrig.process import clean_env

    d: object = daemon
    argv = [*d.enter, str(DOCKER), "-H", f"unix://{d.socket}",  # type: ignore[attr-defined]
            "run", "--rm",
            "--network", "none", *opts, *(a for e in env for a in ("-e", e)), image,
            "/bin/true"]
    cli_env = clean_env(d.workdir, DOCKER_CONFIG=str(d.workdir / "cli"))  # type: ignore[attr-defined]
    return Series(row, client, lambda: argv, cli_env, group)


def ctr_series(daemon: object, group: CpuGroup, row: str, runtime: Path | None,
               env: tuple[str, ...], image: str) -> Series:
    from tests.fixtures.clientrig.containerd import CTR
    from tests.fixtures.clientrig.process import clean_env, unique_name

    d: object = daemon
    w = d.workdir  # type: ignore[attr-defined]
    head = [*d.enter, str(CTR), "--address", str(d.socket),  # type: ignore[attr-defined]
            "--namespace",
            d.namespace, "run", "--rm", "--runc-root", str(w / "runc"),  # type: ignore[attr-defined]
            "--fifo-dir", str(w / "fifo"), *(["--runc-binary", str(runtime)] if runtime else []),
            *(a for e in env for a in ("--env", e)), image]
    return Series(row, "ctr", lambda: [*head, unique_name("bench"), "/bin/true"],
                  clean_env(w), group)


def gpu_env(devices: str | None) -> tuple[str, ...]:
    return () if devices is None else (f"NVIDIA_VISIBLE_DEVICES={devices}", *GPU_ENV)


def client_rows(ctx: dict[str, tuple[object, CpuGroup]], row: str, name: str,
                runtime: Path | None, env: tuple[str, ...], image: str) -> list[Series]:
    """One series of `row` per client in `ctx`: the runtime `name` (docker's runtime, CRI's
    handler; "" for plain runc) at `runtime` (ctr's --runc-binary; None for plain runc)."""
    out = []
    if "docker" in ctx:
        daemon, group = ctx["docker"]
        out.append(docker_series(daemon, group, "docker", row,
                                 ["--runtime", name] if name else [], env, image))
    if "ctr" in ctx:
        daemon, group = ctx["ctr"]
        out.append(ctr_series(daemon, group, row, runtime, env, image))
    if "cri" in ctx and image == IMAGE:  # the CRI node has the demo image only
        from engines_cri import cri_series

        out.append(cri_series(*ctx["cri"], row, name, env))
    return out


def stack_rows(scenario: str, stacks: list[S.Stack], kinds: list[tuple[str, str | None]],
               image: str, ctx: dict[str, tuple[object, CpuGroup]]) -> list[Series]:
    """Series for each stack through the runtime: `kinds` are (row name, devices)."""
    return [s for kind, devices in kinds for st in stacks
            for s in client_rows(ctx, f"{scenario} | {kind} | {st.label}", st.name, st.runtime,
                                 gpu_env(devices), image)]


def base_rows(scenario: str, image: str, ctx: dict[str, tuple[object, CpuGroup]],
              runc_sh: Path | None = None) -> list[Series]:
    out = client_rows(ctx, f"{scenario} | no GPU | runc (base)", "", None, (), image)
    if runc_sh is not None:
        out += client_rows(ctx, f"{scenario} | no GPU | runc through the sh wrapper", "runc-sh",
                           runc_sh, (), image)
    return out


def gpus_rows(ctx: dict[str, tuple[object, CpuGroup]], nvidia: bool) -> list[Series]:
    """`docker run --gpus` (hook only): nvhook's hook on dockerd A, NVIDIA's on dockerd B."""
    out = []
    for label, client in (("nvhook", "docker"), ("NVIDIA 1.17.8", "docker-B")):
        if client not in ctx or (client == "docker-B" and not nvidia):
            continue
        d, g = ctx[client]
        if client == "docker-B":
            out.append(docker_series(d, g, client, "main | no GPU | runc (base)", [], (), IMAGE))
        for kind, gpus in (("GPU 0", "device=0"), ("all 8 GPUs", "all")):
            out.append(docker_series(d, g, client, f"main | {kind} | --gpus, {label} hook",
                                     ["--gpus", gpus], GPU_ENV, IMAGE))
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run.py --engines",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="timed rounds")
    parser.add_argument("--scenarios", default="main,slow-nvml,large-image")
    parser.add_argument("--clients", default="docker,ctr")
    parser.add_argument("--modes", default="", help="nvhook runtime modes (default: every "
                        "mode this nvhook accepts: legacy, spec, auto)")
    parser.add_argument("--nvml-delay", type=int, default=1000, metavar="MS",
                        help="slow-nvml: NVML init delay per GPU (default 1000)")
    parser.add_argument("--persist-delay", type=int, default=40, metavar="MS",
                        help="persist-nvml: NVML init cost per GPU with persistence on "
                        "(default 40)")
    parser.add_argument("--libraries", type=int, default=1000, help="large image: libraries")
    parser.add_argument("--node", default="host", choices=NODES,
                        help="where the engines run: host (Debian 12's), or a Debian node's "
                        "root with today's engines (sid: Docker 28.5, containerd 2.1, runc "
                        "1.3; trixie: Docker 26.1, containerd 1.7): bench/engines_node.py")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return parser.parse_args(argv)
