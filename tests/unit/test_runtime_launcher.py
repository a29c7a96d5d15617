"""The runtime wrapper's sh launcher as a process (nvhook.launch.runtime_sh, .facts).

A fake low-level runtime and a fake interpreter record which of them the launcher execs and
with what; the facts files are written by the wrapper's own `refresh_facts`. What is checked:
calls that cannot concern GPUs never start the interpreter, every other call does, and stale,
foreign or missing facts always send the call to the wrapper.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from nvhook.launch.facts import facts_path, identity, read_runtimes, refresh_facts
from nvhook.launch.runtime_log import RuntimeLog
from nvhook.launch.runtime_sh import render
from nvhook.launch.settings import load_settings

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="facts are root's")

REPO = Path(__file__).resolve().parent.parent.parent
RECORD = '#!/bin/sh\nprintf "%s\\n" "{tag} $0 $*" >> {out}\n'


class Rig:
    def __init__(self, tmp: Path, config_text: str = "") -> None:
        self.tmp = tmp
        self.out = tmp / "calls"
        bindir = tmp / "bin"
        bindir.mkdir()
        self.runc = self._script(bindir / "runc", "RT")
        self.python = self._script(tmp / "python3", "PY")
        self.config = tmp / "config.toml"
        self.config.write_text(config_text)
        self.facts_dir = tmp / "facts"
        self.facts_dir.mkdir(mode=0o700)
        self.launcher = tmp / "nvhook-runtime"
        self.write_launcher(str(self.config))
        self.env = {"PATH": f"{bindir}:/usr/bin:/bin"}

    def _script(self, path: Path, tag: str) -> Path:
        path.write_text(RECORD.format(tag=tag, out=self.out))
        path.chmod(0o755)
        return path

    def write_launcher(self, config: str | None, python: Path | None = None) -> None:
        self.launcher.write_text(render(str(python or self.python), [str(REPO)], version="9.9",
                                        marker="# nvhook hook launcher", config=config,
                                        facts_dir=str(self.facts_dir)))
        self.launcher.chmod(0o755)

    @property
    def facts(self) -> str:
        return facts_path(str(self.config), str(self.facts_dir))

    def write_facts(self) -> None:
        settings = load_settings({}, str(self.config), str(self.launcher))
        time.sleep(0.01)  # a later mtime than the config's, whatever the clock's granularity
        assert refresh_facts(self.facts, settings, RuntimeLog())
        self.as_test_version()

    def as_test_version(self) -> None:
        """The facts as if written by the test launcher's nvhook version (9.9)."""
        for suffix in ("", ".needles"):
            path = Path(self.facts + suffix)
            path.write_text(path.read_text().replace("\n0.1.0\n", "\n9.9\n").replace(
                " 0.1.0 ", " 9.9 "))

    def call(self, *args: str, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> tuple[str, subprocess.CompletedProcess[str]]:
        self.out.unlink(missing_ok=True)
        proc = subprocess.run([str(self.launcher), *args], capture_output=True, text=True,
                              env=env or self.env, cwd=cwd or self.tmp, timeout=30, check=False)
        return (self.out.read_text() if self.out.exists() else ""), proc

    def bundle(self, name: str, env: list[str]) -> Path:
        bundle = self.tmp / name
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(
            {"ociVersion": "1.0.2", "process": {"env": env}, "root": {"path": "rootfs"}}))
        return bundle


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, '[nvidia-container-runtime]\nruntimes = ["nv-none", "runc"]\n')


def test_without_facts_every_call_goes_to_the_wrapper(rig: Rig) -> None:
    calls, _ = rig.call("--root", "/r", "state", "x")
    assert calls.startswith(f"PY {rig.python} -IS -c import gc\n")
    assert calls.rstrip().endswith(f"{rig.launcher} {rig.config} {rig.facts} --root /r state x")


