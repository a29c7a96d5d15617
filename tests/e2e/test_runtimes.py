"""GPU containers through Docker, containerd, Podman, runc and crun, configured only by nvhook.

Each client is private (clientrig) and set up the way a user would: `nvhook install --config
<sim>/config.toml` (tests/fixtures/gpu_clients.py), then `nvhook runtime configure` for the
client. The simulated driver has 8 GPUs and `sim-procfs = true`, so no extra prestart step is
needed anywhere. Every container prints `nvidia-smi -L` and its /dev/nvidia<N> nodes; both must
be exactly the selected GPUs. Images are imported from a local rootfs; nothing is pulled.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nvhook.dev.demo.bundle import container_spec, new_container_id, write_bundle
from tests.fixtures.clientrig.containerd import ContainerdDaemon, config_dump, containerd_config
from tests.fixtures.clientrig.docker import DockerDaemon
from tests.fixtures.clientrig.podman import Podman
from tests.fixtures.clients import ClientRig, describe, require_binaries
from tests.fixtures.gpu_clients import (
    PROBE,
    GpuInstall,
    gpu_listing,
    nvhook,
    world_readable_install,
)

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.usefixtures("client_leak_check")]


def check_gpus(proc: subprocess.CompletedProcess[str], install: GpuInstall,
               indexes: list[int]) -> None:
    assert proc.returncode == 0, describe(proc)
    assert gpu_listing(proc.stdout) == install.expect(indexes), describe(proc)


# -- Docker -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def docker(client_rig: ClientRig, gpu_install: GpuInstall) -> DockerDaemon:
    """dockerd whose daemon.json got its runtimes only from `nvhook runtime configure`; the
    launcher dir is on dockerd's PATH (for `--gpus`, which looks the hook up there). Today's
    Docker (25 and later) also reads CDI specs: nvhook's, from a private spec dir."""
    settings = {}
    if not client_rig.node.is_host:  # Docker 20.10 refuses these keys
        spec_dir = gpu_install.prefix.parent / "docker-cdi"
        proc = nvhook("--config", gpu_install.sim.config_path, "cdi", "generate", "--output",
                      str(spec_dir / "nvidia.yaml"), "--hook-path",
                      f"{gpu_install.prefix}/nvhook-hook")
        assert proc.returncode == 0, proc.stderr
        settings = {"features": {"cdi": True}, "cdi-spec-dirs": [str(spec_dir)]}
    daemon = client_rig.docker(start=False, extra_path=(gpu_install.prefix,), settings=settings)
    config = daemon.write_config()
    broken = gpu_install.prefix.parent / "broken-bin"  # its config is broken by a test
    gpu_install.install(broken, Path(gpu_install.legacy_config).parent / "breakable.toml",
                        source=gpu_install.legacy_config)
    for name, prefix in (("nvidia", gpu_install.prefix), ("nvidia-spec", gpu_install.spec_prefix),
                         ("nvidia-broken", broken)):
        proc = nvhook("runtime", "configure", "--runtime=docker", f"--config={config}",
                      f"--runtime-name={name}",
                      f"--runtime-path={prefix}/nvidia-container-runtime")
        assert proc.returncode == 0, proc.stderr
        assert "restart dockerd" in proc.stdout
    daemon.start()
    daemon.import_rootfs(client_rig.rootfs, "nvhook.test/busybox:latest")
    return daemon


DOCKER_CASES = [
    (["--gpus", "all"], None, list(range(8))),
    (["--gpus", '"device=1,3"'], None, [1, 3]),
    (["-e", "NVIDIA_VISIBLE_DEVICES=2"], "nvidia", [2]),
    (["-e", "NVIDIA_VISIBLE_DEVICES=0,7"], "nvidia-spec", [0, 7]),
]


@pytest.mark.today_engines
@pytest.mark.parametrize(("flags", "runtime", "indexes"), DOCKER_CASES,
                         ids=["gpus-all", "gpus-device-1-3", "runtime-nvidia-2",
                              "runtime-spec-mode-0-7"])
def test_docker(docker: DockerDaemon, gpu_install: GpuInstall, flags: list[str],
                runtime: str | None, indexes: list[int]) -> None:
    proc = docker.run(PROBE, flags=flags, runtime=runtime)
    check_gpus(proc, gpu_install, indexes)


