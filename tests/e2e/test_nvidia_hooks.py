"""NVIDIA's own CDI specs run with nvhook's nvidia-cdi-hook / nvidia-ctk hooks.

- The spec `nvidia-ctk cdi generate` 1.20.0 wrote (tests/data/nvidia-specs; cdiVersion 0.5.0 on
  the simulated driver, whose nodes are world-rw, but 0.7.0 with `additionalGids` on a real
  node: Podman 4.3 cannot read those) runs through nvhook's runtime wrapper and runc, once
  with its `nvidia-cdi-hook` hooks and once rewritten as 1.20's jit-cdi writes them
  (`nvidia-ctk hook ...`); 1.17.8's spec runs with Podman 4.3. /usr/bin/nvidia-cdi-hook and
  /usr/bin/nvidia-ctk are nvhook's launchers in an overlay on /usr/bin inside a private mount
  namespace (never installed on the host). The container gets what NVIDIA's hooks give it:
  the links, the ld.so.cache entries (`ldconfig -p`), `ModifyDeviceFiles: 0` in its params
  and the application profile of its GPU.
- Hostile images (the hooks in a createContainer-like context: a private mount namespace,
  procfs mounted in the rootfs, the state naming the hook's parent): a library directory
  that links out of the root, a read-only /etc, a FIFO at the profile, magic links where
  /etc/nvidia and /etc/ld.so.conf.d should be. Nothing outside the rootfs changes, the
  optional targets are warnings, the hooks exit 0 and nothing hangs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvhook.dev.demo.bundle import container_spec, write_bundle
from nvhook.dev.demo.rootfs import copy_rootfs
from tests.fixtures.clientrig import podman as podman_module
from tests.fixtures.clients import ClientRig, describe
from tests.fixtures.gpu_clients import GpuInstall
from tests.fixtures.nvidia_specs import spec_for, spec_text

pytestmark = [pytest.mark.e2e, pytest.mark.root]

LIBS = "/usr/lib/x86_64-linux-gnu"
PROFILE = "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"
PROBE = (f"echo links: $(readlink {LIBS}/libcuda.so.1) $(readlink {LIBS}/libcuda.so); "
         "echo cache: $(ldconfig -p | grep -c -e libcuda.so.1 -e libnvidia-ml.so.1); "
         "echo params: $(grep ModifyDeviceFiles /proc/driver/nvidia/params); "
         f"echo profile: $(cat {PROFILE}); echo nodes: $(ls /dev | grep -E '^nvidia[0-9]+$')")
OVERLAY = ("mount -t overlay overlay -o lowerdir=/usr/bin,upperdir={upper},workdir={work} "
           "/usr/bin")
RUNTIME = """#!/bin/sh
# runc in a private mount namespace whose /usr/bin has nvhook's nvidia-cdi-hook and nvidia-ctk
exec unshare -m --propagation private sh -c '{overlay} && exec /usr/sbin/runc "$@"' sh "$@"
"""


def probe_fields(stdout: str) -> dict[str, str]:
    return {k: v.strip() for k, _, v in (line.partition(": ") for line in stdout.splitlines())
            if v or k in ("params", "profile", "nodes")}


def expected(install: GpuInstall, index: int) -> dict[str, str]:
    minor = next(g.minor for g in install.sim.gpus if g.index == index)
    version = install.sim.spec.driver_version
    return {"links": f"libcuda.so.{version} libcuda.so.1", "cache": "2",
            "params": "ModifyDeviceFiles: 0",
            "profile": '{ "profiles": [{"name": "_container_", "settings": '
                       f'["EGLVisibleDGPUDevices", 0x{1 << minor:x}]}}], "rules": [{{"pattern": '
                       '[], "profile": "_container_"}]}',
            "nodes": f"nvidia{minor}"}


def nvidia_bin(base: Path, install: GpuInstall) -> tuple[Path, Path]:
    """(upper, work) of an overlay on /usr/bin holding nvhook's two launchers."""
    upper, work = base / "usr-bin", base / "usr-bin-work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    for name in ("nvidia-cdi-hook", "nvidia-ctk"):
        link = upper / name
        if not link.is_symlink():
            link.symlink_to(install.prefix / name)
    return upper, work


