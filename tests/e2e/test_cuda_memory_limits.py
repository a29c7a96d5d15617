"""`nvidia-cdi-hook apply-cuda-memory-limits` (NVIDIA's #1995, expected in 1.21; issue 31):
in a runc container on cgroup v2 (runc in a private mount namespace whose /sys/fs/cgroup is a
cgroup2 mount), the hook given the container's GPU sets NVML's per-cgroup limit from
NVIDIA_GPU_MEMORY_REQUEST(S)/LIMIT(S); a CUDA program in the container (the simulated
libcuda, which enforces what the simulated NVML recorded for its cgroup) sees the limit as its
total memory and cannot allocate past it. Without the variables nothing is limited; bad values
fail the container in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvhook.dev.demo.bundle import HookEntry
from nvhook.dev.sim import SimRoot, SimSpec
from tests.fixtures.containers import CGROUP2_RUNC, ContainerFactory, RootfsCache, rig_for
from tests.fixtures.required import missing
from tests.fixtures.sim import SimRootFactory

pytestmark = [pytest.mark.e2e, pytest.mark.root]

SOURCE = Path(__file__).resolve().parent.parent / "fixtures" / "cuda_alloc.c"


@pytest.fixture(scope="module")
def alloc_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cuda-alloc") / "cuda_alloc"
    proc = subprocess.run(["gcc", "-O1", "-Wall", str(SOURCE), "-o", str(out), "-ldl"],
                          capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        missing(f"gcc cannot build {SOURCE.name}: {proc.stderr.strip()[:200]} (apt-get install "
                "gcc libc6-dev)")
    return out


@pytest.fixture(scope="module")
def rig(sim_root_factory: SimRootFactory, tmp_path_factory: pytest.TempPathFactory,
        rootfs_cache: RootfsCache, hook_launcher: Path) -> tuple[SimRoot, ContainerFactory]:
    if not Path("/sys/fs/cgroup").is_dir():
        missing("no /sys/fs/cgroup to mount cgroup2 on")
    sim = sim_root_factory(SimSpec(gpus=2), private=True)  # the hook writes its proc dirs
    gpu = rig_for(sim, tmp_path_factory, rootfs_cache, CGROUP2_RUNC, hook_launcher,
                  "memlimits").containers
    return sim, gpu


def _run(rig: tuple[SimRoot, ContainerFactory], launcher: Path, program: Path,
         env: tuple[str, ...], *mib: int, check: bool = True) -> Any:
    sim, gpu = rig
    hook = HookEntry(str(launcher.parent / "nvidia-cdi-hook"),
                     ("nvidia-cdi-hook", "apply-cuda-memory-limits", "--driver-root", sim.path,
                      "--gpu-id", sim.gpus[0].uuid))

    def edit(doc: dict[str, Any]) -> None:
        doc.setdefault("hooks", {})["createRuntime"] = [hook.to_json()]

    def prepare(rootfs: Path) -> None:
        (rootfs / "cuda_alloc").write_bytes(program.read_bytes())
        (rootfs / "cuda_alloc").chmod(0o755)

    return gpu.sh(f"/cuda_alloc {' '.join(map(str, mib))}", check=check,
                  env=("NVIDIA_VISIBLE_DEVICES=0", *env), edit_spec=edit, prepare=prepare)


def test_the_limit_holds_in_the_container(rig: tuple[SimRoot, ContainerFactory],
                                          hook_launcher: Path, alloc_program: Path) -> None:
    env = ("NVIDIA_GPU_MEMORY_REQUEST=512", "NVIDIA_GPU_MEMORY_LIMITS=1024")
    result = _run(rig, hook_launcher, alloc_program, env, 600, 400, 100)
    assert result.stdout.splitlines() == [
        "total 1024", "alloc 600 ok", "alloc 400 ok", "alloc 100 error 2"], result.describe()


def test_no_variables_no_limit(rig: tuple[SimRoot, ContainerFactory], hook_launcher: Path,
                               alloc_program: Path) -> None:
    sim, _ = rig
    result = _run(rig, hook_launcher, alloc_program, ("NVIDIA_GPU_MEMORY_LIMIT=1024",), 2048)
    total = sim.gpus[0].memory_mib if hasattr(sim.gpus[0], "memory_mib") else None
    lines = result.stdout.splitlines()
    assert lines[1] == "alloc 2048 ok" and lines[0] != "total 1024", result.describe()
    if total is not None:
        assert lines[0] == f"total {total}"


@pytest.mark.parametrize(("env", "message"), [
    (("NVIDIA_GPU_MEMORY_REQUEST=2048", "NVIDIA_GPU_MEMORY_LIMIT=1024"),
     "memory request (2048 MiB, NVIDIA_GPU_MEMORY_REQUEST) exceeds memory limit (1024 MiB"),
    (("NVIDIA_GPU_MEMORY_REQUEST=1", "NVIDIA_GPU_MEMORY_LIMIT=1G"),
     "NVIDIA_GPU_MEMORY_LIMIT='1G' is not a number of MiB"),
])
def test_bad_values_fail_the_container_in_one_line(
        rig: tuple[SimRoot, ContainerFactory], hook_launcher: Path, alloc_program: Path,
        env: tuple[str, ...], message: str) -> None:
    result = _run(rig, hook_launcher, alloc_program, env, 1, check=False)
    assert result.returncode != 0 and message in result.stderr, result.describe()
    assert "Traceback" not in result.stderr


def test_the_legacy_hook_behind_the_setting(rig: tuple[SimRoot, ContainerFactory],
                                            hook_launcher: Path, alloc_program: Path,
                                            tmp_path: Path) -> None:
    """`[nvhook] cuda-memory-limits = true`: nvhook's own prestart hook sets the limits for the
    container's GPUs (off by default: the hook's path loads nothing for it)."""
    from nvhook.dev.demo.driver import nvhook_hook_entry, sim_prestart_entry

    sim, gpu = rig
    config = tmp_path / "config.toml"
    text = Path(sim.config_path).read_text()
    assert "[nvhook]\n" in text
    config.write_text(text.replace("[nvhook]\n", "[nvhook]\ncuda-memory-limits = true\n", 1))
    legacy = ContainerFactory(tmp_path / "legacy", gpu.rootfs, gpu.runc,
                              (sim_prestart_entry(config, hook_launcher),
                               nvhook_hook_entry(hook_launcher, config)), tag="gpu")

    def prepare(rootfs: Path) -> None:
        (rootfs / "cuda_alloc").write_bytes(alloc_program.read_bytes())
        (rootfs / "cuda_alloc").chmod(0o755)

    env = ("NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_GPU_MEMORY_REQUESTS=100",
           "NVIDIA_GPU_MEMORY_LIMIT=300")
    result = legacy.sh("/cuda_alloc 200 200", env=env, prepare=prepare)
    assert result.stdout.splitlines() == ["total 300", "alloc 200 ok", "alloc 200 error 2"], (
        result.describe())


def test_nvhooks_cdi_spec_behind_the_setting(rig: tuple[SimRoot, ContainerFactory],
                                             hook_launcher: Path, alloc_program: Path,
                                             tmp_path: Path) -> None:
    """`[nvhook] cuda-memory-limits = true` when the spec is generated: the spec's one hook
    (`cdi hook apply --memory-limits`, the GPUs' UUIDs in its arguments) sets the limits of
    the GPU the container was granted; `all` grants every GPU."""
    from nvhook.cdi.generate import GenerateOptions, generate_spec
    from nvhook.cdi.resolve import apply_edits
    from nvhook.config.load import load_config
    from nvhook.dev.demo.driver import sim_prestart_entry

    sim, gpu = rig
    config = tmp_path / "config.toml"
    config.write_text(Path(sim.config_path).read_text().replace(
        "[nvhook]\n", "[nvhook]\ncuda-memory-limits = true\n", 1))
    spec = generate_spec(load_config(str(config), {}),
                         GenerateOptions(hook_path=str(hook_launcher)))
    (hook,) = spec["containerEdits"]["hooks"]
    assert "--memory-limits" in hook["args"]
    assert f"--device-uuid=1={sim.gpus[1].uuid}" in hook["args"]
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    cdi = ContainerFactory(tmp_path / "cdi", gpu.rootfs, gpu.runc,
                           (sim_prestart_entry(config, hook_launcher),), tag="gpu")

    def prepare(rootfs: Path) -> None:
        (rootfs / "cuda_alloc").write_bytes(alloc_program.read_bytes())
        (rootfs / "cuda_alloc").chmod(0o755)

    for name, total in (("1", 256), ("all", 256)):
        def edit(doc: dict[str, Any], name: str = name) -> None:
            apply_edits(doc, spec["containerEdits"], "spec")
            apply_edits(doc, devices[name], name)

        result = cdi.sh("/cuda_alloc 200 100", prepare=prepare, edit_spec=edit,
                        env=("NVIDIA_GPU_MEMORY_REQUEST=10", "NVIDIA_GPU_MEMORY_LIMIT=256"))
        assert result.stdout.splitlines() == [
            f"total {total}", "alloc 200 ok", "alloc 100 error 2"], (name, result.describe())
