"""Issue 27 class 1: what a spec nvhook generated records (config, driver root, hook path) is
policy at every later `cdi refresh` / `cdi check` / doctor: read only through the trusted-path
rule; otherwise the spec stays byte for byte and the command fails in one line.

Each case: an admin generates with `--config` (trusted at that time), the driver's state then
changes (a MIG instance appears, so the refresh regenerates), and a user has meanwhile gained
write access to something the spec records.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nvhook.dev.sim import SimRoot, SimSpec
from tests.fixtures.sim import SimRootFactory
from tests.unit.test_cli import NVHOOK

pytestmark = pytest.mark.root
USER = 1000
SPEC = SimSpec(gpus=2, mig=((0, ("1g.10gb",)),))


def nvhook(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NVIDIA_CTK_CONFIG_FILE_PATH"}
    return subprocess.run([*NVHOOK, *args], capture_output=True, text=True, check=False,
                          timeout=120, env=env)


def generate(config: Path, out: Path, hook: str = "/usr/bin/true") -> bytes:
    proc = nvhook("--config", str(config), "cdi", "generate", "--hook-path", hook,
                  "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


def mig_change(sim: SimRoot) -> None:
    (Path(sim.proc_root) / "driver/nvidia/capabilities/gpu0/mig/gi13/ci0").mkdir(parents=True)


def refused(out: Path, before: bytes, *words: str) -> list[str]:
    """`cdi refresh`, `cdi check --refresh` and `cdi check`: one line, exit 1, spec kept;
    their errors."""
    errors = []
    for args in (("cdi", "refresh", "--output", str(out)),
                 ("cdi", "check", "--spec", str(out), "--refresh"),
                 ("cdi", "check", "--spec", str(out))):
        proc = nvhook(*args)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "not regenerated, left as it was" in proc.stderr
        assert all(w in proc.stderr for w in words), proc.stderr
        assert out.read_bytes() == before
        errors.append(proc.stderr)
    return errors


@pytest.fixture
def sim(sim_root_factory: SimRootFactory) -> SimRoot:
    return sim_root_factory(SPEC, private=True)


def test_recorded_config_in_a_users_directory(sim: SimRoot, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    config = home / "nvhook.toml"
    shutil.copy(sim.config_path, config)
    out = tmp_path / "cdi" / "nvidia.yaml"
    before = generate(config, out)
    os.chown(home, USER, USER)  # the admin's --config pointed into what is now a user's home
    config.write_text(config.read_text().replace(sim.path, "/home/user/evil"))
    mig_change(sim)
    assert len(refused(out, before, str(home), f"owned by uid {USER}")) == 3


def test_recorded_config_in_tmp_deleted_and_recreated_by_a_user(sim: SimRoot,
                                                                 tmp_path: Path) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    config = sticky / "cfg.toml"
    shutil.copy(sim.config_path, config)
    out = tmp_path / "cdi" / "nvidia.yaml"
    before = generate(config, out)
    text = config.read_text()
    config.unlink()  # systemd-tmpfiles or a reboot; then the user makes the name again
    config.write_text(text)
    os.chown(config, USER, USER)
    mig_change(sim)
    assert len(refused(out, before, str(config), f"owned by uid {USER}")) == 3


def test_driver_root_a_user_can_write(sim: SimRoot, tmp_path: Path) -> None:
    config = tmp_path / "nvhook.toml"  # outside the driver root
    shutil.copy(sim.config_path, config)
    out = tmp_path / "cdi" / "nvidia.yaml"
    before = generate(config, out)
    mig_change(sim)
    os.chmod(sim.path, 0o777)
    try:
        assert len(refused(out, before, "driver root", "writable by group or others")) == 3
    finally:
        os.chmod(sim.path, 0o755)


def test_recorded_hook_path_a_user_can_write(sim: SimRoot, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hook = bin_dir / "nvidia-cdi-hook"
    shutil.copy("/bin/true", hook)
    out = tmp_path / "cdi" / "nvidia.yaml"
    before = generate(Path(sim.config_path), out, hook=str(hook))
    os.chown(bin_dir, USER, USER)
    mig_change(sim)
    assert len(refused(out, before, "the hook the spec runs", str(bin_dir))) == 3


def test_trusted_recorded_config_still_refreshes(sim: SimRoot, tmp_path: Path) -> None:
    config = tmp_path / "etc" / "nvhook.toml"
    config.parent.mkdir()
    shutil.copy(sim.config_path, config)
    out = tmp_path / "cdi" / "nvidia.yaml"
    before = generate(config, out)
    mig_change(sim)
    proc = nvhook("cdi", "refresh", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{out}: refreshed") and out.read_bytes() != before


def test_recorded_hook_path_missing_under_a_users_directory(sim: SimRoot,
                                                            tmp_path: Path) -> None:
    """A hook path that does not exist yet is judged by the directory that would hold it."""
    home = tmp_path / "home"
    home.mkdir()
    out = tmp_path / "cdi" / "nvidia.yaml"
    before = generate(Path(sim.config_path), out, hook=str(home / "bin" / "nvidia-cdi-hook"))
    os.chown(home, USER, USER)  # the user can make bin/ and plant the hook
    mig_change(sim)
    assert len(refused(out, before, "the hook the spec runs", f"owned by uid {USER}")) == 3


def test_generate_warns_when_the_config_it_records_is_a_users(sim: SimRoot,
                                                              tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    config = home / "nvhook.toml"
    shutil.copy(sim.config_path, config)
    os.chown(home, USER, USER)
    out = tmp_path / "nvidia.yaml"
    proc = nvhook("--config", str(config), "cdi", "generate", "--hook-path", "/usr/bin/true",
                  "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warning) == 1 and "cdi refresh` will refuse" in warning[0], proc.stderr