def as_jit_cdi(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec's hooks as 1.20's jit-cdi runtime writes them: `nvidia-ctk hook NAME ...`."""
    for edits in [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]:
        for hook in edits.get("hooks") or ():
            hook["path"] = "/usr/bin/nvidia-ctk"
            hook["args"] = ["nvidia-ctk", "hook", *hook["args"][1:]]
    return spec


@pytest.mark.parametrize("how", ["nvidia-cdi-hook", "nvidia-ctk-hook"])
def test_nvidia_120_spec_through_the_wrapper(client_rig: ClientRig, gpu_install: GpuInstall,
                                             tmp_path: Path, how: str) -> None:
    from tests.e2e.test_runtimes import wrapper

    upper, work = nvidia_bin(tmp_path, gpu_install)
    runtime = tmp_path / "runc"
    runtime.write_text(RUNTIME.format(overlay=OVERLAY.format(upper=upper, work=work)))
    runtime.chmod(0o755)
    spec = spec_for("1.20.0", gpu_install.sim.path)
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "nvidia.json").write_text(json.dumps(
        as_jit_cdi(spec) if how == "nvidia-ctk-hook" else spec))
    config = tmp_path / "config.toml"
    config.write_text(f'nvidia-container-runtime.runtimes = ["{runtime}"]\n'
                      f'nvidia-container-runtime.modes.cdi.spec-dirs = ["{spec_dir}"]\n'
                      + Path(gpu_install.sim.config_path).read_text())
    bundle = write_bundle(tmp_path / "bundle", client_rig.rootfs, container_spec(
        ["sh", "-c", PROBE], ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2"]))
    proc = wrapper(gpu_install, config, "run", "--bundle", str(bundle), f"nvidia-120-{how}")
    assert proc.returncode == 0, describe(proc)
    assert probe_fields(proc.stdout) == expected(gpu_install, 2), proc.stdout
    hooks = json.loads((bundle / "config.json").read_text())["hooks"]["createContainer"]
    binary = "nvidia-ctk" if how == "nvidia-ctk-hook" else "nvidia-cdi-hook"
    assert {h["path"] for h in hooks} == {f"/usr/bin/{binary}"} and len(hooks) == 6


PODMAN = """#!/bin/sh
# podman in a private mount namespace: /etc/cdi holds NVIDIA's spec, /usr/bin nvhook's hooks
exec unshare -m --propagation private sh -c 'mount -t overlay overlay \
  -o lowerdir=/etc,upperdir={etc},workdir={etc_work} /etc && {overlay} && \
  exec /usr/bin/podman "$@"' sh "$@"
"""


def test_nvidia_1178_spec_with_podman(client_rig: ClientRig, gpu_install: GpuInstall,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    base = client_rig.short_dir("nvhook-nvspec-")
    etc, etc_work = base / "etc", base / "etc-work"
    (etc / "cdi").mkdir(parents=True)
    etc_work.mkdir()
    (etc / "cdi" / "nvidia.yaml").write_text(spec_text("1.17.8", gpu_install.sim.path))
    upper, work = nvidia_bin(base, gpu_install)
    wrapper = base / "podman"
    wrapper.write_text(PODMAN.format(etc=etc, etc_work=etc_work,
                                     overlay=OVERLAY.format(upper=upper, work=work)))
    wrapper.chmod(0o755)
    monkeypatch.setattr(podman_module, "PODMAN", wrapper)
    podman = client_rig.podman()
    if podman.image is None:
        podman.import_rootfs(client_rig.rootfs, "nvhook.test/busybox:latest")
    proc = podman.run(["sh", "-c", PROBE], flags=["--device", "nvidia.com/gpu=1"])
    assert proc.returncode == 0, describe(proc)
    want = expected(gpu_install, 1)
    got = probe_fields(proc.stdout)
    # 1.17.8's spec has no disable-device-node-modification or update-application-profile
    # hook on this root (no /proc/driver/nvidia on the host): the other hooks' work is there
    assert {k: got[k] for k in ("links", "cache", "nodes")} == {
        k: want[k] for k in ("links", "cache", "nodes")}, proc.stdout


# -- the install guide's flows, verbatim but for the private config paths -----------------------
def ctk(install: GpuInstall, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed nvidia-ctk drop-in, with the launchers' directory on PATH (as /usr/bin is
    for the package)."""
    return subprocess.run([str(install.prefix / "nvidia-ctk"), *args], capture_output=True,
                          text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
                          env={"PATH": f"{install.prefix}:/usr/sbin:/usr/bin:/sbin:/bin"})


def test_install_guide_docker_flow(client_rig: ClientRig, gpu_install: GpuInstall) -> None:
    """`nvidia-ctk runtime configure --runtime=docker && systemctl restart docker`, then
    `docker run --runtime=nvidia`."""
    from tests.e2e.test_runtimes import check_gpus
    from tests.fixtures.gpu_clients import PROBE as GPU_PROBE

    daemon = client_rig.docker(start=False, extra_path=(gpu_install.prefix,))
    config = daemon.write_config()
    proc = ctk(gpu_install, "runtime", "configure", "--runtime=docker", f"--config={config}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(config.read_text())["runtimes"]["nvidia"]["path"] == str(
        gpu_install.prefix / "nvidia-container-runtime")
    daemon.start()
    daemon.import_rootfs(client_rig.rootfs, "nvhook.test/busybox:latest")
    run = daemon.run(GPU_PROBE, flags=["-e", "NVIDIA_VISIBLE_DEVICES=3"], runtime="nvidia")
    check_gpus(run, gpu_install, [3])


def test_install_guide_containerd_flow(client_rig: ClientRig, gpu_install: GpuInstall) -> None:
    """`nvidia-ctk runtime configure --runtime=containerd --set-as-default`: containerd loads
    the drop-in (`containerd config dump`), the main file is untouched."""
    from tests.fixtures.clientrig.containerd import config_dump, containerd_config
    from tests.fixtures.clients import require_binaries

    require_binaries(Path("/usr/bin/containerd"))
    work = client_rig.workdir("ctk-containerd")
    main = work / "config.toml"
    main.write_text(containerd_config(work, imports=[f"{work}/conf.d/*.toml"],
                                      disable_cri=False))
    before = main.read_bytes()
    proc = ctk(gpu_install, "runtime", "configure", "--runtime=containerd", f"--config={main}",
               f"--drop-in-config={work}/conf.d/99-nvidia.toml", "--set-as-default",
               "--cdi.enabled")
    assert proc.returncode == 0, proc.stderr
    assert main.read_bytes() == before
    dump = config_dump(main, timings=client_rig.timings)
    assert dump.returncode == 0, describe(dump)
    wrapper = gpu_install.prefix / "nvidia-container-runtime"
    assert f'BinaryName = "{wrapper}"' in dump.stdout
    assert 'default_runtime_name = "nvidia"' in dump.stdout
    # containerd 1.6 has no CDI setting (1.7+ does): the drop-in has it, as 1.20's
    assert "enable_cdi = true" in (work / "conf.d/99-nvidia.toml").read_text()


# -- hostile images ------------------------------------------------------------------------------
FAKE_CONTAINER = """set -e
mount -t proc proc {rootfs}/proc
{setup}
echo '{{"ociVersion": "1.0.2", "id": "x", "status": "creating", "pid": '$$', \
  "bundle": "{bundle}"}}' | "$@"
"""


def run_in_fake_container(bundle: Path, argv: list[str], setup: str = "",
                          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A hook as runc runs a createContainer hook: a child of the "container init" (the shell,
    whose pid the state names) in a private mount namespace with procfs in the rootfs."""
    script = FAKE_CONTAINER.format(rootfs=bundle / "rootfs", bundle=bundle, setup=setup)
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                           "sh", *argv], capture_output=True, text=True, timeout=timeout,
                          check=False, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                            "NVIDIA_CTK_DEBUG": "false"})


def host_state(*paths: str) -> dict[str, str]:
    """Digests of host files, listings of host directories (other tests may run beside us:
    only paths no test writes)."""
    out = {}
    for path in paths:
        p = Path(path)
        out[path] = (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else
                     " ".join(sorted(os.listdir(p))) if p.is_dir() else "missing")
    return out


def host_mounts_under(path: Path) -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if str(path) in line]


@pytest.fixture
def hostile_bundle(client_rig: ClientRig, tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    copy_rootfs(client_rig.rootfs, bundle / "rootfs")
    (bundle / "config.json").write_text('{"ociVersion": "1.0.2", "root": {"path": "rootfs"}}')
    return bundle


def test_hostile_images_are_contained(hostile_bundle: Path, gpu_install: GpuInstall,
                                      tmp_path: Path) -> None:
    rootfs = hostile_bundle / "rootfs"
    mark = tmp_path / "HOSTMARK"  # where an escaping link would land on the host
    libs = rootfs / LIBS.lstrip("/")
    os.rename(libs, rootfs / "usr/lib/real-libs")
    libs.symlink_to("/../../../../.." + str(mark))  # absolute with dotdots: stays in the root
    (rootfs / "etc/nvidia").symlink_to("/proc/self/root/etc")  # a magic link
    (rootfs / "etc/ld.so.conf.d.orig").mkdir()
    os.rename(rootfs / "etc/ld.so.conf.d", rootfs / "etc/ld.so.conf.d.orig/x")
    (rootfs / "etc/ld.so.conf.d").symlink_to("../../../../proc/1/root/etc/ld.so.conf.d")
    compat = rootfs / "usr/local/cuda/compat"
    compat.mkdir(parents=True)
    (compat / "libcuda.so.999.1.1").write_bytes(b"\x7fELF junk")  # no note: major 999 wins
    watched = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/nvidia",
               str(tmp_path))
    before = host_state(*watched)
    hook = str(gpu_install.prefix / "nvidia-cdi-hook")
    setup = (f"mount -t tmpfs tmpfs {rootfs}/dev && mknod {rootfs}/dev/nvidia3 c 195 3")
    for argv in (["create-symlinks", "--link", f"libcuda.so.1::{LIBS}/libcuda.so"],
                 ["enable-cuda-compat", "--host-driver-version=550.54.15"],
                 ["update-ldcache", "--folder", LIBS],
                 ["update-application-profile"], ["disable-device-node-modification"]):
        proc = run_in_fake_container(hostile_bundle, [hook, *argv], setup=setup)
        assert proc.returncode == 0, (argv, proc.stderr)
        assert "level=warning" in proc.stderr or argv[0] in ("create-symlinks", "update-ldcache",
                                                               "disable-device-node-modification")
    assert not mark.exists() and not mark.is_symlink()
    assert (rootfs / str(mark).lstrip("/") / "libcuda.so").is_symlink()  # inside the rootfs
    assert host_state(*watched) == before
    assert host_mounts_under(rootfs) == []  # the mounts stayed in the private namespace


def test_readonly_etc_and_a_fifo_at_the_profile(hostile_bundle: Path,
                                                gpu_install: GpuInstall) -> None:
    rootfs = hostile_bundle / "rootfs"
    (rootfs / PROFILE.lstrip("/")).parent.mkdir(parents=True)
    os.mkfifo(rootfs / PROFILE.lstrip("/"))
    (rootfs / "usr/local/cuda/compat").mkdir(parents=True)
    (rootfs / "usr/local/cuda/compat/libcuda.so.999.1.1").write_bytes(b"\x7fELF")
    hook = str(gpu_install.prefix / "nvidia-cdi-hook")
    devs = f"mount -t tmpfs tmpfs {rootfs}/dev && mknod {rootfs}/dev/nvidia1 c 195 1"
    proc = run_in_fake_container(hostile_bundle, [hook, "update-application-profile"],
                                 setup=devs, timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert (rootfs / PROFILE.lstrip("/")).is_file()  # the FIFO was replaced, never opened
    assert "0x2]" in (rootfs / PROFILE.lstrip("/")).read_text()
    (rootfs / PROFILE.lstrip("/")).unlink()
    readonly = f"{devs} && mount --bind -o ro {rootfs}/etc {rootfs}/etc"
    for argv in (["update-application-profile"],
                 ["enable-cuda-compat", "--host-driver-version=550.54.15"]):
        proc = run_in_fake_container(hostile_bundle, [hook, *argv], setup=readonly)
        assert proc.returncode == 0, (argv, proc.stderr)  # NVIDIA's fails every container
        assert "level=warning" in proc.stderr and "read-only file system" in proc.stderr, \
            proc.stderr
    assert not (rootfs / PROFILE.lstrip("/")).exists()
    assert not list((rootfs / "etc/ld.so.conf.d").glob("00-compat-*"))


def test_params_file_bind(tmp_path: Path) -> None:
    """The real-driver path of disable-device-node-modification: a read-only copy bound over
    a procfs file of the rootfs (here /proc/version of a fake root), also on kernels that
    refuse to clone from a detached mount (the /dev scratch fallback, forced)."""
    rootfs = tmp_path / "rootfs"
    for d in ("proc", "dev"):
        (rootfs / d).mkdir(parents=True)
    program = f"""
import errno, os, sys
from nvmount._libc import Libc
from nvmount.fs.procfs import ProcFs
from nvmount.fs.rootfs import Root
from nvhook.compat.cdihook.params import bind_params
libc = Libc()
if sys.argv[1] == "fallback":
    real, seen = libc.open_tree, []
    def open_tree(dirfd, path, flags):
        if path == "params" and not seen:
            seen.append(1)
            raise OSError(errno.EINVAL, "detached")
        return real(dirfd, path, flags)
    libc.open_tree = open_tree
with ProcFs.open(libc) as procfs, Root.open({str(rootfs)!r}, libc, procfs=procfs) as root:
    bind_params(root, procfs, libc, b"ModifyDeviceFiles: 0\\n", target_path="/proc/version")
print(open({str(rootfs / 'proc/version')!r}).read().strip(), os.listdir({str(rootfs / 'dev')!r}))
try:
    open({str(rootfs / 'proc/version')!r}, "w")
except OSError as err:
    print("write:", err.strerror)
"""
    for mode in ("clone", "fallback"):
        script = (f"mount -t proc proc {rootfs}/proc && mount -t tmpfs tmpfs {rootfs}/dev && "
                  f"exec {shlex.quote(sys.executable)} -c "
                  f"{shlex.quote(program)} {mode}")
        proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                              capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == ["ModifyDeviceFiles: 0 []",
                                            "write: Read-only file system"], proc.stdout


def test_spec_fixtures_are_nvidias() -> None:
    """The committed specs are NVIDIA's, with the hooks the issue names."""
    hooks = {v: [h["args"][1] for h in yaml.safe_load(spec_text(v, "/x"))["containerEdits"]
                 ["hooks"]] for v in ("1.17.8", "1.20.0")}
    assert hooks["1.20.0"] == ["create-symlinks", "create-symlinks", "enable-cuda-compat",
                               "update-ldcache", "disable-device-node-modification",
                               "update-application-profile"]
    assert "update-ldcache" in hooks["1.17.8"] and "create-symlinks" in hooks["1.17.8"]


def test_hooks_load_little(tmp_path: Path) -> None:
    """A CDI hook runs at every container start: its common hooks import none of the modules
    the hook's own hot path avoids (tests/e2e/test_hot_path.py)."""
    import _prctl  # type: ignore[import-not-found]

    from tests.e2e.test_hot_path import FORBIDDEN

    bundle = tmp_path / "b"
    (bundle / "rootfs/proc").mkdir(parents=True)
    (bundle / "config.json").write_text('{"ociVersion": "1.0.2", "root": {"path": "rootfs"}}')
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"ociVersion": "1.0.2", "id": "x", "pid": os.getpid(),
                                 "bundle": str(bundle)}))
    paths = [str(Path(__file__).parents[2]), os.path.dirname(_prctl.__file__)]
    program = f"""
import sys
sys.path.extend({paths!r})
from nvhook.compat.cdihook.nvidia_cdi_hook import main
for argv in (["create-symlinks", "--link", "a::/usr/lib/b"], ["update-application-profile"],
             ["enable-cuda-compat", "--host-driver-version=550.54.15"], ["noop"]):
    assert main([*argv, "--container-spec", {str(state)!r}] if argv != ["noop"] else argv,
                environ={{}}) == 0
print(" ".join(sorted(sys.modules)))
"""
    proc = subprocess.run(["/usr/bin/python3", "-IS", "-c", program], capture_output=True,
                          text=True, timeout=60, check=False, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) & FORBIDDEN == set()
    assert (bundle / "rootfs/usr/lib/b").is_symlink()


