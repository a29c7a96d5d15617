"""GPU access that survives `systemctl daemon-reload` (issue 30), with a real systemd.

Debian sid's systemd 262 boots as PID 1 of a private machine (tests/fixtures/systemd_rig.py:
pid, mount, cgroup, network namespaces; cgroup v2 only inside) with Docker 28.5, containerd
2.1 and runc 1.3 on the systemd cgroup driver. One long-running container per path, each given
another simulated GPU:

    gpus     `docker run --gpus device=N` (Docker's prestart hook: nvhook's hook)
    auto     `--runtime=nvidia` (nvhook's wrapper, mode auto: the devices in config.json)
    legacy   `--runtime=nvidia-legacy` (the wrapper, runtime-mode = "legacy": nvhook's hook)
    cdi      `--device nvidia.com/gpu=N` (Docker's CDI; the spec from `nvhook cdi generate`)
    ctr      containerd's `ctr run --gpus N --runc-systemd-cgroup` (its prestart hook runs
             nvhook's nvidia-container-cli drop-in; `--cpu-shares 0`: this VM's cpu controller
             is on v1, so the machine's cgroup2 has no cpu.weight)
    nvidia   `--runtime=nvidia-ref`: NVIDIA 1.20.0's runtime in legacy mode, its hook and
             nvidia-container-cli 1.17.0 (/opt/peer-1.20, ../shared/tools/peer/build.sh), the
             reference for the problem; skipped with the reason when it is not built.

Each container makes nodes for every GPU and nvidiactl (mknod is allowed: `c *:* m`) and opens
them: its own GPU and nvidiactl give ENXIO (the cgroup allows them, no driver behind the
simulated major), the other GPUs EPERM (the cgroup denies them). The same after two
`systemctl daemon-reload`s for every nvhook path; NVIDIA's legacy hook loses its GPU (EPERM),
as its users report (NVIDIA/nvidia-container-toolkit#48). The hook paths' scopes hold the
GPU's /dev/char entry in DeviceAllow= (`systemctl show`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvhook.dev.demo.rootfs import RootfsFlavor, build_rootfs
from nvhook.dev.sim import SimRoot, SimSpec, create_sim_root
from tests.fixtures.clientrig.image import write_docker_archive, write_rootfs_tar
from tests.fixtures.gpu_clients import nvhook
from tests.fixtures.systemd_rig import Machine, host_ready, interpreter_binds

pytestmark = [pytest.mark.root, pytest.mark.systemd_reload]

REPO = Path(__file__).resolve().parents[2]
PEER = Path("/opt/peer-1.20")
PYTHON = os.path.realpath(sys.executable)  # the launchers' interpreter, bound into the machine
IMAGE = "nvhook.test/bb:1"
# path -> (GPU index, docker run flags)
PATHS = {"gpus": (0, ["--gpus", "device=0"]),
         "auto": (1, ["--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1"]),
         "legacy": (2, ["--runtime=nvidia-legacy", "-e", "NVIDIA_VISIBLE_DEVICES=2"]),
         "cdi": (3, ["--device", "nvidia.com/gpu=3"]),
         "nvidia": (4, ["--runtime=nvidia-ref", "-e", "NVIDIA_VISIBLE_DEVICES=4"]),
         "ctr": (5, [])}
# where nvhook's hook writes the rules (and registers them), and the container's scope
HOOK_PATHS = {"gpus": "docker-{id}.scope", "legacy": "docker-{id}.scope",
              "ctr": "ctr-c-ctr.scope"}
CTR = "ctr -n default"
CTR_RUN = (f"{CTR} run -d --cpu-shares 0 --runc-systemd-cgroup --cgroup system.slice:ctr:c-ctr "
           f"--gpus 5 docker.io/{IMAGE} c-ctr sleep 100000")


def probe_script(minors: list[int]) -> str:
    """For each minor: `<minor> ENXIO|ENODEV|EPERM|...` from opening c 195:<minor>."""
    return ("for m in " + " ".join(map(str, minors)) + "; do "
            "[ -e /tmp/n$m ] || mknod /tmp/n$m c 195 $m || { echo \"$m nomknod\"; continue; }; "
            "out=$(cat /tmp/n$m 2>&1 </dev/null) && { echo \"$m ok\"; continue; }; "
            "case \"$out\" in *'not permitted'*) echo \"$m EPERM\";; "
            "*'No such device or address'*) echo \"$m ENXIO\";; "
            "*'No such device'*) echo \"$m ENODEV\";; *) echo \"$m other: $out\";; esac; done")


@dataclass
class Rig:
    machine: Machine
    sim: SimRoot
    share: Path
    peer: str  # "" when NVIDIA's stack is built, else why it is skipped
    execs: int = 0


HYBRID = ("this VM keeps its v1 controllers (devices included) in the host's hierarchies, so "
          "/proc/PID/cgroup has a devices line, and libnvidia-container then takes the machine "
          "for cgroup v1 (nvcgo GetDeviceCGroupVersion); NVIDIA's hook and CLI see the v2 line "
          "alone (a bind in their own mount namespace), as on a cgroup-v2-only host")


def _nvidia_ref(share: Path, sim: SimRoot, legacy_prefix: Path) -> None:
    """NVIDIA 1.20.0's runtime (mode legacy) behind a wrapper that points XDG_CONFIG_HOME at
    its config; its hook behind a script that first runs the simulator's procfs step."""
    ref = share / "nvref"
    (ref / "nvidia-container-runtime").mkdir(parents=True)
    config = ref / "nvidia-container-runtime/config.toml"
    config.write_text(f"""\
[nvidia-container-cli]
debug = "/run/nvref-cli.log"
path = "{PEER}/inst/bin/nvidia-container-cli"
root = "{sim.path}"
ldconfig = "@/sbin/ldconfig"
load-kmods = false

[nvidia-container-runtime]
mode = "legacy"
runtimes = ["runc"]

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = ""

[nvidia-container-runtime-hook]
path = "{ref}/hook.sh"

[features]
allow-cuda-compat-libs-from-container = true
""")
    hook = ref / "hook.sh"
    hook.write_text(f"""#!/bin/sh
exec 2>>/run/nvref-hook.log; set -x
state=$(cat)
printf '%s' "$state" | {legacy_prefix}/nvhook-hook --config {sim.config_path} sim prestart \
  --with-nvidia-dir || exit 1
# {HYBRID}
pid=$(printf '%s' "$state" | sed -n 's/.*"pid": *\\([0-9][0-9]*\\).*/\\1/p')
grep '^0::' /proc/$pid/cgroup > /run/nvref-cgroup.$pid || exit 1
printf '%s' "$state" | exec unshare -m sh -c "mount --bind /run/nvref-cgroup.$pid \
  /proc/$pid/cgroup && exec {PEER}/bin/nvidia-container-runtime-hook -config {config} prestart"
""")
    runtime = ref / "runtime.sh"
    runtime.write_text(f"#!/bin/sh\nXDG_CONFIG_HOME={ref} exec "
                       f"{PEER}/bin/nvidia-container-runtime \"$@\"\n")
    for script in (hook, runtime):
        script.chmod(0o755)


