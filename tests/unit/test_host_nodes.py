"""`load-kmods` (nvmount.apply.host_nodes): missing control and IMEX channel nodes are created
on a simulated host root from its /proc/devices majors, fd-safe, and nothing else changes."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from nvhook.dev.sim import SimRoot
from nvmount.apply.host_nodes import ensure_nodes, load_modules, read_majors
from tests.fixtures.sim import SIM_DEFAULT_SPEC, SimRootFactory
from tests.unit.test_cli import NVHOOK

pytestmark = pytest.mark.root


@pytest.fixture
def sim(sim_root_factory: SimRootFactory) -> SimRoot:
    sim = sim_root_factory(SIM_DEFAULT_SPEC, private=True)
    if not sim.real_device_nodes:
        pytest.skip("needs mknod (root)")
    return sim


def _node(path: Path) -> tuple[int, int, int]:
    st = os.stat(path, follow_symlinks=False)
    assert stat.S_ISCHR(st.st_mode)
    return os.major(st.st_rdev), os.minor(st.st_rdev), st.st_mode & 0o777


def test_missing_uvm_nodes_are_created(sim: SimRoot) -> None:
    dev = Path(sim.path) / "dev"
    before = {p.name: _node(p) for p in (dev / "nvidiactl", dev / "nvidia0")}
    (dev / "nvidia-uvm").unlink()
    (dev / "nvidia-uvm-tools").unlink()
    made = ensure_nodes(sim.path, sim.proc_root)
    assert made == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    uvm = dict(sim.majors)["nvidia-uvm"]
    assert _node(dev / "nvidia-uvm") == (uvm, 0, 0o666)
    assert _node(dev / "nvidia-uvm-tools") == (uvm, 1, 0o666)
    assert {p.name: _node(p) for p in (dev / "nvidiactl", dev / "nvidia0")} == before
    assert ensure_nodes(sim.path, sim.proc_root) == []  # nothing missing: nothing made
    # the udev-style links systemd and NVIDIA's create-dev-char-symlinks use, for what was made
    assert os.readlink(dev / "char" / f"{uvm}:0") == "../nvidia-uvm"
    assert os.readlink(dev / "char" / f"{uvm}:1") == "../nvidia-uvm-tools"
    assert os.stat(dev / "char" / f"{uvm}:1").st_rdev == os.makedev(uvm, 1)  # through it


def test_char_links_leave_existing_entries(sim: SimRoot) -> None:
    """An entry already in /dev/char (udev's, or anything) stays as it was; links are made
    only for nodes nvhook made, never for the driver's own."""
    dev = Path(sim.path) / "dev"
    uvm = dict(sim.majors)["nvidia-uvm"]
    (dev / "nvidia-uvm").unlink()
    (dev / "nvidia-uvm-tools").unlink()
    (dev / "char").mkdir(exist_ok=True)
    for minor in (0, 1):
        (dev / "char" / f"{uvm}:{minor}").unlink(missing_ok=True)
    (dev / "char" / f"{uvm}:0").symlink_to("/elsewhere")
    others = {p.name: os.readlink(p) for p in (dev / "char").iterdir()}
    assert ensure_nodes(sim.path, sim.proc_root) == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert os.readlink(dev / "char" / f"{uvm}:1") == "../nvidia-uvm-tools"
    after = {p.name: os.readlink(p) for p in (dev / "char").iterdir()}
    assert after == {**others, f"{uvm}:1": "../nvidia-uvm-tools"}  # /elsewhere stays


def test_existing_entries_are_left_alone(sim: SimRoot) -> None:
    dev = Path(sim.path) / "dev"
    (dev / "nvidia-uvm").unlink()
    (dev / "nvidia-uvm").symlink_to("/etc/passwd")  # whatever is there stays
    assert "/dev/nvidia-uvm" not in ensure_nodes(sim.path, sim.proc_root)
    assert os.readlink(dev / "nvidia-uvm") == "/etc/passwd"


def test_imex_channels_on_request_unless_disabled(sim: SimRoot) -> None:
    imex = Path(sim.path) / "dev" / "nvidia-caps-imex-channels"
    major = dict(sim.majors)["nvidia-caps-imex-channels"]
    assert ensure_nodes(sim.path, sim.proc_root, (3,), create_imex=False) == []
    assert not (imex / "channel3").exists()
    assert ensure_nodes(sim.path, sim.proc_root, (3, 5000)) == [
        "/dev/nvidia-caps-imex-channels/channel3"]  # 5000: beyond the driver's channels
    assert _node(imex / "channel3") == (major, 3, 0o666)
    assert os.readlink(imex.parent / "char" / f"{major}:3") == \
        "../nvidia-caps-imex-channels/channel3"


HOST_DEVICES = "Character devices:\n  1 mem\n  5 /dev/tty\n 10 misc\n\nBlock devices:\n  7 loop\n"


@pytest.mark.parametrize(("listed", "made"), [
    ("", []),
    ("238 nvidia-uvm\n", ["nvidia-uvm", "nvidia-uvm-tools"]),
    ("195 nvidia\n", ["nvidiactl", "nvidia-modeset"]),
    ("195 nvidia-frontend\n", ["nvidiactl", "nvidia-modeset"]),
], ids=["no-nvidia-major", "uvm-only", "nvidia", "nvidia-frontend"])
def test_no_node_from_a_major_the_kernel_does_not_list(tmp_path: Path, listed: str,
                                                       made: list[str]) -> None:
    """Issue 19 class 7 (NVIDIA's rule): a control node only for a major /proc/devices lists;
    before, nvidiactl and nvidia-modeset were made with a guessed 195 on any host."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mknod)")
    (tmp_path / "dev").mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "devices").write_text(HOST_DEVICES.replace("\n\n", f"\n{listed}\n"))
    majors = read_majors(str(tmp_path / "proc"))
    assert ("nvidia-frontend" in majors) == ("195" in listed)
    assert ensure_nodes(str(tmp_path), str(tmp_path / "proc"), (1,)) == [f"/dev/{n}"
                                                                        for n in made]
    assert sorted(os.listdir(tmp_path / "dev")) == sorted(made + ["char"] * bool(made))


def test_no_modprobe_for_a_simulated_root(sim: SimRoot) -> None:
    assert load_modules(sim.path, sim.proc_root) is False  # only on the real host


def test_a_gpu_start_recreates_uvm_and_a_dry_run_warns(sim: SimRoot, tmp_path: Path) -> None:
    """Through the hook: the dry run changes nothing and warns; `nvhook info` (discovery)
    does not create nodes either; the hook's own run is in tests/e2e/test_graphics.py."""
    (Path(sim.path) / "dev" / "nvidia-uvm").unlink()
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(
        '{"ociVersion": "1.0.2", "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", '
        '"NVIDIA_DRIVER_CAPABILITIES=compute"]}, "root": {"path": "rootfs"}}')
    proc = subprocess.run([*NVHOOK, "--config", sim.config_path, "prestart", "--dry-run"],
                          input=f'{{"pid": 0, "bundle": "{bundle}"}}', capture_output=True,
                          text=True, check=False, timeout=60, cwd=bundle)
    assert proc.returncode == 0, proc.stderr
    assert "/dev/nvidia-uvm is missing" in proc.stderr and "CUDA fails" in proc.stderr
    assert not (Path(sim.path) / "dev" / "nvidia-uvm").exists()


def test_the_driver_params_decide_owner_mode_and_whether(sim: SimRoot) -> None:
    params = Path(sim.proc_root) / "driver/nvidia/params"
    text = params.read_text()
    (Path(sim.path) / "dev" / "nvidia-uvm").unlink()
    params.write_text(text.replace("DeviceFileGID: 0", "DeviceFileGID: 44").replace(
        "DeviceFileMode: 438", "DeviceFileMode: 432"))  # 0660, group video
    assert ensure_nodes(sim.path, sim.proc_root) == ["/dev/nvidia-uvm"]
    st = os.stat(Path(sim.path) / "dev" / "nvidia-uvm")
    assert (st.st_gid, st.st_mode & 0o777) == (44, 0o660)
    (Path(sim.path) / "dev" / "nvidia-uvm").unlink()
    params.write_text(text.replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0"))
    assert ensure_nodes(sim.path, sim.proc_root) == []  # the driver manages its nodes itself
    assert not (Path(sim.path) / "dev" / "nvidia-uvm").exists()


def test_gpu_nodes_the_driver_lists(sim: SimRoot) -> None:
    """The refresh's `ensure_gpu_nodes` (issue 31): /dev/nvidiaN for the minors asked, with the
    driver's major and the params' mode; an existing entry of any type left alone; nothing
    with `ModifyDeviceFiles: 0`; no minor outside 0-254."""
    from nvmount.apply.host_nodes import ensure_gpu_nodes

    dev = Path(sim.path) / "dev"
    (dev / "nvidia1").unlink()
    (dev / "nvidia2").unlink()
    (dev / "nvidia2").write_text("not a node")
    assert ensure_gpu_nodes(sim.path, sim.proc_root, [0, 1, 2, 255, -1]) == ["/dev/nvidia1"]
    assert _node(dev / "nvidia1") == (195, 1, 0o666)
    assert (dev / "nvidia2").read_text() == "not a node"
    (dev / "nvidia1").unlink()
    params = Path(sim.proc_root) / "driver/nvidia/params"
    params.write_text(params.read_text().replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0"))
    assert ensure_gpu_nodes(sim.path, sim.proc_root, [1]) == []
    assert not (dev / "nvidia1").exists()