# -- one hook does its group's work; the ld.so.cache written, not ldconfig'd ------------------
SESSION = """set -e
mount -t proc proc {rootfs}/proc
{setup}
echo "pid $$" >&2
"""


def spec_setup(rootfs: Path, spec: dict[str, Any], minor: int) -> str:
    """Shell lines that do what a runtime does for NVIDIA's spec: its mounts (bind, ro) and
    one GPU's device node."""
    lines = [f"mount -t tmpfs tmpfs {rootfs}/dev", f"mknod {rootfs}/dev/nvidia{minor} c 195 "
             f"{minor}"]
    for m in spec["containerEdits"].get("mounts") or ():
        target = shlex.quote(str(rootfs) + m["containerPath"])
        lines += [f"mkdir -p $(dirname {target}) && touch {target}",
                  f"mount --bind -o ro {shlex.quote(m['hostPath'])} {target}"]
    return "\n".join(lines)


def run_session(bundle: Path, calls: list[list[str]], setup: str, env: dict[str, str]
                ) -> subprocess.CompletedProcess[str]:
    """`calls` one after the other, as runc runs a container's createContainer hooks: children
    of the "container init" (the shell, whose pid the state names) in its mount namespace."""
    state = ('{"ociVersion": "1.0.2", "id": "x", "status": "creating", "pid": \'$$\', '
             f'"bundle": "{bundle}"}}')
    script = SESSION.format(rootfs=bundle / "rootfs", setup=setup) + "".join(
        f"echo '{state}' | {shlex.join(call)}\n" for call in calls)
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env})