@pytest.mark.today_engines(host=False)
@pytest.mark.parametrize(("device", "indexes"), [("nvidia.com/gpu=0", [0]),
                                                 ("nvidia.com/gpu=all", list(range(8)))],
                         ids=["cdi-gpu-0", "cdi-all"])
def test_docker_cdi_device(docker: DockerDaemon, gpu_install: GpuInstall, device: str,
                           indexes: list[int]) -> None:
    """`docker run --device nvidia.com/gpu=N`: Docker applies nvhook's CDI spec itself
    (runc, no nvidia runtime), and runc runs the spec's hook (Docker 25 and later)."""
    proc = docker.run(PROBE, flags=["--device", device])
    check_gpus(proc, gpu_install, indexes)


def test_docker_config_is_ours_only(docker: DockerDaemon, gpu_install: GpuInstall) -> None:
    config = json.loads(docker.config_path.read_text())
    assert config["runtimes"]["nvidia"] == {
        "args": [], "path": f"{gpu_install.prefix}/nvidia-container-runtime"}
    assert docker.run(["echo", "plain"], runtime="nvidia").stdout == "plain\n"


@pytest.mark.parametrize("damage", ["gone", "invalid"])
def test_docker_shows_the_wrappers_error_and_removes_the_container(
    docker: DockerDaemon, gpu_install: GpuInstall, damage: str
) -> None:
    """issue 18: a config the launcher names that is gone or broken fails every create with
    the wrapper's own message in `docker run`'s output (runc's --log file), naming the file and
    the launcher; `docker rm -f` of the container still works (delete passes through)."""
    config = Path(gpu_install.legacy_config).parent / "breakable.toml"
    saved = config.read_bytes()
    name = f"nvhook-broken-{damage}"
    try:
        if damage == "gone":
            config.unlink()
            want = (f"couldn't open required configuration file {config}: file does not exist "
                    f"(named by the launcher {config.parent}/broken-bin/nvidia-container-runtime "
                    f"written by `nvhook install --config {config}`)")
        else:
            config.write_text("[nvidia-container-runtime\n")
            want = f"couldn't parse configuration file {config} (named by the launcher"
        proc = docker.docker("run", "--name", name, "--network", "none", "--runtime",
                             "nvidia-broken", "-e", "NVIDIA_VISIBLE_DEVICES=0", docker.image,
                             "true")
        assert proc.returncode != 0 and want in proc.stderr, describe(proc)
        assert "unable to retrieve OCI runtime error" not in proc.stderr
        plain = docker.run(["echo", "plain"], runtime="nvidia-broken")  # GPU or not
        assert plain.returncode != 0 and want in plain.stderr, describe(plain)
    finally:
        config.write_bytes(saved)
        removed = docker.docker("rm", "-f", name)
    assert removed.returncode == 0, describe(removed)


# -- containerd ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ctrd(client_rig: ClientRig) -> ContainerdDaemon:
    return client_rig.containerd()


@pytest.mark.today_engines
def test_ctr_gpus_through_the_cli_dropin(ctrd: ContainerdDaemon, gpu_install: GpuInstall) -> None:
    """`ctr run --gpus 0` runs `containerd oci-hook -- nvidia-container-cli --load-kmods
    configure --device=0 --compute ... --pid=N ROOTFS`, with the CLI from ctr's PATH."""
    proc = ctrd.run(PROBE, gpus="0", extra_path=(gpu_install.prefix,))
    check_gpus(proc, gpu_install, [0])


@pytest.mark.today_engines
@pytest.mark.parametrize("spec_mode", [False, True], ids=["legacy", "spec-mode"])
def test_ctr_runc_binary_wrapper(ctrd: ContainerdDaemon, gpu_install: GpuInstall,
                                 spec_mode: bool) -> None:
    prefix = gpu_install.spec_prefix if spec_mode else gpu_install.prefix
    proc = ctrd.run(PROBE, runc_binary=prefix / "nvhook-runtime",
                    flags=["--env", "NVIDIA_VISIBLE_DEVICES=all"])
    check_gpus(proc, gpu_install, list(range(8)))
    plain = ctrd.run(["echo", "plain"], runc_binary=prefix / "nvhook-runtime")
    assert (plain.returncode, plain.stdout) == (0, "plain\n"), describe(plain)


