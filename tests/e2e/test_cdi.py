"""CDI end to end: `nvhook --config X cdi generate` after `nvhook install` (no --hook-path: the
spec names the installed launcher), Podman 4.3 (private storage, an image from `podman
import`) runs `--device nvidia.com/gpu=N` (index, UUID, MIG, `all`, a MIG-enabled full GPU)
and the container has what the legacy hook gives for the same request (mounts, nodes, links,
ld.so.cache, procfs view, application profile); the spec's one hook finishes it. The runtime
wrapper (runc) resolves CDI requests through the request's policy, from nvhook's specs and
from NVIDIA's (tests/data/nvidia-cdi: nvidia-ctk 1.17.8 and 1.20.0, whose hooks
/usr/bin/nvidia-cdi-hook are pointed at a no-op in a private mount namespace: running them is
the nvidia-cdi-hook drop-in's job).

Podman 4.3 reads specs only from /etc/cdi and /var/run/cdi: it runs in a private mount
namespace whose /etc is an overlay holding the spec, so the host's /etc is never touched."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvhook.admin.configure.hooksd import hook_document, render
from nvhook.dev.sim import SimRoot, create_sim_root
from tests.fixtures.clientrig import podman as podman_module
from tests.fixtures.clientrig.podman import Podman
from tests.fixtures.clients import ClientRig, describe
from tests.fixtures.gpu_clients import PROBE, GpuInstall, gpu_listing, nvhook
from tests.fixtures.sim import SIM_MIG_SPEC

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.usefixtures("client_leak_check")]

OVERLAY = """#!/bin/sh
# {what} in a private mount namespace whose {lower} is an overlay with {upper} on top
exec unshare -m --propagation private sh -c 'mount -t overlay overlay \\
  -o lowerdir={lower},upperdir={upper},workdir={work} {lower} && exec {program} "$@"' sh "$@"
"""
NVIDIA_SPECS = Path(__file__).resolve().parent.parent / "data" / "nvidia-cdi"
# what a container has of the driver: mount points (with ro/nosuid/nodev/noexec), device
# nodes (numbers), links, the ld.so.cache, the procfs view, the application profile
VIEW = r"""
echo mounts:; grep -E ' /(usr|lib|etc|proc/driver|run/nvidia|tmp/nvidia)' /proc/self/mountinfo |
  while read -r _ _ _ _ point opts _; do
    echo "$point $(echo "$opts" | tr , '\n' | grep -E '^(ro|nosuid|nodev|noexec)$' | sort |
      tr '\n' ,)"; done | sort
echo nodes:; find /dev -type c | sort | while read -r n; do echo "$n $(stat -c '%t:%T' "$n")"; done
echo links:; find /usr /lib /etc /dev/dri -type l 2>/dev/null | sort | while read -r l; do
  echo "$l -> $(readlink "$l")"; done