def _install(share: Path, name: str, config_text: str) -> Path:
    config = share / f"{name}.toml"
    config.write_text(config_text)
    prefix = share / name
    proc = nvhook("--config", str(config), "install", "--python", PYTHON, "--prefix",
                  str(prefix))
    assert proc.returncode == 0, proc.stderr
    return prefix


def _prepare(share: Path, machine: Machine) -> tuple[SimRoot, str]:
    sim = create_sim_root(share / "sim", SimSpec(gpus=8), cache_dir=share / "sim-cache")
    os.chmod(share / "sim", 0o755)
    text = Path(sim.config_path).read_text()  # ends in its [nvhook] table
    auto = _install(share, "auto", text)
    legacy = _install(share, "legacy", text + 'runtime-mode = "legacy"\n')
    runtimes = {"nvidia": {"path": f"{auto}/nvidia-container-runtime"},
                "nvidia-legacy": {"path": f"{legacy}/nvidia-container-runtime"}}
    peer = ""
    if os.access(PEER / "bin/nvidia-container-runtime-hook", os.X_OK) and \
            os.access(PEER / "inst/bin/nvidia-container-cli", os.X_OK):
        _nvidia_ref(share, sim, legacy)
        runtimes["nvidia-ref"] = {"path": f"{share}/nvref/runtime.sh"}
    else:
        peer = (f"NVIDIA 1.20.0 is not built in {PEER} (../shared/tools/peer/README.md: "
                "TK_REF=v1.20.0 with GO_VERSION=1.25.5, the CLI with Go 1.23)")
    daemon = {"exec-opts": ["native.cgroupdriver=systemd"], "iptables": False,
              "ip6tables": False, "bridge": "none", "storage-driver": "vfs",
              "features": {"cdi": True}, "runtimes": runtimes}
    machine.prepare(daemon, f"{legacy}:/usr/sbin:/usr/bin:/sbin:/bin")
    cdi = machine.root / "etc/cdi"
    cdi.mkdir(parents=True, exist_ok=True)
    proc = nvhook("--config", str(share / "auto.toml"), "cdi", "generate", "--hook-path",
                  f"{auto}/nvhook-hook", "--output", str(cdi / "nvidia.json"))
    assert proc.returncode == 0, proc.stderr
    rootfs = build_rootfs(share / "rootfs", RootfsFlavor.GLIBC)
    write_rootfs_tar(rootfs, share / "image.tar")
    write_docker_archive(rootfs, share / "archive.tar", f"docker.io/{IMAGE}")
    return sim, peer


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    host_ready()
    share = Path(tempfile.mkdtemp(prefix="nvsr-share-"))
    share.chmod(0o755)
    home = Path(tempfile.mkdtemp(prefix="nvsr-machine-"))
    binds = [str(REPO), *interpreter_binds(REPO), str(share)]
    if PEER.is_dir():
        binds.append(str(PEER))
    machine = Machine(home, tuple(binds))
    try:
        sim, peer = _prepare(share, machine)
        machine.boot()
        machine.sh(f"docker import {share}/image.tar {IMAGE} >/dev/null && "
                   f"{CTR} images import {share}/archive.tar >/dev/null")
        yield Rig(machine, sim, share, peer)
    finally:
        machine.stop()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(share, ignore_errors=True)