def test_containerd_accepts_the_configured_dropin(client_rig: ClientRig,
                                                 gpu_install: GpuInstall) -> None:
    require_binaries(Path("/usr/bin/containerd"))
    work = client_rig.workdir("ctrd-config")
    main = work / "config.toml"
    main.write_text(containerd_config(work, imports=[f"{work}/conf.d/*.toml"],
                                      disable_cri=False))
    before = main.read_bytes()
    wrapper = gpu_install.prefix / "nvidia-container-runtime"
    argv = ["runtime", "configure", "--runtime=containerd", f"--config={main}",
            f"--drop-in={work}/conf.d/99-nvidia.toml", f"--runtime-path={wrapper}",
            "--set-as-default"]
    first, second = nvhook(*argv), nvhook(*argv)
    assert first.returncode == 0 and "Wrote updated config" in first.stdout, first.stderr
    assert "already up to date" in second.stdout, second.stdout
    assert main.read_bytes() == before  # the main file is never written
    proc = config_dump(main, timings=client_rig.timings)
    assert proc.returncode == 0, describe(proc)
    assert f'BinaryName = "{wrapper}"' in proc.stdout
    assert 'default_runtime_name = "nvidia"' in proc.stdout
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in proc.stdout


# -- Podman -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hooks_dir(client_rig: ClientRig, gpu_install: GpuInstall) -> Path:
    hooks = client_rig.short_dir("nvhook-hooks-")
    hooks.chmod(0o755)
    prefix = world_readable_install(gpu_install)  # the rootless user's hook imports it
    proc = nvhook("runtime", "configure", "--runtime=podman", f"--hooks-dir={hooks}",
                  f"--hook-path={prefix}/nvidia-container-runtime-hook")
    assert proc.returncode == 0, proc.stderr
    return hooks


@pytest.fixture(scope="module")
def podmen(client_rig: ClientRig, hooks_dir: Path) -> dict[bool, Podman]:
    """rootful (False) and rootless (True) podman reading the configured hooks dir."""
    return {False: client_rig.podman(hooks_dir=hooks_dir),
            True: client_rig.rootless_podman(hooks_dir=hooks_dir)}


@pytest.mark.today_engines
@pytest.mark.parametrize("rootless", [False, True], ids=["rootful", "rootless"])
def test_podman_hooks_dir(podmen: dict[bool, Podman], gpu_install: GpuInstall,
                          rootless: bool) -> None:
    podman = podmen[rootless]
    proc = podman.run(PROBE, flags=["-e", "NVIDIA_VISIBLE_DEVICES=1,3"])
    check_gpus(proc, gpu_install, [1, 3])
    plain = podman.run(["sh", "-c", "ls /dev | grep -c nvidia || true"])
    assert (plain.returncode, plain.stdout) == (0, "0\n"), describe(plain)


# -- runc and crun through the wrapper ----------------------------------------------------------
RECORDER = """#!/bin/sh
# a low-level runtime that keeps a copy of the config.json it is given, then runs {runtime}
prev=""; bundle="."
for a in "$@"; do
  case "$prev" in -b|--bundle) bundle="$a";; esac
  case "$a" in --bundle=*) bundle="${{a#--bundle=}}";; esac
  prev="$a"
done
case " $* " in *" create "*|*" run "*) cp "$bundle/config.json" {copy};; esac
exec {runtime} "$@"
"""
RUNC = Path("/usr/sbin/runc")


def wrapper_config(install: GpuInstall, path: Path, runtime: Path, spec: bool,
                   sim_procfs: bool = True) -> Path:
    """The legacy (or the spec-mode) config with `runtimes` set to `runtime`."""
    base = (install.spec_config if spec else install.legacy_config).read_text()
    if not sim_procfs:
        base = base.replace("sim-procfs = true", "sim-procfs = false")
    path.write_text(f'nvidia-container-runtime.runtimes = ["{runtime}"]\n' + base)
    return path


