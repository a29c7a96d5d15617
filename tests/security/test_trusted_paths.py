"""Issue 19 classes 3, 8, 9: root opens, reads and writes only host paths no user controls,
through the real commands (subprocesses as root) - the cache dir, the hook's debug log and the
timing log, the runtime wrapper's debug log, CDI spec dirs and `cdi generate --output`,
`config default --output`, `runtime configure`, `install` (prefix, import paths). A "user" is
an unprivileged uid owning a directory or file on the way; a "group" log dir is Ubuntu's
/var/log (root:syslog 0775). Every refusal is one line naming the component; optional outputs
(logs, caches) are a warning and no write; nothing outside the test's temp dir changes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.dev.sim import SimRoot
from tests.unit.test_cli import NVHOOK, Hook

pytestmark = pytest.mark.root
USER = 64123
REPO = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("root's rules (chown, mkfifo)")


def user_dir(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, USER, USER)
    path.chmod(mode)
    return path


def group_log_dir(path: Path) -> Path:
    path.mkdir()
    os.chown(path, 0, USER)
    path.chmod(0o775)
    return path


def nvhook(*args: str, cwd: Path | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NVHOOK, *args], capture_output=True, text=True, check=False,
                          timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)


def one_line(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "internal error" not in proc.stderr and all(w in proc.stderr for w in words), (
        proc.stderr)


# ---- class 9: debug and timing logs ----------------------------------------------------------

def log_config(hook: Hook, logs: Path) -> Path:
    path = hook.config("", name="log.toml", cli=f'debug = "{logs}/debug.log"')
    path.write_text(path.read_text().replace(
        "[nvhook]\n", f'[nvhook]\ntiming-log = "{logs}/timing.log"\n'))
    return path


@pytest.mark.parametrize("plant", ["fifo", "symlink", "hard-link"])
def test_a_planted_hook_log_is_not_opened(tmp_path: Path, plant: str) -> None:
    """`nvidia-container-cli.debug` and `[nvhook] timing-log` in a group-writable log dir where
    a group member planted the file. Before: a FIFO stalled the hook until killed (every start,
    as the gate hands everything to the hook when a debug log is set); a symlink or a hard
    link made root append to the user's choice."""
    hook = Hook(tmp_path)
    logs = group_log_dir(tmp_path / "log")
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    for name in ("debug.log", "timing.log"):
        {"fifo": lambda p: os.mkfifo(p), "symlink": lambda p: p.symlink_to(victim),
         "hard-link": lambda p: os.link(victim, p)}[plant](logs / name)
    config = log_config(hook, logs)
    try:
        plain = hook.run(["--config", str(config), "prestart"],  # the debug log
                         {"pid": 1, "bundle": str(hook.bundle(["PATH=/bin"]))})
        dry = hook.run(["--config", str(config), "prestart", "--dry-run"],  # the timing log
                       {"pid": 1, "bundle": str(hook.bundle(["NVIDIA_VISIBLE_DEVICES=0"],
                                                            name="gpu"))})
    except subprocess.TimeoutExpired:
        pytest.fail("the hook blocked on a planted log")
    assert plain.returncode == 0 and dry.returncode == 0, plain.stderr + dry.stderr
    assert plain.stderr.startswith(f"open debug log {logs}/debug.log: "), plain.stderr
    assert f"timing log {logs}/timing.log: " in dry.stderr
    assert victim.read_text() == "root's file\n"


def test_a_hook_log_in_a_group_log_dir_is_written(tmp_path: Path) -> None:
    hook = Hook(tmp_path)
    logs = group_log_dir(tmp_path / "log")
    config = log_config(hook, logs)
    plain = hook.run(["--config", str(config), "prestart"],
                     {"pid": 1, "bundle": str(hook.bundle(["PATH=/bin"]))})
    dry = hook.run(["--config", str(config), "prestart", "--dry-run"],
                   {"pid": 1, "bundle": str(hook.bundle(["NVIDIA_VISIBLE_DEVICES=0"],
                                                        name="gpu"))})
    assert (plain.returncode, plain.stderr, dry.returncode) == (0, "", 0), dry.stderr
    assert "not a GPU container" in (logs / "debug.log").read_text()
    assert json.loads((logs / "timing.log").read_text())["dry_run"] is True


def test_the_runtime_wrappers_debug_log_is_trusted(tmp_path: Path) -> None:
    from nvhook.launch.runtime_log import RuntimeLog

    logs = group_log_dir(tmp_path / "log")
    os.mkfifo(logs / "runtime.log")
    log = RuntimeLog("debug", str(logs / "runtime.log"))

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError("the wrapper blocked on a FIFO debug log")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(10)
    try:
        log.info("hello")  # before: blocked here (no reader)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    log.close()
    log = RuntimeLog("debug", str(tmp_path / "rt" / "runtime.log"))  # parents made
    log.info("hello")
    log.close()
    assert "msg=\"hello\"" in (tmp_path / "rt" / "runtime.log").read_text()
    log = RuntimeLog("debug", str(logs / "new" / "runtime.log"))  # not in a group's dir
    log.info("hello")
    log.close()
    assert not (logs / "new").exists()


# ---- class 3: the cache dir ---------------------------------------------------------------------

def test_a_cache_dir_under_a_user_directory_is_not_used(sim_root: SimRoot,
                                                        tmp_path: Path) -> None:
    """`[nvhook] cache-dir` whose parent a user owns and replaced by a symlink: `nvhook info`
    (which refreshes the inventory cache) makes nothing where the link points."""
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    parent = tmp_path / "home"
    parent.symlink_to(chosen)
    os.chown(parent, USER, USER, follow_symlinks=False)
    config = tmp_path / "config.toml"
    config.write_text(Path(sim_root.config_path).read_text().replace(
        "[nvhook]\n", f'[nvhook]\ncache-dir = "{parent}/cache"\n'))
    proc = nvhook("--config", str(config), "info")
    assert proc.returncode == 0, proc.stderr
    assert "a symlink owned by uid 64123" in proc.stderr and "not used" in proc.stderr
    assert list(chosen.iterdir()) == []