def tree(root: Path) -> dict[str, str]:
    """What a rootfs holds: every entry's kind and its link text or content digest."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        else:
            out[rel] = "dir" if path.is_dir() else "other"
    return out


def cache_entries(rootfs: Path) -> list[tuple[str, str, int]]:
    """The container's ld.so.cache entries, in the file's (the loader's) order."""
    from nvmount.discover.ldcache import parse_ldcache

    path = rootfs / "etc/ld.so.cache"
    return [(e.key, e.value, e.flags) for e in parse_ldcache(path.read_bytes(), str(path))]


def spec_bundle(base: Path, rig: ClientRig, hooks: list[dict[str, Any]]) -> Path:
    base.mkdir()
    copy_rootfs(rig.rootfs, base / "rootfs")
    (base / "config.json").write_text(json.dumps({
        "ociVersion": "1.0.2", "root": {"path": "rootfs"},
        "hooks": {"createContainer": hooks}}))
    return base


RECORDS = Path("/run/nvhook/cdi-hooks")
REPO = Path(__file__).resolve().parents[2]


def test_one_hook_does_the_groups_work_exactly(client_rig: ClientRig, gpu_install: GpuInstall,
                                              tmp_path: Path) -> None:
    """NVIDIA 1.20's six hooks: listed in config.json the first does all their work and the
    others exit at once; not listed, each does its own. The rootfs ends up byte for byte
    the same, and no record is left."""
    spec = spec_for("1.20.0", gpu_install.sim.path)
    hook = str(gpu_install.prefix / "nvidia-cdi-hook")
    calls = [[hook, *h["args"][1:]] for h in spec["containerEdits"]["hooks"]]
    env = ["NVIDIA_CTK_DEBUG=true"]
    listed = spec_bundle(tmp_path / "listed", client_rig,
                         [{"path": c[0], "args": ["nvidia-cdi-hook", *c[1:]], "env": env}
                          for c in calls])
    alone = spec_bundle(tmp_path / "alone", client_rig, [])
    minor = next(g.minor for g in gpu_install.sim.gpus if g.index == 2)
    results = {}
    for bundle in (listed, alone):
        proc = run_session(bundle, calls, spec_setup(bundle / "rootfs", spec, minor),
                           {"NVIDIA_CTK_DEBUG": "true"})
        assert proc.returncode == 0, proc.stderr
        results[bundle.name] = proc.stderr
    assert results["listed"].count("doing the work of the next hook now") == 5
    assert "doing the work" not in results["alone"]
    assert tree(listed / "rootfs") == tree(alone / "rootfs")
    pid = results["listed"].split("pid ", 1)[1].split()[0]
    left = [p for p in RECORDS.iterdir() if p.name.lstrip(".").startswith(f"{pid}-")]
    assert len(left) == 5 and all(p.stat().st_size == 0 for p in left)  # each one taken
    # the driver's entries the writer added are the ones the sandboxed ldconfig adds (it also
    # rebuilds the image's own from its directories: this image's cache names /lib paths)
    config = tmp_path / "ldconfig.toml"
    config.write_text(Path(gpu_install.sim.config_path).read_text().replace(
        "[nvhook]\n", '[nvhook]\nldcache = "ldconfig"\n'))
    sandboxed = spec_bundle(tmp_path / "sandboxed", client_rig, [])
    proc = run_session(sandboxed, calls, spec_setup(sandboxed / "rootfs", spec, minor),
                       {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "NVIDIA_CTK_DEBUG": "true"})
    assert proc.returncode == 0 and "msg=\"ldconfig for " in proc.stderr, proc.stderr
    image = {key for key, _, _ in cache_entries(client_rig.rootfs)}
    added = [[e for e in cache_entries(b / "rootfs") if e[0] not in image]
             for b in (listed, sandboxed)]
    assert added[0] == added[1] and len(added[0]) > 40


def test_a_failing_later_hook_fails_the_first(client_rig: ClientRig, gpu_install: GpuInstall,
                                             tmp_path: Path) -> None:
    """The first hook does the others' work; one failing fails it, as that hook would have
    failed the container, and nothing is recorded for the rest."""
    hook = str(gpu_install.prefix / "nvidia-cdi-hook")
    calls = [[hook, "create-symlinks", "--link", "libx.so.1::/usr/lib/libx.so"],
             [hook, "create-symlinks", "--link", "x::/etc/hostname/below"]]
    bundle = spec_bundle(tmp_path / "b", client_rig, [
        {"path": hook, "args": ["nvidia-cdi-hook", *c[1:]]} for c in calls])
    (bundle / "rootfs/etc/hostname").write_text("x\n")
    proc = run_session(bundle, calls[:1], "", {})
    assert proc.returncode == 1, proc.stderr
    assert "failed to create link [x /etc/hostname/below]" in proc.stderr
    assert (bundle / "rootfs/usr/lib/libx.so").is_symlink()  # its own work came first
    pid = proc.stderr.split("pid ", 1)[1].split()[0]
    assert not [p for p in RECORDS.iterdir() if p.name.lstrip(".").startswith(f"{pid}-")]


def test_the_launchers_front_names_the_container_as_the_hook_does(tmp_path: Path) -> None:
    """The sh front and `record.container_key` name the same process: the topmost one in
    the hook's mount namespace (here the shell unshare started), whatever runs between."""
    from nvhook.launch.write import render

    text = render("cdihook", "/usr/bin/python3", [str(REPO)], version="0", loader=(),
                  xoption="x")
    key = tmp_path / "key.sh"
    key.write_text(text[:text.index("if nvhook_done")] + 'nvhook_key && echo "$nvhook_key"\n')
    python = (f"import sys; sys.path.insert(0, {str(REPO)!r}); from nvhook.launch."
              "hook_records import container_key; print(container_key())")
    script = (f'sh {key}; sh -c "sh {key}"; {shlex.quote(sys.executable)} -c '
              f'{shlex.quote(python)}; echo "$$"')
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    first, nested, from_python, shell = proc.stdout.split()
    assert first == nested == from_python and first.startswith(f"{shell}-"), proc.stdout