echo ldcache:; md5sum /etc/ld.so.cache
echo procfs:; find /proc/driver/nvidia | sort; grep ModifyDeviceFiles /proc/driver/nvidia/params
echo profile:; cat /etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf 2>&1; echo
nvidia-smi -L
"""


def overlay(rig: ClientRig, what: str, lower: str, program: str) -> tuple[Path, Path]:
    """(a wrapper running `program` with an overlay on `lower`, the overlay's upper dir)."""
    work = rig.short_dir("nvhook-cdi-")
    upper, scratch = work / "upper", work / "work"
    upper.mkdir()
    scratch.mkdir()
    wrapper = work / "run"
    wrapper.write_text(OVERLAY.format(what=what, lower=lower, upper=upper, work=scratch,
                                      program=program))
    wrapper.chmod(0o755)
    return wrapper, upper


def generate(install: GpuInstall, config: str, out: Path) -> dict[str, Any]:
    """`nvhook --config X cdi generate` as an installed node runs it: the install's prefix
    on PATH, no --hook-path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    path = f"{install.prefix}:/usr/sbin:/usr/bin:/sbin:/bin"
    argv = ("--config", config, "cdi", "generate", "--output", str(out))
    if install.node.is_host:
        proc = nvhook(*argv, env={**os.environ, "PATH": path})
    else:  # the node's nvhook (our .deb's), as that node runs it
        proc = install.node.run("/usr/bin/nvhook", *argv, env={"PATH": path, "LANG": "C.UTF-8"})
    assert proc.returncode == 0, proc.stderr
    spec: dict[str, Any] = yaml.safe_load(out.read_text())  # JSON is YAML
    return spec


class CdiPodman:
    """Podman that sees one generated spec (/etc/cdi overlay) and has the legacy hook in its
    hooks dir (it adds nothing to a CDI container: the spec voids NVIDIA_VISIBLE_DEVICES)."""

    def __init__(self, rig: ClientRig, install: GpuInstall, sim: SimRoot) -> None:
        self.wrapper, upper = overlay(rig, "podman", "/etc", "/usr/bin/podman")
        self.spec = generate(install, sim.config_path, upper / "cdi" / "nvidia.yaml")
        hooks = rig.short_dir("nvhook-hooks-")
        (hooks / "oci-nvidia-hook.json").write_text(render(hook_document(
            str(install.prefix / "nvidia-container-runtime-hook"), sim.config_path)))
        self.podman: Podman = rig.podman(hooks_dir=hooks)
        self.podman.import_rootfs(rig.rootfs, "nvhook.test/busybox:latest")

    def run(self, monkeypatch: pytest.MonkeyPatch, command: list[str],
            flags: list[str]) -> Any:
        monkeypatch.setattr(podman_module, "PODMAN", self.wrapper)
        return self.podman.run(command, flags=flags)


@pytest.fixture(scope="module")
def cdi_podman(client_rig: ClientRig, gpu_install: GpuInstall) -> CdiPodman:
    return CdiPodman(client_rig, gpu_install, gpu_install.sim)


@pytest.fixture(scope="module")
def mig_podman(client_rig: ClientRig, gpu_install: GpuInstall,
               tmp_path_factory: pytest.TempPathFactory) -> CdiPodman:
    base = client_rig.short_dir("nvhook-mig-")
    base.chmod(0o755)
    sim = create_sim_root(base / "sim", SIM_MIG_SPEC,
                          cache_dir=tmp_path_factory.mktemp("nvsim-mig-cache"))
    return CdiPodman(client_rig, gpu_install, sim)


def views(pod: CdiPodman, monkeypatch: pytest.MonkeyPatch, name: str,
          legacy: str) -> tuple[str, str]:
    cdi = pod.run(monkeypatch, ["sh", "-c", VIEW], ["--device", f"nvidia.com/gpu={name}"])
    assert cdi.returncode == 0, describe(cdi)
    old = pod.run(monkeypatch, ["sh", "-c", VIEW],
                  ["-e", f"NVIDIA_VISIBLE_DEVICES={legacy}", "-e",
                   "NVIDIA_DRIVER_CAPABILITIES=all"])
    assert old.returncode == 0, describe(old)
    return cdi.stdout, old.stdout


def test_spec_names_the_installed_launcher_once(cdi_podman: CdiPodman,
                                               gpu_install: GpuInstall) -> None:
    (hook,) = cdi_podman.spec["containerEdits"]["hooks"]
    assert hook["path"] == str(gpu_install.prefix / "nvhook-hook")
    assert hook["args"][:4] == ["nvhook-hook", "cdi", "hook", "apply"]
    assert not any("hooks" in d["containerEdits"] for d in cdi_podman.spec["devices"])


@pytest.mark.today_engines
@pytest.mark.parametrize("which", ["index", "uuid", "all"])
def test_podman_cdi_is_the_legacy_view(cdi_podman: CdiPodman, gpu_install: GpuInstall,
                                       monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    gpu = next(g for g in gpu_install.sim.gpus if g.index == 3)
    name = {"index": "3", "uuid": gpu.uuid, "all": "all"}[which]
    cdi, legacy = views(cdi_podman, monkeypatch, name, "all" if which == "all" else "3")
    assert cdi == legacy
    listed, _ = gpu_listing(cdi.replace("\nnodes:", "\n"))
    assert listed == ([g.uuid for g in gpu_install.sim.gpus] if which == "all" else [gpu.uuid])
    assert f"/proc/driver/nvidia/gpus/{gpu.proc_bus_id}" in cdi
    assert "ModifyDeviceFiles: 0" in cdi


@pytest.mark.parametrize("name", ["0:1", "1:6", "0", "2", "all"],
                         ids=["mig", "mig-7x", "mig-enabled-gpu", "mig-enabled-no-devices",
                              "all"])
def test_podman_cdi_mig_is_the_legacy_view(mig_podman: CdiPodman, name: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cdi, legacy = views(mig_podman, monkeypatch, name, name)
    assert cdi == legacy
    if ":" not in name and name != "all":  # a MIG-enabled full GPU keeps its procfs entry
        sim = mig_podman.spec["containerEdits"]["hooks"][0]["args"]
        assert any(a.startswith(f"--device-proc={name}=") for a in sim)
        assert cdi.count("/proc/driver/nvidia/gpus/0000:") >= 1


# -- the runtime wrapper (runc) -------------------------------------------------------------

def _wrapped(client_rig: ClientRig, gpu_install: GpuInstall, tmp_path: Path, spec_dir: Path,
             env: list[str], args: list[str], runtime: Path | None = None,
             edit: Any = None, monkeypatch: pytest.MonkeyPatch | None = None,
             settings: str = "") -> Any:
    import tests.e2e.test_runtimes as runtimes
    from tests.e2e.test_runtimes import RUNC, recorder, wrapped_run, wrapper_config

    script, copy = recorder(tmp_path, runtime or RUNC)
    config = wrapper_config(gpu_install, tmp_path / "c.toml", script, spec=False)
    config.write_text(f'{settings}nvidia-container-runtime.modes.cdi.spec-dirs = '
                      f'["{spec_dir}"]\n' + config.read_text())
    if edit is not None and monkeypatch is not None:
        original = runtimes.container_spec

        def edited(*a: Any, **k: Any) -> dict[str, Any]:
            doc = original(*a, **k)
            edit(doc)
            return doc

        monkeypatch.setattr(runtimes, "container_spec", edited)
    proc, _, _ = wrapped_run(client_rig, gpu_install, tmp_path, config, env, args)
    received = json.loads(copy.read_text()) if copy.exists() else {}
    return proc, received


@pytest.mark.today_engines
@pytest.mark.parametrize("how", ["env", "annotation"])
def test_wrapper_resolves_cdi_requests(client_rig: ClientRig, gpu_install: GpuInstall,
                                       tmp_path: Path, how: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrapper applies the spec's edits for `nvidia.com/gpu=2` named in
    NVIDIA_VISIBLE_DEVICES or in a cdi.k8s.io/ annotation, then runc runs the spec's hook."""
    spec_dir = tmp_path / "cdi"
    generate(gpu_install, gpu_install.sim.config_path, spec_dir / "nvidia.json")
    env = ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2"] if how == "env" else ["A=b"]

    def annotate(doc: dict[str, Any]) -> None:
        doc["annotations"] = {"cdi.k8s.io/nvidia-device-plugin_abc": "nvidia.com/gpu=2"}

    proc, received = _wrapped(client_rig, gpu_install, tmp_path, spec_dir, env, PROBE,
                              edit=annotate if how == "annotation" else None,
                              monkeypatch=monkeypatch)
    assert proc.returncode == 0, describe(proc)
    assert gpu_listing(proc.stdout) == gpu_install.expect([2]), describe(proc)
    (hook,) = received["hooks"]["createRuntime"]
    assert hook["args"][3] == "apply"
    assert not received["hooks"].get("prestart")  # no legacy hook for a CDI request
    assert "NVIDIA_VISIBLE_DEVICES=void" in received["process"]["env"]


def test_wrapper_cdi_name_of_unprivileged_container_under_strict_policy(
        client_rig: ClientRig, gpu_install: GpuInstall, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 class 1: refused exactly as an index would be (no device, no hook)."""
    spec_dir = tmp_path / "cdi"
    generate(gpu_install, gpu_install.sim.config_path, spec_dir / "nvidia.json")

    def strict(doc: dict[str, Any]) -> None:
        doc["process"]["capabilities"] = {k: ["CAP_CHOWN"] for k in (
            "bounding", "effective", "permitted")}

    log = tmp_path / "runtime.log"
    proc, received = _wrapped(client_rig, gpu_install, tmp_path, spec_dir,
                              ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"],
                              ["sh", "-c", "ls /dev; ls /proc/driver/nvidia 2>&1; true"],
                              edit=strict, monkeypatch=monkeypatch, settings=(
                                  "accept-nvidia-visible-devices-envvar-when-unprivileged = "
                                  f'false\nnvidia-container-runtime.debug = "{log}"\n'))
    assert proc.returncode == 0, describe(proc)
    assert "nvidia" not in proc.stdout.replace("/proc/driver/nvidia", "")
    # the warning goes to the wrapper's log files, never to the container's own stderr
    assert log.read_text().count("Ignoring devices requested by environment variable(s) in "
                                 "unprivileged container: [NVIDIA_VISIBLE_DEVICES]") == 1
    assert "Ignoring devices" not in proc.stderr
    assert not received.get("hooks", {}).get("createRuntime")
    assert not any(str(d.get("path", "")).startswith("/dev/nvidia")
                   for d in received.get("linux", {}).get("devices", []))


def test_hook_grants_from_the_request_not_the_spec(
        client_rig: ClientRig, gpu_install: GpuInstall, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 class 2: a node and a grant variable the caller added for another GPU, without
    an allow rule, give that GPU nothing (no rule, no procfs entry)."""
    spec_dir = tmp_path / "cdi"
    generate(gpu_install, gpu_install.sim.config_path, spec_dir / "nvidia.json")
    other = next(g for g in gpu_install.sim.gpus if g.index == 5)

    def smuggle(doc: dict[str, Any]) -> None:
        doc["process"]["env"].append("NVHOOK_CDI_DEVICE_5=5")
        doc["linux"]["devices"] = [{"path": f"/dev/nvidia{other.minor}", "type": "c",
                                    "major": 195, "minor": other.minor}]

    gpu2 = next(g for g in gpu_install.sim.gpus if g.index == 2)
    rules = "/sys/fs/cgroup/devices/devices.list"
    proc, received = _wrapped(client_rig, gpu_install, tmp_path, spec_dir,
                              ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2"],
                              ["sh", "-c", "ls /proc/driver/nvidia/gpus; for m in "
                               f"{gpu2.minor} {other.minor}; do grep -c \"^c 195:$m \" "
                               f"{rules} || true; done"],
                              edit=smuggle, monkeypatch=monkeypatch)
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.split() == [gpu2.proc_bus_id, "1", "0"], describe(proc)
    assert not any(r.get("minor") == other.minor for r in
                   received["linux"]["resources"]["devices"])


def test_wrapper_names_an_unknown_cdi_device(client_rig: ClientRig, gpu_install: GpuInstall,
                                             tmp_path: Path) -> None:
    spec_dir = tmp_path / "cdi"
    generate(gpu_install, gpu_install.sim.config_path, spec_dir / "nvidia.json")
    proc, _ = _wrapped(client_rig, gpu_install, tmp_path, spec_dir,
                       ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=9"], ["true"])
    assert proc.returncode != 0
    assert "unresolvable CDI devices nvidia.com/gpu=9: not in the specs of" in proc.stderr
    assert "nvidia.com/gpu=0" in proc.stderr  # what there is


def test_wrapper_reports_the_real_cause(client_rig: ClientRig, gpu_install: GpuInstall,
                                        tmp_path: Path) -> None:
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
                                          "- name: '0'\n  containerEdits:\n    deviceNodes:\n"
                                          "    - path: /dev/nvidia0\n      major: zero\n")
    proc, _ = _wrapped(client_rig, gpu_install, tmp_path, spec_dir,
                       ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], ["true"])
    assert proc.returncode != 0
    assert "devices[0].containerEdits.deviceNodes[0].major: not an integer" in proc.stderr


@pytest.mark.parametrize("version", ["1.17.8", "1.20.0"])
def test_wrapper_injects_nvidias_spec(client_rig: ClientRig, gpu_install: GpuInstall,
                                      tmp_path: Path, version: str) -> None:
    """nvidia-ctk's spec (default options) for the same driver: GPU 1's node and the driver
    files are in the container. Its hooks (/usr/bin/nvidia-cdi-hook) run as a no-op: runc
    runs in a private mount namespace whose /usr/bin is an overlay holding a no-op there."""
    from tests.e2e.test_runtimes import RUNC

    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    text = (NVIDIA_SPECS / f"nvidia-ctk-{version}.yaml").read_text()
    (spec_dir / "nvidia.yaml").write_text(text.replace("@SIM_ROOT@", gpu_install.sim.path))
    runc, upper = overlay(client_rig, "runc", "/usr/bin", str(RUNC))
    (upper / "nvidia-cdi-hook").write_text("#!/bin/sh\nexit 0\n")
    (upper / "nvidia-cdi-hook").chmod(0o755)
    gpu1 = next(g for g in gpu_install.sim.gpus if g.index == 1)
    proc, received = _wrapped(client_rig, gpu_install, tmp_path, spec_dir,
                              ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"],
                              ["sh", "-c", "ls /dev | grep -E '^nvidia[0-9]+$'; ls "
                               "/usr/lib/x86_64-linux-gnu | grep -c libnvidia-ml.so"],
                              runtime=runc)
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.split() == [f"nvidia{gpu1.minor}", "1"], describe(proc)
    hooks = received["hooks"]["createContainer"]
    assert all(h["path"] == "/usr/bin/nvidia-cdi-hook" for h in hooks)
    assert any(isinstance(a, str) and a.startswith("libcuda.so.1::") for h in hooks
               for a in h["args"])  # `::` arguments stay strings


def test_one_hook_process_per_container(client_rig: ClientRig, gpu_install: GpuInstall,
                                        tmp_path: Path) -> None:
    """The spec's hook runs once per container, whatever the number of devices."""
    counter = tmp_path / "count"
    launcher = tmp_path / "nvhook-hook"
    launcher.write_text(f"#!/bin/sh\necho x >> {counter}\n"
                        f'exec {gpu_install.prefix}/nvhook-hook "$@"\n')
    launcher.chmod(0o755)
    spec_dir = tmp_path / "cdi"
    proc = nvhook("--config", gpu_install.sim.config_path, "cdi", "generate", "--hook-path",
                  str(launcher), "--output", str(spec_dir / "nvidia.json"))
    assert proc.returncode == 0, proc.stderr
    proc, _ = _wrapped(client_rig, gpu_install, tmp_path, spec_dir,
                       ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1,nvidia.com/gpu=4"], PROBE)
    assert proc.returncode == 0, describe(proc)
    assert gpu_listing(proc.stdout) == gpu_install.expect([1, 4])
    assert counter.read_text() == "x\n"



def test_read_only_optional_targets_are_warnings(client_rig: ClientRig, gpu_install: GpuInstall,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook never fails a container over an optional file: /etc/nvidia (the application
    profile) and the gbm directory (a graphics link) are read-only binds in the container."""
    spec_dir = tmp_path / "cdi"
    generate(gpu_install, gpu_install.sim.config_path, spec_dir / "nvidia.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    targets = ("/etc/nvidia", "/usr/lib/x86_64-linux-gnu/gbm")

    def read_only(doc: dict[str, Any]) -> None:
        doc["mounts"] += [{"destination": d, "type": "bind", "source": str(empty),
                           "options": ["rbind", "ro"]} for d in targets]

    proc, _ = _wrapped(client_rig, gpu_install, tmp_path, spec_dir,
                       ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2"],
                       ["sh", "-c", PROBE[2] + "; echo ro:; find " + " ".join(targets)],
                       edit=read_only, monkeypatch=monkeypatch)
    assert proc.returncode == 0, describe(proc)
    head, _, found = proc.stdout.partition("ro:\n")
    assert gpu_listing(head) == gpu_install.expect([2]), describe(proc)
    assert found.split() == list(targets), describe(proc)  # nothing written, nothing failed
