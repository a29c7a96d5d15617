"""The runtime wrapper's pure parts and its process behaviour (nvhook.runtime).

argv scanning (runc's global flags, the command word, the bundle), the config subset and its
agreement with nvhook.config's lookup, the low-level runtime lookup, and the wrapper run as a
process in front of a fake runtime that records what it was given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.config.load import find_config
from nvhook.errors import ConfigError, WrapperError
from nvhook.launch.argv import parse_runtime_argv
from nvhook.launch.lowlevel import find_runtime
from nvhook.launch.settings import find_config_path, settings_from_document

REPO = Path(__file__).resolve().parent.parent.parent

ARGV = [
    ("containerd create",
     ["--root", "/run/containerd/runc/default", "--log", "/s/log.json", "--log-format", "json",
      "create", "--bundle", "/s/b", "--pid-file", "/s/b/init.pid", "id1"],
     ("create", "/s/b", "/s/log.json", "json")),
    ("docker start", ["--root", "/r", "--log", "/l", "--log-format", "json", "start", "id1"],
     ("start", None, "/l", "json")),
    ("run -b", ["run", "-b", "/b", "x"], ("run", "/b", "", "text")),
    ("bundle=", ["--debug", "create", "--bundle=/b2", "--bundle", "/b3", "x"],
     ("create", "/b3", "", "text")),
    ("no bundle", ["create", "x"], ("create", None, "", "text")),
    ("a container named create", ["delete", "create"], ("delete", None, "", "text")),
    ("--root create", ["--root", "create", "state", "x"], ("state", None, "", "text")),
    ("--bundle=create", ["create", "--bundle=create", "x"], ("create", "create", "", "text")),
    ("equals forms", ["-log=/l", "--log-format=json", "kill", "x", "9"],
     ("kill", None, "/l", "json")),
    ("nothing", [], ("", None, "", "text")),
]


@pytest.mark.parametrize(("argv", "want"), [(a, w) for _, a, w in ARGV],
                         ids=[n for n, _, _ in ARGV])
def test_argv(argv: list[str], want: tuple[str, str | None, str, str]) -> None:
    inv = parse_runtime_argv(argv)
    assert (inv.command, inv.bundle, inv.log_file, inv.log_format) == want
    assert inv.creates == (want[0] in ("create", "run"))


def test_argv_flags_and_errors() -> None:
    assert parse_runtime_argv(["--version"]).version
    assert parse_runtime_argv(["-v"]).version
    assert parse_runtime_argv(["--debug", "state", "x"]).debug
    inv = parse_runtime_argv(["create", "x", "-b"])  # -b takes x: no container id left
    assert inv.error == '"create" requires exactly 1 argument(s)' and not inv.creates
    inv = parse_runtime_argv(["create", "-b=/b", "x"])  # runc: /b; crun: "=/b"
    assert inv.creates and inv.ambiguous and inv.bundle is None


LOOKUPS = [
    ({}, []),
    ({"NVIDIA_CTK_CONFIG_FILE_PATH": "/x/named.toml"}, []),
    ({"XDG_CONFIG_HOME": "{tmp}/xdg"}, ["xdg/nvidia-container-runtime/config.toml"]),
    ({"XDG_CONFIG_HOME": "{tmp}/missing"}, []),
    ({"XDG_CONFIG_HOME": "{tmp}/xdg", "NVIDIA_CTK_CONFIG_FILE_PATH": "/n.toml"},
     ["xdg/nvidia-container-runtime/config.toml"]),
]


@pytest.mark.parametrize(("env", "files"), LOOKUPS,
                         ids=["defaults", "named", "xdg", "xdg-missing", "named-over-xdg"])
def test_config_lookup_agrees_with_the_hook(tmp_path: Path, env: dict[str, str],
                                            files: list[str]) -> None:
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True)
        (tmp_path / name).write_text("")
    environ = {k: v.replace("{tmp}", str(tmp_path)) for k, v in env.items()}
    path, _ = find_config(None, environ)
    assert find_config_path(environ)[0] == path
    if "NVIDIA_CTK_CONFIG_FILE_PATH" not in environ:  # a launcher's recorded config comes next
        recorded = find_config_path(environ, "/rec.toml", "/bin/l")
        assert recorded == ("/rec.toml", True, "the launcher /bin/l written by `nvhook install "
                            "--config /rec.toml`")


def test_settings_from_document() -> None:
    doc = {"nvidia-container-runtime": {"runtimes": ["crun"], "debug": "/l", "log-level": "debug"},
           "nvhook": {"runtime-mode": "spec"}, "swarm-resource": "A, B,,",
           "accept-nvidia-visible-devices-as-volume-mounts": True}
    s = settings_from_document(doc, "/c.toml")
    assert (s.runtimes, s.debug_file, s.log_level, s.runtime_mode) == (("crun",), "/l", "debug",
                                                                       "spec")
    assert s.swarm_variables() == ("A", "B") and s.volume_mounts
    defaults = settings_from_document({}, None)
    assert defaults.runtimes == ("runc", "crun") and defaults.runtime_mode == "auto"


@pytest.mark.parametrize(("doc", "message"), [
    ({"nvidia-container-runtime": {"runtimes": "runc"}}, "is not an array of strings"),
    ({"nvidia-container-runtime": {"runtimes": []}}, "at least one runtime candidate"),
    ({"nvhook": {"runtime-mode": "cdi"}}, "allowed: auto, legacy, spec"),
    ({"swarm-resource": 1}, "swarm-resource = 1 is not a string"),
], ids=["runtimes-type", "runtimes-empty", "mode", "swarm"])
def test_settings_errors(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_from_document(doc, "/c.toml")


def _exe(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_find_runtime(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    runc = _exe(b / "runc")
    assert find_runtime(("runc", "crun"), f"{a}:{b}") == str(runc)
    assert find_runtime((str(runc),), "") == str(runc)
    (a / "nv-none").parent.mkdir(exist_ok=True)
    (a / "nv-none").write_text("not executable")
    with pytest.raises(WrapperError, match=r"no runtime binary found from candidate list: "
                                           r"\[nv-none /nonexistent\]"):
        find_runtime(("nv-none", "/nonexistent"), str(a))


def test_find_runtime_never_returns_the_wrapper_itself(tmp_path: Path) -> None:
    wrapper = _exe(tmp_path / "bin" / "runc")
    os.link(wrapper, tmp_path / "bin" / "nvidia-container-runtime")
    real = _exe(tmp_path / "sbin" / "runc")
    found = find_runtime(("runc",), f"{tmp_path}/bin:{tmp_path}/sbin",
                         own=str(tmp_path / "bin" / "nvidia-container-runtime"))
    assert found == str(real)


# -- the wrapper as a process ---------------------------------------------------------------
FAKE_RUNTIME = """#!/bin/sh
{{ echo "argv0=$0"; echo "args=$*"; echo "cwd=$(pwd)"; echo "env=$MARK"; }} > {out}
[ -f config.json ] && cp config.json {out}.json
exit 0
"""


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A fake runtime (records argv, cwd, env), a config naming it, the wrapper's env."""
    out = tmp_path / "calls"
    runtime = _exe(tmp_path / "rt" / "fake-runc", FAKE_RUNTIME.format(out=out))
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-runtime]\nruntimes = ["{runtime}"]\n'
                      'debug = "/dev/null"\n')
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "MARK": "m1",
           "PYTHONPATH": str(REPO)}
    return out, runtime, env