def wrapper(install: GpuInstall, config: Path, *args: str,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`nvhook-runtime ARGS` with the config in NVIDIA_CTK_CONFIG_FILE_PATH (on the node)."""
    return subprocess.run([*install.node.enter(), str(install.prefix / "nvhook-runtime"), *args],
                          capture_output=True, cwd="/",
                          text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                               "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)})


def wrapped_run(rig: ClientRig, install: GpuInstall, tmp: Path, config: Path, env: list[str],
                args: list[str]) -> tuple[subprocess.CompletedProcess[str], Path, bytes]:
    """`nvhook-runtime run` of a runc bundle; (result, bundle, config.json as written)."""
    bundle = write_bundle(tmp / "bundle", rig.rootfs, container_spec(args, env))
    original = (bundle / "config.json").read_bytes()
    start = time.monotonic()
    proc = wrapper(install, config, "run", "--bundle", str(bundle), new_container_id("wrap"))
    rig.timings.add(f"nvhook-runtime run {' '.join(env)}", time.monotonic() - start)
    return proc, bundle, original


def recorder(tmp: Path, runtime: Path) -> tuple[Path, Path]:
    copy = tmp / "received.json"
    script = tmp / "recorder"
    script.write_text(RECORDER.format(runtime=shlex.quote(str(runtime)),
                                      copy=shlex.quote(str(copy))))
    script.chmod(0o755)
    return script, copy


def test_non_gpu_config_json_passes_unchanged(client_rig: ClientRig, gpu_install: GpuInstall,
                                              tmp_path: Path) -> None:
    require_binaries(RUNC)
    script, copy = recorder(tmp_path, RUNC)
    config = wrapper_config(gpu_install, tmp_path / "c.toml", script, spec=True)
    proc, bundle, original = wrapped_run(client_rig, gpu_install, tmp_path, config,
                                         ["FOO=bar"], ["echo", "plain"])
    assert (proc.returncode, proc.stdout) == (0, "plain\n"), proc.stderr
    assert copy.read_bytes() == original == (bundle / "config.json").read_bytes()


@pytest.mark.today_engines
def test_spec_mode_runtime_gets_devices_and_hook_writes_no_rule(
    client_rig: ClientRig, gpu_install: GpuInstall, tmp_path: Path
) -> None:
    require_binaries(RUNC)
    script, copy = recorder(tmp_path, RUNC)
    config = wrapper_config(gpu_install, tmp_path / "c.toml", script, spec=True)
    records = len(gpu_install.timing_records())
    proc, _, _ = wrapped_run(client_rig, gpu_install, tmp_path, config,
                             ["NVIDIA_VISIBLE_DEVICES=2,5"], PROBE)
    check_gpus(proc, gpu_install, [2, 5])
    received = json.loads(copy.read_text())
    minors = {g.minor for g in gpu_install.sim.gpus if g.index in (2, 5)}
    nodes = {(d["path"], d["major"], d["minor"]) for d in received["linux"]["devices"]}
    gpu_nodes = {n for n in nodes if n[0][len("/dev/nvidia"):].isdigit()}
    assert gpu_nodes == {(f"/dev/nvidia{m}", 195, m) for m in minors}
    assert ("/dev/nvidiactl", 195, 255) in nodes
    rules = {(r["type"], r["major"], r["minor"], r["access"])
             for r in received["linux"]["resources"]["devices"] if r.get("allow")}
    assert {("c", 195, m, "rw") for m in (*minors, 255)} <= rules
    assert any(m["destination"].endswith("/nvidia-smi") for m in received["mounts"])
    wrapper, hook = gpu_install.timing_records()[records:records + 2]
    assert (wrapper["wrapper"], wrapper["hook"]) == (True, True)  # the sim's procfs: a hook
    assert (hook["device_rules"], hook["gpus"]) == (0, 2), hook  # the hook: no rule


def test_spec_delivery_needs_no_hook(client_rig: ClientRig, gpu_install: GpuInstall,
                                     tmp_path: Path) -> None:
    """Spec delivery without the simulated procfs (a real driver's /proc/driver/nvidia is the
    kernel's): runc gets no prestart hook at all; the nodes, the driver's files, the links and
    the ld.so.cache are in place when the container starts."""
    require_binaries(RUNC)
    script, copy = recorder(tmp_path, RUNC)
    config = wrapper_config(gpu_install, tmp_path / "c.toml", script, spec=True,
                            sim_procfs=False)
    records = len(gpu_install.timing_records())
    probe = ["sh", "-c", "ls /dev | grep -E '^nvidia[0-9]+$'; readlink "
             "/usr/lib/x86_64-linux-gnu/libcuda.so.1; grep -q libnvidia-ml.so.1 "
             "/etc/ld.so.cache && echo cached; test -x /usr/bin/nvidia-smi && echo smi"]
    proc, _, _ = wrapped_run(client_rig, gpu_install, tmp_path, config,
                             ["NVIDIA_VISIBLE_DEVICES=3"], probe)
    minor = next(g.minor for g in gpu_install.sim.gpus if g.index == 3)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [f"nvidia{minor}", "libcuda.so.550.54.15", "cached", "smi"]
    received = json.loads(copy.read_text())
    assert not received.get("hooks", {}).get("prestart")
    records = gpu_install.timing_records()[records:]
    assert [(r.get("wrapper"), r.get("hook")) for r in records] == [(True, False)]


# What runc allows on its own (libcontainer/specconv AllowedDevices), re-applied with the
# spec's rules by a manager that owns the cgroup (systemd on `daemon-reload`).
RUNC_DEFAULT_RULES = ("c *:* m", "b *:* m", "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm",
                      "c 1:9 rwm", "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm", "c 10:200 rwm")


def reapply_device_rules(pid: int, spec: dict[str, Any]) -> None:
    """Reset the container's v1 device cgroup to what the runtime knows: deny all, then
    runc's defaults and the spec's allow rules (what systemd does on daemon-reload)."""
    line = next(x for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                if ":devices:" in x)
    cgroup = Path("/sys/fs/cgroup/devices") / line.split(":", 2)[2].lstrip("/")
    rules = list(RUNC_DEFAULT_RULES)
    for r in spec.get("linux", {}).get("resources", {}).get("devices", []):
        if r.get("allow"):
            major, minor = r.get("major", "*"), r.get("minor", "*")
            rules.append(f"{r.get('type', 'a')} {major}:{minor} {r.get('access', 'rwm')}")
    (cgroup / "devices.deny").write_text("a")
    for rule in rules:
        (cgroup / "devices.allow").write_text(rule)


@pytest.mark.parametrize("spec", [False, True], ids=["legacy-loses-gpus", "spec-mode-keeps"])
def test_devices_after_the_runtime_reapplies_its_rules(
    client_rig: ClientRig, gpu_install: GpuInstall, tmp_path: Path, spec: bool
) -> None:
    """painpoints 1: the legacy hook's rules live behind the runtime's back and vanish when
    the cgroup is reset from the runtime's own rules; spec mode's rules are the runtime's."""
    require_binaries(RUNC)
    if not Path("/sys/fs/cgroup/devices/devices.list").exists():
        pytest.skip("needs the cgroup-v1 devices controller")
    config = wrapper_config(gpu_install, tmp_path / "c.toml", RUNC, spec=spec)
    bundle = write_bundle(tmp_path / "bundle", client_rig.rootfs,
                          container_spec(["sleep", "60"], ["NVIDIA_VISIBLE_DEVICES=6"]))
    cid = new_container_id("reload")
    try:
        log = tmp_path / "create.log"
        with log.open("w") as out:  # the container keeps runc's stdio: no pipes to wait on
            created = subprocess.run(
                [str(gpu_install.prefix / "nvhook-runtime"), "create", "--bundle", str(bundle),
                 cid], stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=120,
                check=False, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                  "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)})
        assert created.returncode == 0, log.read_text()
        assert subprocess.run([str(RUNC), "start", cid], check=False).returncode == 0
        state = json.loads(subprocess.run([str(RUNC), "state", cid], capture_output=True,
                                          text=True, check=True).stdout)
        before = _exec(cid, PROBE)
        check_gpus(before, gpu_install, [6])
        reapply_device_rules(state["pid"], json.loads((bundle / "config.json").read_text()))
        uuids, _ = gpu_listing(_exec(cid, PROBE).stdout)
        assert uuids == (gpu_install.expect([6])[0] if spec else [])
    finally:
        subprocess.run([str(RUNC), "delete", "-f", cid], capture_output=True, check=False)


def _exec(cid: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(RUNC), "exec", cid, *argv], capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.today_engines
@pytest.mark.parametrize("spec", [False, True], ids=["legacy", "spec-mode"])
def test_crun_as_low_level_runtime(client_rig: ClientRig, gpu_install: GpuInstall,
                                   tmp_path: Path, spec: bool) -> None:
    """The same wrapper and bundle with crun (in the crun wrapper's private mount namespace:
    crun refuses this VM's hybrid cgroups otherwise)."""
    crun = client_rig.crun_wrapper()
    config = wrapper_config(gpu_install, tmp_path / "c.toml", crun, spec=spec)
    proc, _, _ = wrapped_run(client_rig, gpu_install, tmp_path, config,
                             ["NVIDIA_VISIBLE_DEVICES=4"], PROBE)
    check_gpus(proc, gpu_install, [4])