def test_with_facts_non_create_calls_exec_the_runtime(rig: Rig) -> None:
    rig.write_facts()
    st = rig.config.stat()
    ident = subprocess.run(["stat", "-L", "-c", "%d:%i:%s:%.9Y:%.9Z", str(rig.config)],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert ident == identity((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                              st.st_ctime_ns))
    assert Path(rig.facts).read_text() == (f"nvhook-runtime-facts 2\n9.9\n{rig.config}\n"
                                           f"{ident}\nnv-none\nrunc\n\n")
    for args in (["--root", "/r", "state", "x"], ["--log", "/l", "--log-format", "json",
                                                  "delete", "--force", "create"],
                 ["--systemd-cgroup", "kill", "x", "9"], ["start", "x"]):
        calls, proc = rig.call(*args)
        assert calls == f"RT {rig.runc} {' '.join(args)}\n", proc.stderr


def test_creates_that_name_no_nvidia_variable_skip_the_wrapper(rig: Rig) -> None:
    rig.write_facts()
    plain = rig.bundle("plain", ["PATH=/bin", "A=cdi.k8s.io"])
    gpu = rig.bundle("gpu", ["NVIDIA_VISIBLE_DEVICES=0"])
    calls, _ = rig.call("create", "--bundle", str(plain), "id1")
    assert calls.startswith("RT ")
    calls, _ = rig.call("run", "id2", cwd=plain)  # the working directory is the bundle
    assert calls.startswith("RT ")
    calls, _ = rig.call("create", "--bundle", str(gpu), "id3")
    assert calls.startswith("PY ")
    escaped = rig.bundle("escaped", ["\\u004eVIDIA_VISIBLE_DEVICES=0"])
    assert rig.call("create", "-b", str(escaped), "id4")[0].startswith("PY ")
    link = rig.tmp / "link"
    link.mkdir()
    (link / "config.json").symlink_to(plain / "config.json")
    assert rig.call("create", "-b", str(link), "id5")[0].startswith("PY ")
    assert rig.call("create", "-b", str(rig.tmp / "missing"), "id6")[0].startswith("PY ")


def test_swarm_variables_from_the_config_count(tmp_path: Path) -> None:
    rig = Rig(tmp_path, 'swarm-resource = "DOCKER_RESOURCE_GPU"\n')
    rig.write_facts()
    swarm = rig.bundle("swarm", ["DOCKER_RESOURCE_GPU=1"])
    assert rig.call("create", "-b", str(swarm), "x")[0].startswith("PY ")


def test_needles_of_another_config_are_not_used(tmp_path: Path) -> None:
    """The needles file names its config: a create under another config never uses it."""
    rig = Rig(tmp_path, 'swarm-resource = "DOCKER_RESOURCE_GPU"\n')
    rig.write_facts()
    needles = Path(rig.facts + ".needles")
    time.sleep(0.01)
    needles.write_text(needles.read_text().replace(str(rig.config), "/other.toml"))
    swarm = rig.bundle("swarm", ["DOCKER_RESOURCE_GPU=1"])
    assert rig.call("create", "-b", str(swarm), "x")[0].startswith("PY ")


@pytest.mark.parametrize("change", ["touch", "other-config", "foreign-version", "symlink"])
def test_stale_or_foreign_facts_send_calls_to_the_wrapper(rig: Rig, change: str) -> None:
    rig.write_facts()
    env = dict(rig.env)
    if change == "touch":
        time.sleep(0.01)
        rig.config.write_text(rig.config.read_text())
    elif change == "other-config":
        other = rig.tmp / "other.toml"
        other.write_text("")
        env["NVIDIA_CTK_CONFIG_FILE_PATH"] = str(other)
    elif change == "foreign-version":
        Path(rig.facts).write_text(Path(rig.facts).read_text().replace("9.9", "9.8"))
    else:
        real = Path(rig.facts + ".real")
        os.rename(rig.facts, real)
        os.symlink(real, rig.facts)
    assert rig.call("state", "x", env=env)[0].startswith("PY ")


def replace_keeping_an_older_mtime(config: Path, text: str, how: str) -> None:
    """Give `config` new content whose mtime is older than the old content's: `cp -p` over
    it (same inode), `rsync -t`/`tar x` (a new file renamed over it), an edit then `touch -d`
    back to the old mtime (only ctime, which no tool sets, moves)."""
    old = config.stat()
    older = old.st_mtime_ns - 3_600 * 10**9
    if how == "same-mtime":
        config.write_text(text)
        os.utime(config, ns=(old.st_atime_ns, old.st_mtime_ns))
        return
    source = config.parent / "source.toml"
    source.write_text(text)
    os.utime(source, ns=(older, older))
    if how == "cp-p":
        subprocess.run(["cp", "-p", str(source), str(config)], check=True)
    else:
        staged = config.parent / ".config.toml.new"
        subprocess.run(["cp", "-p", str(source), str(staged)], check=True)
        os.rename(staged, config)


@pytest.mark.parametrize("how", ["cp-p", "rename", "same-mtime"])
def test_a_config_replaced_with_an_older_mtime_takes_effect_at_the_next_call(
        rig: Rig, how: str) -> None:
    """Issue 27 item 2: facts are bound to the config's identity (device, inode, size, mtime,
    ctime), not to being newer than it."""
    rig.write_facts()
    assert rig.call("state", "x")[0].startswith("RT ")
    replace_keeping_an_older_mtime(
        rig.config, '[nvidia-container-runtime]\nruntimes = ["nv-new", "runc"]    \n', how)
    assert rig.call("state", "x")[0].startswith("PY "), how
    plain = rig.bundle("plain", ["PATH=/bin"])
    assert rig.call("create", "-b", str(plain), "x")[0].startswith("PY "), how


def test_a_cp_p_config_changes_the_runtime_at_the_next_call(rig: Rig) -> None:
    """With the real wrapper: the first call after `cp -p` runs the new config's runtime."""
    rig.write_launcher(str(rig.config), python=Path("/usr/bin/python3"))
    assert rig.call("state", "x")[0] == f"RT {rig.runc} state x\n"  # writes the facts
    rig.as_test_version()  # the launcher's version: from now on it uses them
    other = rig._script(rig.runc.parent / "other-rt", "OT")
    replace_keeping_an_older_mtime(
        rig.config, '[nvidia-container-runtime]\nruntimes = ["other-rt"]\n', "cp-p")
    assert rig.call("state", "x")[0] == f"OT {other} state x\n"
    rig.python.write_text("#!/bin/sh\nexit 99\n")  # the facts now name other-rt: no Python
    rig.write_launcher(str(rig.config), python=rig.python)
    rig.as_test_version()
    assert rig.call("state", "x")[0] == f"OT {other} state x\n"


def test_lines_runc_would_refuse_and_version_go_to_the_wrapper(rig: Rig) -> None:
    rig.write_facts()
    for args in (["--version"], ["--bogus", "state", "x"], ["--root"], ["-h"]):
        assert rig.call(*args)[0].startswith("PY "), args


def test_the_launcher_never_execs_itself(rig: Rig) -> None:
    rig.write_facts()
    first = rig.tmp / "first"
    first.mkdir()
    (first / "runc").symlink_to(rig.launcher)  # a `runc` that is the launcher, first on PATH
    calls, _ = rig.call("state", "x", env={"PATH": f"{first}:{rig.runc.parent}"})
    assert calls.startswith(f"RT {rig.runc} ")


def test_built_in_defaults_need_no_facts(rig: Rig) -> None:
    if Path("/etc/nvidia-container-runtime/config.toml").exists():
        pytest.skip("this host has a config.toml: the default lookup finds it")
    rig.write_launcher(None)
    calls, _ = rig.call("state", "x")
    assert calls == f"RT {rig.runc} state x\n"
    plain = rig.bundle("plain", ["PATH=/bin"])
    assert rig.call("create", "-b", str(plain), "x")[0].startswith("RT ")
    gpu = rig.bundle("gpu", ["CUDA_VERSION=12.4"])
    assert rig.call("create", "-b", str(gpu), "x")[0].startswith("PY ")


def test_a_missing_interpreter_is_one_line_and_a_runc_log_record(rig: Rig) -> None:
    rig.write_launcher(str(rig.config), python=rig.tmp / "gone" / "python3")
    log = rig.tmp / "log.json"
    gpu = rig.bundle("gpu", ["NVIDIA_VISIBLE_DEVICES=0"])
    calls, proc = rig.call("--log", str(log), "--log-format", "json", "create", "-b", str(gpu),
                           "x")
    assert (calls, proc.returncode) == ("", 127)
    assert proc.stderr.startswith("nvhook-runtime: cannot run the runtime wrapper: ")
    record = json.loads(log.read_text())
    assert record["level"] == "error" and "is missing" in record["msg"]


def test_the_real_wrapper_writes_the_facts_the_launcher_uses(rig: Rig) -> None:
    """The wrapper (real interpreter) handles a call without facts and writes them; the next
    call goes straight to the runtime."""
    rig.write_launcher(str(rig.config), python=Path("/usr/bin/python3"))
    calls, proc = rig.call("state", "x")
    assert calls == f"RT {rig.runc} state x\n", proc.stderr
    assert read_runtimes(rig.facts) == ("nv-none", "runc")
    rig.python.write_text("#!/bin/sh\nexit 99\n")  # any later interpreter start would show
    rig.write_launcher(str(rig.config), python=rig.python)
    rig.as_test_version()
    calls, proc = rig.call("state", "x")
    assert (calls, proc.returncode) == (f"RT {rig.runc} state x\n", 0)


def test_state_and_delete_survive_a_broken_config(rig: Rig) -> None:
    """A config that is gone or invalid fails creates, never the cleanup."""
    rig.write_launcher(str(rig.config), python=Path("/usr/bin/python3"))
    assert rig.call("state", "x")[0].startswith("RT ")  # writes the facts
    rig.config.unlink()
    calls, proc = rig.call("delete", "--force", "x")
    assert calls == f"RT {rig.runc} delete --force x\n", proc.stderr
    rig.config.write_text("runtimes = [\n")
    calls, proc = rig.call("--log", str(rig.tmp / "l"), "delete", "x")
    assert calls == f"RT {rig.runc} --log {rig.tmp / 'l'} delete x\n", proc.stderr
    assert "level=warning" in (rig.tmp / "l").read_text()
    assert shutil.which("dash")  # the launcher's shell on this host