def _wrapper(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys; from nvhook.runtime.wrapper "
                           "import main; sys.exit(main(['nvhook-runtime', *sys.argv[1:]]))",
                           *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=60, check=False)


def test_non_create_commands_exec_the_runtime_unchanged(
    fake: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    out, runtime, env = fake
    proc = _wrapper(["--root", "/r", "state", "x"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().splitlines() == [f"argv0={runtime}", "args=--root /r state x",
                                            f"cwd={tmp_path}", "env=m1"]


def test_create_of_a_non_gpu_container_leaves_config_json_alone(
    fake: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    out, _, env = fake
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    data = b'{"ociVersion": "1.0.2", "process": {"env": ["A=1"]}, "root": {"path": "r"}}'
    (bundle / "config.json").write_bytes(data)
    inode = (bundle / "config.json").stat().st_ino
    proc = _wrapper(["create", "x"], env, bundle)  # no --bundle: the working directory
    assert proc.returncode == 0, proc.stderr
    assert (bundle / "config.json").read_bytes() == data
    assert (bundle / "config.json").stat().st_ino == inode
    assert Path(f"{out}.json").read_bytes() == data


def test_create_of_a_gpu_container_adds_the_hook_once(
    fake: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    _, _, env = fake
    hook = _exe(tmp_path / "hooks" / "nvidia-container-runtime-hook")
    config = Path(env["NVIDIA_CTK_CONFIG_FILE_PATH"])
    config.write_text(config.read_text() + f'[nvidia-container-runtime-hook]\npath = "{hook}"\n')
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = {"ociVersion": "1.0.2", "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]},
            "root": {"path": "r"}, "zz-unknown": {"kept": [1, 2.5, None]}}
    (bundle / "config.json").write_text(json.dumps(spec))
    (bundle / "config.json").chmod(0o640)
    for _ in range(2):
        proc = _wrapper(["create", "--bundle", str(bundle), "x"], env, tmp_path)
        assert proc.returncode == 0, proc.stderr
    doc = json.loads((bundle / "config.json").read_text())
    assert doc["hooks"]["prestart"] == [{
        "path": str(hook), "args": ["nvidia-container-runtime-hook", "prestart"],
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                f"NVIDIA_CTK_CONFIG_FILE_PATH={config}", "NVHOOK_RUNTIME_DELIVERY=legacy"]}]
    assert doc["zz-unknown"] == {"kept": [1, 2.5, None]}
    assert (bundle / "config.json").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]  # no temp file left


def test_errors_go_to_stderr_and_the_json_log(
    fake: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    _, _, env = fake
    config = Path(env["NVIDIA_CTK_CONFIG_FILE_PATH"])
    debug_log = tmp_path / "logs" / "runtime.log"
    config.write_text(config.read_text().replace('"/dev/null"', f'"{debug_log}"'))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({
        "ociVersion": "1.0.2", "root": {"path": "r"},
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=bogus"]}}))
    log = tmp_path / "log.json"
    proc = _wrapper(["--log", str(log), "--log-format", "json", "create", "--bundle",
                     str(bundle), "x"], env, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("nvhook-runtime: unsupported capabilities found in 'bogus': "
                                  "'bogus' is not a driver capability; valid: compat32, ")
    assert proc.stderr.count("\n") == 1
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["level"] == "error" and "unsupported capabilities" in record["msg"]
    text = debug_log.read_text()  # the config's debug file: logrus text lines
    assert text.startswith('time="') and ' level=error msg="unsupported capabilities' in text
    assert (debug_log.stat().st_mode & 0o777, debug_log.parent.stat().st_mode & 0o777) == (
        0o644, 0o755)


def test_config_json_must_be_a_regular_file(
    fake: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    _, _, env = fake
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (tmp_path / "real.json").write_text('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}')
    (bundle / "config.json").symlink_to(tmp_path / "real.json")
    proc = _wrapper(["create", "--bundle", str(bundle), "x"], env, tmp_path)
    assert proc.returncode == 1
    assert "could not open OCI spec" in proc.stderr
    os.unlink(bundle / "config.json")
    os.mkfifo(bundle / "config.json")
    proc = _wrapper(["create", "--bundle", str(bundle), "x"], env, tmp_path)
    assert proc.returncode == 1 and "not a regular file" in proc.stderr


def test_a_value_flag_before_b_edits_the_bundle_runc_creates(
    fake: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    """Issue 27 item 3: `--pid-file -b ID`: the pid file is "-b", the bundle the working
    directory; the wrapper edits that one, not ./ID/config.json."""
    _, _, env = fake
    hook = _exe(tmp_path / "hooks" / "nvidia-container-runtime-hook")
    config = Path(env["NVIDIA_CTK_CONFIG_FILE_PATH"])
    config.write_text(config.read_text() + f'[nvidia-container-runtime-hook]\npath = "{hook}"\n')
    gpu = {"ociVersion": "1.0.2", "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]},
           "root": {"path": "r"}}
    cwd = tmp_path / "cwd"
    (cwd / "id").mkdir(parents=True)
    for path in (cwd / "config.json", cwd / "id" / "config.json"):
        path.write_text(json.dumps(gpu))
    proc = _wrapper(["create", "--pid-file", "-b", "id"], env, cwd)
    assert proc.returncode == 0, proc.stderr
    assert "hooks" in json.loads((cwd / "config.json").read_text())
    assert json.loads((cwd / "id" / "config.json").read_text()) == gpu


def test_a_bundle_runc_and_crun_read_differently_fails_the_create(
    fake: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    out, _, env = fake
    proc = _wrapper(["create", "-b=/b", "x"], env, tmp_path)  # runc: /b; crun: "=/b"
    assert proc.returncode == 1 and not out.exists()
    assert proc.stderr.startswith("nvhook-runtime: cannot tell the bundle of `create`: runc "
                                  "and crun read the bundle of this command line differently")
    assert proc.stderr.count("\n") == 1