# ---- class 8: CDI spec dirs, outputs ------------------------------------------------------------

def _spec(path: Path, host_path: str) -> None:
    path.write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"mounts": [
            {"hostPath": host_path, "containerPath": "/host", "options": ["rw", "bind"]}]}}]}))


@pytest.mark.parametrize("owned", ["dir", "file"])
def test_a_cdi_spec_a_user_could_write_is_ignored(tmp_path: Path, owned: str) -> None:
    """A user redefines nvidia.com/gpu=0 with a read-write host mount in a later spec dir.
    Before: the wrapper applied it (later dirs win)."""
    from nvhook.cdi.resolve import load_registry

    root_dir, user_specs = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    root_dir.mkdir()
    _spec(root_dir / "nvidia.json", "/dev/null")
    if owned == "dir":
        user_dir(user_specs)
        _spec(user_specs / "evil.json", "/")
    else:
        user_specs.mkdir()
        _spec(user_specs / "evil.json", "/")
        os.chown(user_specs / "evil.json", USER, USER)
    registry, _ = load_registry((str(root_dir), str(user_specs)))
    assert registry["nvidia.com/gpu=0"][0] == str(root_dir / "nvidia.json")
    config = tmp_path / "config.toml"
    config.write_text('[nvidia-container-runtime.modes.cdi]\nspec-dirs = '
                      f'["{root_dir}", "{user_specs}"]\n')
    proc = nvhook("--config", str(config), "cdi", "list")
    assert proc.stdout.split() == ["nvidia.com/gpu=0"], proc.stderr
    assert "ignoring CDI spec" in proc.stderr and "owned by uid 64123" in proc.stderr


@pytest.mark.parametrize("command", [["cdi", "generate"], ["config", "default"]])
def test_outputs_into_a_user_directory_are_refused(sim_root: SimRoot, tmp_path: Path,
                                                   command: list[str]) -> None:
    out = user_dir(tmp_path / "u") / "out.yaml"
    proc = nvhook("--config", sim_root.config_path, *command, "--output", str(out))
    one_line(proc, str(out), f"{tmp_path}/u: owned by uid 64123")
    assert os.listdir(tmp_path / "u") == []
    good = tmp_path / "etc" / "out.yaml"
    proc = nvhook("--config", sim_root.config_path, *command, "--output", str(good))
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(good.stat().st_mode) == 0o644 and good.read_text()


def test_runtime_configure_keeps_no_setuid_bit_and_refuses_a_user_file(tmp_path: Path) -> None:
    """Before: the old mode was copied through os.stat (04755 stayed 04755) and chmod'ed by
    path after the write; a daemon.json a user owns was rewritten by root."""
    daemon = tmp_path / "docker" / "daemon.json"
    daemon.parent.mkdir()
    daemon.write_text("{}")
    daemon.chmod(0o4755)
    args = ("runtime", "configure", "--runtime=docker", f"--config={daemon}",
            "--runtime-path=/usr/bin/nvidia-container-runtime")
    proc = nvhook(*args)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(daemon.stat().st_mode) == 0o755 and "nvidia" in daemon.read_text()
    os.chown(daemon, USER, USER)
    before = daemon.read_text()
    one_line(nvhook(*args[:3], f"--config={daemon}", "--runtime-path=/x/y"),
             f"refuse to edit {daemon}: owned by uid 64123")
    assert daemon.read_text() == before


# ---- class 8: install ----------------------------------------------------------------------------

def test_install_refuses_a_user_prefix_and_a_user_checkout(tmp_path: Path) -> None:
    """A launcher records the import paths of the installing interpreter: from a checkout a
    user owns, root would later run the user's code (every hook, doctor). Refused, naming the
    component; the prefix must be root's too."""
    prefix = user_dir(tmp_path / "ubin")
    one_line(nvhook("install", "--prefix", str(prefix), "--name", "h"),
             f"install launcher {prefix}: owned by uid 64123")
    assert os.listdir(prefix) == []
    checkout = tmp_path / "checkout"
    for package in ("nvhook", "nvmount"):
        shutil.copytree(REPO / package, checkout / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for path in [checkout, *checkout.rglob("*")]:
        os.chown(path, USER, USER)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from nvhook.cli import main; "
            "sys.exit(main(sys.argv[2:], cwd='/'))")
    proc = subprocess.run([sys.executable, "-c", code, str(checkout), "install", "--prefix",
                           str(tmp_path / "bin"), "--name", "h"], capture_output=True,
                          text=True, check=False, timeout=60, cwd="/")
    one_line(proc, f"import path {checkout}", "owned by uid 64123", "root-owned directory")
    assert not (tmp_path / "bin" / "h").exists()


def test_csv_mount_specs_a_user_could_write_are_refused(tmp_path: Path) -> None:
    """Tegra CSV mode: the spec files name what is mounted into every container (a user's
    `dir, /` would hand out the host); a FIFO among them does not stall the hook."""
    from nvmount.discover.csv_backend import read_specs
    from nvmount.errors import DriverError

    specs = user_dir(tmp_path / "specs")
    (specs / "l4t.csv").write_text("dir, /\n")
    with pytest.raises(DriverError, match="owned by uid 64123"):
        read_specs(str(specs))
    os.chown(specs, 0, 0)
    os.mkfifo(specs / "z.csv")
    with pytest.raises(DriverError, match="a FIFO, not a regular file"):
        read_specs(str(specs))