def _probe(rig: Rig, name: str) -> dict[int, str]:
    minors = [g.minor for g in rig.sim.gpus] + [255]
    script = shlex.quote(probe_script(minors))
    rig.execs += 1
    exec_in = (f"{CTR} task exec --exec-id probe{rig.execs} c-ctr" if name == "ctr"
               else f"docker exec c-{name}")
    out = rig.machine.sh(f"{exec_in} sh -c {script}").stdout
    return {int(m): what for m, _, what in (line.partition(" ") for line in out.splitlines())}


def _expected(rig: Rig, index: int) -> dict[int, str]:
    own = next(g.minor for g in rig.sim.gpus if g.index == index)
    return {**{g.minor: "ENXIO" if g.minor == own else "EPERM" for g in rig.sim.gpus},
            255: "ENXIO"}


def test_gpu_access_survives_daemon_reload(rig: Rig) -> None:
    paths = [p for p in PATHS if p != "nvidia" or not rig.peer]
    for name in paths:
        run = CTR_RUN if name == "ctr" else (f"docker run -d --name c-{name} --network none "
                                             f"{' '.join(PATHS[name][1])} {IMAGE} sleep 100000")
        proc = rig.machine.sh(f"PATH={rig.share}/legacy:$PATH {run}", check=False)
        logs = rig.machine.sh("tail -n 40 /run/nvref-*.log", check=False).stdout
        assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}\n{logs}"
    before = {name: _probe(rig, name) for name in paths}
    for name in paths:
        assert before[name] == _expected(rig, PATHS[name][0]), (name, before[name])
    for name, scope in HOOK_PATHS.items():  # nvhook's hook told systemd
        cid = "" if name == "ctr" else rig.machine.sh(
            f"docker inspect -f '{{{{.Id}}}}' c-{name}").stdout.strip()
        allow = rig.machine.sh(f"systemctl show -p DeviceAllow {scope.format(id=cid)}").stdout
        own = next(g.minor for g in rig.sim.gpus if g.index == PATHS[name][0])
        assert f"/dev/char/195:{own} rw" in allow, (name, allow)
    rig.machine.sh("systemctl daemon-reload && systemctl daemon-reload")
    after = {name: _probe(rig, name) for name in paths}
    for name in paths:
        if name == "nvidia":  # the reference: its rules were behind systemd's back
            lost = _expected(rig, PATHS[name][0])
            lost.update({m: "EPERM" for m in lost})
            assert after[name] == lost, (name, after[name])
        else:
            assert after[name] == _expected(rig, PATHS[name][0]), (name, after[name])
    _check_private_socket(rig)
    if rig.peer:  # nvhook's paths passed: say so, and why the reference did not run
        warnings.warn(f"NVIDIA 1.20.0's reference did not run: {rig.peer}", stacklevel=1)


PRIVATE_CALL = """
import sys
sys.path.insert(0, {repo!r})
from nvmount.errors import SystemdError
from nvmount.plan.types import DeviceRule
from nvmount.systemd.register import register
where = (("/run/systemd", "private", False),)
print(register({unit!r}, (DeviceRule(195, 7, "rw"),), 5.0, where))
try:
    register("docker-0000.scope", (DeviceRule(195, 7, "rw"),), 5.0, where)
except SystemdError as err:
    print(err)
"""


def _check_private_socket(rig: Rig) -> None:
    """The hook's call over systemd's private socket (the system bus is the first choice where
    a bus daemon runs, as here): systemd takes the entry, and a unit it does not know is one
    line naming it."""
    cid = rig.machine.sh("docker inspect -f '{{.Id}}' c-auto").stdout.strip()
    unit = f"docker-{cid}.scope"
    code = PRIVATE_CALL.format(repo=str(REPO), unit=unit)
    out = rig.machine.sh(f"{PYTHON} -IS -c {shlex.quote(code)}").stdout.splitlines()
    assert out[0] == f"systemd unit {unit}: DeviceAllow= 1 devices", out
    assert out[1].startswith("register 1 devices with systemd unit docker-0000.scope: "
                             "org.freedesktop.systemd1.NoSuchUnit: "), out
    allow = rig.machine.sh(f"systemctl show -p DeviceAllow {unit}").stdout
    assert "/dev/char/195:7 rw" in allow, allow

