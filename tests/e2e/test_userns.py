"""Today's engines on a cgroup-v2-only node (tests/fixtures/cgroup2_node.py: Debian sid, Podman
5.8, crun 1.28, runc 1.3, nvhook from our .deb), issue 28:

- cgroup_v2: every path's device limits hold with device eBPF alone - the hook (hooks.d) under
  runc and crun, the runtime wrapper (`auto` and `legacy` runtime-mode) and CDI: the container
  opens the GPU it was given (ENXIO: the simulated node has no driver) and not another node
  bound into it (EPERM);
- userns: Podman `--userns=auto` (crun names the intermediate mount point in the state; the
  CDI hook gets bundle "/"; host root has no id on the container's filesystems) through
  hooks.d and CDI, and non-root users inside (`--user 1000:1000 --group-add keep-groups`):
  the GPU opens, the links and the ld.so.cache the hook made are the container root's;
- rootless: rootless Podman (crun) through CDI, default and `--userns=nomap`, and hooks.d: the
  GPU opens; no device limits (the hook runs in a user namespace: no device program, a bound
  node opens too), links owned by the container's root.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from nvhook.admin.configure.hooksd import hook_document, render
from tests.fixtures.cgroup2_node import OPEN_PROBE, add_sim_nodes, open_errors
from tests.fixtures.clientrig.podman import Podman
from tests.fixtures.clients import ClientRig, describe
from tests.fixtures.gpu_clients import GpuInstall, install, nvhook
from tests.fixtures.nodes import Node
from tests.fixtures.nvidia_specs import spec_text

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.usefixtures("client_leak_check")]
OWN_NODE = True  # engine_node below, not nodes.parametrize_nodes's host

LIB = "/usr/lib/x86_64-linux-gnu"
OWNERS = f"stat -c '%n %u:%g' {LIB}/libcuda.so.1 {LIB}/libnvidia-ml.so.1 /etc/ld.so.cache"
PROBE = ["sh", "-c", f"{OPEN_PROBE}; echo owners:; {OWNERS}"]
GIVEN = {"nvidia0": "ENXIO", "nvidiactl": "ENXIO", "nvidia-uvm": "ENXIO"}
NO_CGROUP = ["--pids-limit=0"]  # the fresh cgroup2 has no controllers (they stay on v1)


@pytest.fixture(scope="module")
def engine_node(cgroup2_node: Node) -> Node:
    """This module's rig runs on the cgroup-v2-only sid node."""
    return cgroup2_node


@pytest.fixture(scope="module")
def v2(client_rig: ClientRig, gpu_install: GpuInstall) -> V2Rig:
    return V2Rig(client_rig, gpu_install)


class V2Rig:
    """The simulated driver's nodes in the node's /dev, a CDI spec in its /etc/cdi, a hooks dir
    with the legacy hook, and an `auto` runtime-mode install besides gpu_install's."""

    def __init__(self, rig: ClientRig, gpu: GpuInstall) -> None:
        self.rig, self.gpu, self.node = rig, gpu, rig.node
        add_sim_nodes(self.node, Path(gpu.sim.path))
        self.generate()
        add_containers_user(self.node)
        self.hooks = rig.short_dir("nvhook-hooks-")
        self.hooks.chmod(0o755)
        self.log = self.hooks / "hook.log"  # the hook's debug log: what it did, for failures
        config = self.hooks / "config.toml"
        config.write_text(Path(gpu.sim.config_path).read_text().replace(
            "[nvidia-container-cli]\n", f'[nvidia-container-cli]\ndebug = "{self.log}"\n', 1))
        config.chmod(0o644)
        doc = hook_document(str(gpu.prefix / "nvidia-container-runtime-hook"), str(config))
        log = f"{self.log}.stderr"  # a rootless hook cannot write it: then stderr stays
        doc["hook"]["args"] = ["sh", "-c", f'if ( : 2>>{log} ) 2>/dev/null; then exec "$0" '
                               f'prestart 2>>{log}; else exec "$0" prestart; fi',
                               doc["hook"]["path"]]
        doc["hook"]["path"] = "/bin/sh"  # its errors in the log too
        (self.hooks / "oci-nvidia-hook.json").write_text(render(doc))
        (self.hooks / "oci-nvidia-hook.json").chmod(0o644)
        self.auto_prefix = gpu.prefix.parent / "auto-bin"
        install(self.auto_prefix, gpu.prefix.parent / "auto.toml", Path(gpu.sim.config_path),
                node=self.node)
        self.pods: dict[str, Podman] = {}

    def generate(self) -> None:
        """The CDI spec of the simulated driver in the node's /etc/cdi (its hook: the node's
        launcher)."""
        spec = self.node.path("/etc/cdi/nvidia.yaml")
        spec.parent.mkdir(parents=True, exist_ok=True)
        proc = nvhook("--config", self.gpu.sim.config_path, "cdi", "generate", "--output",
                      str(spec), "--hook-path", str(self.gpu.prefix / "nvhook-hook"))
        assert proc.returncode == 0, proc.stderr
        spec.chmod(0o644)

    def hook_log(self) -> str:
        """The legacy hook's log of the last container (for failure messages)."""
        out = "\n--- hook log:\n"
        for log in (self.log, Path(f"{self.log}.stderr")):
            out += log.read_text()[-3000:] if log.exists() else "-"
        return out

    def denied(self) -> list[str]:
        """A GPU node the container is not given, bound in: the device cgroup must refuse it."""
        return ["-v", f"{self.gpu.sim.path}/dev/nvidia1:/dev/nvidia1"]

    def podman(self, runtime: str, rootless: bool = False) -> Podman:
        key = f"{runtime}-{rootless}"
        if key not in self.pods:
            make = self.rig.rootless_podman if rootless else self.rig.podman
            self.pods[key] = make(runtime=runtime, hooks_dir=self.hooks)
        return self.pods[key]


def add_containers_user(node: Node) -> None:
    """Podman's --userns=auto takes its ranges from the `containers` user's subuid/subgid (in
    the node's own copy of /etc: a range no other user of this machine has)."""
    for table, line in (("passwd", "containers:x:999:999::/nonexistent:/usr/sbin/nologin"),
                        ("group", "containers:x:999:"), ("subuid", AUTO_RANGE),
                        ("subgid", AUTO_RANGE)):
        path = node.path(f"/etc/{table}")
        have = path.read_text() if path.exists() else ""
        if not any(ln.startswith("containers:") for ln in have.splitlines()):
            path.write_text(have + line + "\n")


AUTO_RANGE = "containers:3000000:1000000"


def run(v2: V2Rig, pod: Podman, flags: list[str], *, runtime: str | None = None,
        image: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(open errors by node, owner by path) of PROBE in a container."""
    v2.log.unlink(missing_ok=True)
    Path(f"{v2.log}.stderr").unlink(missing_ok=True)
    proc = pod.run(PROBE, flags=[*NO_CGROUP, *flags], runtime=runtime, image=image)
    assert proc.returncode == 0, describe(proc) + v2.hook_log()
    errors = open_errors(proc.stdout.partition("owners:")[0])
    owners = dict(line.rsplit(" ", 1) for line in
                  proc.stdout.partition("owners:\n")[2].splitlines() if " " in line)
    return errors, owners


def wrong(errors: dict[str, str], denied: str | None) -> dict[str, str]:
    """The nodes that did not open as they should: the given GPU and control nodes (ENXIO),
    the bound GPU 1 (`denied`), no other GPU present."""
    want = {**GIVEN, **({"nvidia1": denied} if denied else {})}
    out = {n: errors.get(n, "missing") for n, e in want.items() if errors.get(n) != e}
    out.update({n: "present" for n in errors if n[len("nvidia"):].isdigit()
                and n not in ("nvidia0", "nvidia1")})
    return out


def not_roots(owners: dict[str, str]) -> dict[str, str]:
    """The links the hook made that the container's root does not own."""
    return {p: owners.get(p, "missing") for p in (f"{LIB}/libcuda.so.1",
                                                  f"{LIB}/libnvidia-ml.so.1")
            if owners.get(p) != "0:0"}


LEGACY = ["-e", "NVIDIA_VISIBLE_DEVICES=0"]
CDI = ["--device", "nvidia.com/gpu=0"]


# -- cgroup v2 only: device limits on every path ----------------------------------------------
@pytest.mark.cgroup_v2
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_v2_hook_limits_devices(v2: V2Rig, runtime: str) -> None:
    errors, _ = run(v2, v2.podman(runtime), [*LEGACY, *v2.denied()])
    assert not wrong(errors, "EPERM"), errors


@pytest.mark.cgroup_v2
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_v2_wrapper_limits_devices(v2: V2Rig, mode: str) -> None:
    prefix = v2.auto_prefix if mode == "auto" else v2.gpu.prefix
    errors, _ = run(v2, v2.podman("runc"), [*LEGACY, *v2.denied()],
                    runtime=str(prefix / "nvidia-container-runtime"))
    assert not wrong(errors, "EPERM"), errors


@pytest.mark.cgroup_v2
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_v2_cdi_limits_devices(v2: V2Rig, runtime: str) -> None:
    errors, _ = run(v2, v2.podman(runtime), [*CDI, *v2.denied()])
    assert not wrong(errors, "EPERM"), errors


# -- user namespaces and non-root users --------------------------------------------------------
@pytest.mark.userns
@pytest.mark.parametrize("path", ["hooks.d", "cdi"])
def test_userns_auto(v2: V2Rig, path: str) -> None:
    """Podman --userns=auto with crun: the intermediate mount point, a "/" bundle for the CDI
    hook, host root without an id in the rootfs."""
    errors, owners = run(v2, v2.podman("crun"),
                         ["--userns=auto", *(LEGACY if path == "hooks.d" else CDI),
                          *v2.denied()])
    # CDI: crun's device program holds (its rules name the spec's nodes). hooks.d: crun 1.28
    # attaches no device program to a --userns=auto container without device rules under a
    # --cgroup-parent (the rig's; under Podman's default parent it does, and the hook extends
    # it): every node opens, with or without nvhook; the hook says so and adds nothing
    assert not wrong(errors, "EPERM" if path == "cdi" else "ENXIO"), f"{errors}{v2.hook_log()}"
    if path == "hooks.d":
        assert "has no device program: all devices are allowed" in v2.hook_log()
    assert not not_roots(owners), owners
    assert owners.get("/etc/ld.so.cache") == "0:0", owners


@pytest.mark.userns
@pytest.mark.parametrize("path", ["hooks.d", "cdi"])
def test_non_root_user_opens_its_gpu(v2: V2Rig, path: str) -> None:
    errors, owners = run(v2, v2.podman("crun"),
                         ["--user", "1000:1000", "--group-add", "keep-groups",
                          *(LEGACY if path == "hooks.d" else CDI)])
    assert not wrong(errors, None), errors
    assert not not_roots(owners), owners


@pytest.mark.userns
def test_userns_auto_nvidias_spec(v2: V2Rig) -> None:
    """NVIDIA 1.20's own spec (its createContainer hooks: /usr/bin/nvidia-cdi-hook, nvhook's
    drop-in from the .deb) under --userns=auto: the hooks run inside the container's user
    namespace, find the rootfs in crun's `root` and make links the container's root owns
    (NVIDIA's own nvidia-cdi-hook fails there: issue 28)."""
    ours = v2.node.path("/etc/cdi/nvidia.yaml")
    kept = ours.read_bytes()
    ours.write_text(spec_text("1.20.0", v2.gpu.sim.path))
    try:
        errors, owners = run(v2, v2.podman("crun"), ["--userns=auto", "--device",
                                                     "nvidia.com/gpu=0"])
    finally:
        ours.write_bytes(kept)
    assert not wrong(errors, None), errors
    assert not not_roots(owners), owners


@pytest.mark.userns
def test_image_user_in_video_opens_its_gpu(v2: V2Rig, tmp_path: Path) -> None:
    """Nodes 0660 root:video (44), as a distribution's udev rules make them, in the CDI spec:
    the image's user `gpu`, a member of `video` in the image's /etc/group, opens its GPU.
    (Podman 5.8 with crun makes the --user the nodes' owner, so a user outside video opens
    them too: the group is not what is tested for a non-member.)"""
    image = tmp_path / "rootfs"
    shutil.copytree(v2.rig.rootfs, image, symlinks=True)
    (image / "etc/passwd").write_text((image / "etc/passwd").read_text()
                                      + "gpu:x:1000:1000::/:/bin/sh\n")
    group = (image / "etc/group").read_text().replace("video:x:44:\n", "video:x:44:gpu\n")
    (image / "etc/group").write_text(group + "gpu:x:1000:\n")
    pod = v2.podman("crun")
    default = pod.image
    ref = pod.import_rootfs(image, "nvhook.test/video:latest")
    pod.image = default
    nodes = [Path(v2.gpu.sim.path) / "dev" / n
             for n in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")]
    spec = v2.node.path("/etc/cdi/nvidia.yaml")
    kept = spec.read_bytes()
    try:
        for node in nodes:
            os.chown(node, 0, 44)
            os.chmod(node, 0o660)
        v2.generate()  # the spec's nodes carry the host nodes' mode and group
        member, _ = run(v2, pod, ["--user", "gpu", *CDI], image=ref)
    finally:
        for node in nodes:
            os.chmod(node, 0o666)
            os.chown(node, 0, 0)
        spec.write_bytes(kept)
    assert not wrong(member, None), member


# -- rootless ----------------------------------------------------------------------------------
@pytest.mark.rootless
@pytest.mark.parametrize("how", ["cdi", "cdi-nomap", "hooks.d"])
def test_rootless(v2: V2Rig, how: str) -> None:
    flags = {"cdi": CDI, "cdi-nomap": ["--userns=nomap", *CDI], "hooks.d": LEGACY}[how]
    errors, owners = run(v2, v2.podman("crun", rootless=True), [*flags, *v2.denied()])
    assert not wrong(errors, "ENXIO"), errors  # the hook is in a user namespace: no limits
    assert not not_roots(owners), owners
