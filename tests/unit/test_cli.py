"""`nvhook` as a subprocess: prestart --dry-run against bundles in temp dirs, flag spellings and
positions, usage errors (exit 2), one-line errors (exit 1), --debug tracebacks, logging."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
SAMPLE_BUNDLE = REPO / "tests" / "data" / "sample-bundle"
_SCRIPT = Path(sys.executable).parent / "nvhook"
NVHOOK = [str(_SCRIPT)] if os.access(_SCRIPT, os.X_OK) else [sys.executable, "-m", "nvhook"]
GPU_ENV = ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0,1", "NVIDIA_DRIVER_CAPABILITIES=compute"]
UNPRIVILEGED_LINE = (  # NVIDIA 1.20's
    "Ignoring devices requested by environment variable(s) in unprivileged container: "
    "[NVIDIA_VISIBLE_DEVICES]\n"
)


class Hook:
    """Runs `nvhook` with a hermetic config: no driver under its root, so the engine's dry run
    finds none and returns no plan."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        # the hook's starting directory: not the one holding the configs (a config named by
        # NVIDIA_CTK_CONFIG_FILE_PATH inside it is refused: there runc's bundle is)
        self.workdir = tmp_path / "cwd"
        self.workdir.mkdir()
        nodriver = tmp_path / "nodriver"
        (nodriver / "proc").mkdir(parents=True)
        self.base_config = self.config("")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("NVIDIA_CTK_CONFIG_FILE_PATH", "XDG_CONFIG_HOME")}
        self.env["NVIDIA_CTK_CONFIG_FILE_PATH"] = str(self.base_config)

    def config(self, extra: str, name: str = "config.toml", cli: str = "") -> Path:
        nodriver = self.tmp / "nodriver"
        path = self.tmp / name
        path.write_text(
            f'{extra}\n[nvidia-container-cli]\nroot = "{nodriver}"\n{cli}\n'
            f'[nvhook]\nproc-root = "{nodriver}/proc"\n'
        )
        return path

    def bundle(self, env: list[str], name: str = "bundle", **spec: Any) -> Path:
        bundle = self.tmp / name
        (bundle / "rootfs").mkdir(parents=True)
        document = {"ociVersion": "1.0.2", "process": {"env": env}, "root": {"path": "rootfs"}}
        document.update(spec)
        (bundle / "config.json").write_text(json.dumps(document))
        return bundle

    def run(self, args: list[str], state: dict[str, Any] | bytes | None = None,
            cwd: Path | None = None, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        data = state if isinstance(state, bytes) else json.dumps(state or {}).encode()
        return subprocess.run(
            [*NVHOOK, *args], input=data.decode(), capture_output=True, text=True,
            cwd=cwd or self.workdir, env={**self.env, **(env or {})}, timeout=60, check=False,
        )  # fmt: skip

    def dry_run(self, bundle: Path, *flags: str, pid: int = 4242) -> dict[str, Any]:
        state = {"pid": pid, "bundle": str(bundle)}
        proc = self.run([*flags, "prestart", "--dry-run"], state, cwd=bundle)  # as runc does
        assert proc.returncode == 0, proc.stderr
        result: dict[str, Any] = json.loads(proc.stdout)
        return result


@pytest.fixture
def hook(tmp_path: Path) -> Hook:
    return Hook(tmp_path)


def test_dry_run_gpu_container(hook: Hook) -> None:
    bundle = hook.bundle([*GPU_ENV, "NVIDIA_REQUIRE_CUDA=cuda>=12.0"])
    result = hook.dry_run(bundle)
    assert result == {
        "gpu_container": True,
        "request": {
            "devices": ["0", "1"],
            "mig_config_devices": [],
            "mig_monitor_devices": [],
            "imex_channels": [],
            "driver_capabilities": ["compute"],
            "requirements": ["cuda>=12.0"],
            "disable_require": False,
        },
        "container": {"pid": 4242, "bundle": str(bundle), "rootfs": str(bundle / "rootfs")},
    }


def test_dry_run_non_gpu_container(hook: Hook) -> None:
    bundle = hook.bundle(["PATH=/bin"])
    proc = hook.run(["prestart", "--dry-run"], {"pid": 7, "bundle": str(bundle)}, cwd=bundle)
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == {
        "gpu_container": False,
        "request": None,
        "container": {"pid": 7, "bundle": str(bundle), "rootfs": str(bundle / "rootfs")},
    }


def test_dry_run_none_is_a_gpu_container(hook: Hook) -> None:
    result = hook.dry_run(hook.bundle(["NVIDIA_VISIBLE_DEVICES=none"]))
    assert result["gpu_container"] is True
    assert result["request"]["devices"] == []
    assert result["request"]["driver_capabilities"] == ["compute", "utility"]


def test_non_gpu_container_is_silent(hook: Hook) -> None:
    bundle = hook.bundle(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"])
    proc = hook.run(["prestart"], {"pid": 1, "bundle": str(bundle)})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_sample_bundle_from_its_directory(hook: Hook) -> None:
    """The dry run of docs/hook.md: runc's cwd is the bundle, root.path is relative."""
    proc = hook.run(["prestart", "--dry-run"], {"pid": 4242, "bundle": "."}, cwd=SAMPLE_BUNDLE)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["container"] == {
        "pid": 4242, "bundle": str(SAMPLE_BUNDLE), "rootfs": str(SAMPLE_BUNDLE / "rootfs")
    }
    assert result["request"]["devices"] == ["0", "1"]
    assert result["request"]["requirements"] == ["cuda>=12.4 brand=tesla,driver>=470,driver<471"]


def test_relative_root_resolves_against_the_bundle(hook: Hook) -> None:
    """Relative to the bundle (the runtime-spec; runc and crun start hooks there, where
    NVIDIA's working-directory rule gives the same), one line saying so from elsewhere."""
    bundle = hook.bundle(GPU_ENV, root={"path": "../elsewhere/./rootfs"})
    # the configs are in hook.tmp too: named by --config (from NVIDIA_CTK_CONFIG_FILE_PATH, a
    # config inside the hook's starting directory is refused)
    proc = hook.run(["--config", str(hook.base_config), "prestart", "--dry-run"],
                    {"bundle": "bundle"}, cwd=hook.tmp)
    assert proc.returncode == 0, proc.stderr
    container = json.loads(proc.stdout)["container"]
    assert container == {"pid": 0, "bundle": str(bundle),
                         "rootfs": str(bundle.parent / "elsewhere" / "rootfs")}
    assert (f"root.path '../elsewhere/./rootfs' of {bundle}/config.json is relative: taken "
            f"relative to the bundle {bundle}, not to the working directory {hook.tmp}"
            ) in proc.stderr


@pytest.mark.parametrize("command", ["poststart", "poststop"])
def test_poststart_poststop_do_not_read_stdin(hook: Hook, command: str) -> None:
    read_fd, write_fd = os.pipe()  # never closed while the hook runs: reading would hang
    try:
        proc = subprocess.run([*NVHOOK, command, "--whatever"], stdin=read_fd,
                              capture_output=True, text=True, env=hook.env, timeout=30,
                              check=False)  # fmt: skip
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_prestart_does_not_wait_for_stdin_eof(hook: Hook) -> None:
    bundle = hook.bundle(["PATH=/bin"])
    proc = subprocess.Popen([*NVHOOK, "prestart"], stdin=subprocess.PIPE, env=hook.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"bundle": str(bundle)}).encode())
    proc.stdin.flush()
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        proc.stdin.close()
        proc.kill()
        proc.wait()


FLAG_FORMS = [
    ["--config", "{c}", "prestart", "--dry-run"],
    ["-config", "{c}", "prestart", "-dry-run"],
    ["-config={c}", "prestart", "--dry-run"],
    ["--config={c}", "prestart", "--dry-run"],
    ["prestart", "--dry-run", "--config", "{c}"],
    ["prestart", "-config={c}", "-dry-run"],
    ["--dry-run", "-config", "{c}", "prestart"],
    ["-debug", "-config", "{c}", "prestart", "--dry-run"],
    ["prestart", "--dry-run=true", "-debug=false", "--config", "{c}"],
    ["--", "prestart", "--dry-run", "--config={c}"],
]  # fmt: skip
FLAG_IDS = ["double-dash", "single-dash", "single-equals", "double-equals", "after-command",
            "after-command-equals", "dry-run-first", "debug-first", "bool-values", "dash-dash"]


@pytest.mark.parametrize("form", FLAG_FORMS, ids=FLAG_IDS)
def test_flag_spellings_and_positions(hook: Hook, form: list[str]) -> None:
    config = hook.config('swarm-resource = "MY_GPUS"', name="swarm.toml")
    bundle = hook.bundle(["NVIDIA_VISIBLE_DEVICES=all", "MY_GPUS=3"])
    args = [a.replace("{c}", str(config)) for a in form]
    proc = hook.run(args, {"bundle": str(bundle)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["request"]["devices"] == ["3"]  # only with swarm.toml


def test_config_path_relative_to_the_callers_cwd(hook: Hook) -> None:
    hook.config('swarm-resource = "MY_GPUS"', name="rel.toml")
    bundle = hook.bundle(["MY_GPUS=5"])
    proc = hook.run(["--config", "rel.toml", "prestart", "--dry-run"], {"bundle": str(bundle)},
                    cwd=hook.tmp)  # fmt: skip
    assert json.loads(proc.stdout)["request"]["devices"] == ["5"], proc.stderr


def test_config_flag_beats_the_environment(hook: Hook) -> None:
    flagged = hook.config('swarm-resource = "A"', name="a.toml")
    hook.env["NVIDIA_CTK_CONFIG_FILE_PATH"] = str(hook.config('swarm-resource = "B"', "b.toml"))
    bundle = hook.bundle(["A=1", "B=2"])
    assert hook.dry_run(bundle)["request"]["devices"] == ["2"]
    assert hook.dry_run(bundle, "--config", str(flagged))["request"]["devices"] == ["1"]


@pytest.mark.parametrize("args", [["--version"], ["-version"], ["prestart", "--version"],
                                  ["-version=true", "prestart"], ["--version", "nonsense"]],
                         ids=["double", "single", "after-command", "bool-value", "any-command"])
def test_version(hook: Hook, args: list[str]) -> None:
    proc = hook.run(args)
    assert proc.returncode == 0
    assert proc.stdout.startswith("nvhook version ")
    assert "NVIDIA Container Runtime Hook v1.17.8 compatible" in proc.stdout


USAGE = [
    ([], None),
    (["foo"], "command provided but not defined: foo"),
    (["-x", "prestart"], "flag provided but not defined: -x"),
    (["prestart", "--dryrun"], "flag provided but not defined: -dryrun"),
    (["-config"], "flag needs an argument: -config"),
    (["prestart", "--config"], "flag needs an argument: -config"),
    (["-debug=maybe", "prestart"], 'invalid boolean value "maybe" for -debug: parse error'),
    (["---x", "prestart"], "bad flag syntax: ---x"),
    (["-dry-run", "poststop"], "flag -dry-run applies to the prestart command only"),
    (["prestart", "--dry-run=2"], 'invalid boolean value "2" for -dry-run: parse error'),
]  # fmt: skip
USAGE_IDS = ["no-command", "unknown-command", "unknown-flag", "unknown-flag-after-command",
             "missing-value", "missing-value-after-command", "bad-bool", "bad-syntax",
             "dry-run-elsewhere", "dry-run-bad-bool"]


@pytest.mark.parametrize(("args", "message"), USAGE, ids=USAGE_IDS)
def test_usage_errors_exit_2(hook: Hook, args: list[str], message: str | None) -> None:
    proc = hook.run(args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    usage_start = 0 if message is None else 1
    if message is not None:
        assert lines[0] == message
    assert lines[usage_start].startswith("Usage of ")
    assert "  -config string\n    \tconfiguration file\n" in proc.stderr
    assert "  -debug\n    \tenable debug output\n" in proc.stderr
    assert "  -version\n    \tenable version output\n" in proc.stderr
    assert "\nCommands:\n  prestart\n        run the prestart hook\n  poststart\n        no-op\n"\
        "  poststop\n        no-op\n" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["-h"], ["--help"], ["prestart", "-help"]],
                         ids=["h", "help", "after-command"])
def test_help_exits_0(hook: Hook, args: list[str]) -> None:
    proc = hook.run(args)
    assert proc.returncode == 0
    assert proc.stderr.startswith("Usage of ")


ERRORS = [
    (["--config", "{tmp}/missing.toml", "prestart"], None,
     "couldn't open required configuration file {tmp}/missing.toml: file does not exist"),
    (["prestart"], b"{not json", "could not decode container state: "),
    (["prestart"], {"bundle": "{tmp}/nope"},
     "could not open OCI spec: open {tmp}/nope/config.json: no such file or directory"),
    (["prestart"], "env:FOO", "invalid environment variable: FOO"),
    (["prestart"], "env:NVIDIA_VISIBLE_DEVICES=0,NVIDIA_DRIVER_CAPABILITIES=foo",
     "unsupported capabilities found in 'foo': 'foo' is not a driver capability; valid: "),
    (["prestart"], "env:NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0",
     "invoking the NVIDIA Container Runtime Hook directly"),
    (["prestart", "--dry-run"], "env:NVIDIA_VISIBLE_DEVICES=0,NVIDIA_MIG_CONFIG_DEVICES=0",
     "cannot set MIG_CONFIG_DEVICES in non privileged container"),
    (["prestart"], "env:NVIDIA_VISIBLE_DEVICES=0,CUDA_VERSION=09.0,NVIDIA_REQUIRE_CUDA=",
     "failed to get requirements failed to get version: invalid CUDA version 09.0"),
    (["prestart"], "env:FOO\nBAR", "invalid environment variable: FOO\\nBAR"),
]  # fmt: skip
ERROR_IDS = ["missing-config", "bad-state", "missing-spec", "bad-env", "bad-capability", "cdi-mode",
             "mig-unprivileged", "bad-cuda-version", "newline-escaped"]


def _error_case(hook: Hook, args: list[str], state: Any) -> tuple[list[str], Any]:
    tmp = str(hook.tmp)
    args = [a.replace("{tmp}", tmp) for a in args]
    if isinstance(state, str) and state.startswith("env:"):
        env = state[4:].split(",") if "\n" not in state else [state[4:]]
        state = {"bundle": str(hook.bundle(env))}
    elif isinstance(state, dict):
        state = {k: v.replace("{tmp}", tmp) for k, v in state.items()}
    return args, state


@pytest.mark.parametrize(("args", "state", "message"), ERRORS, ids=ERROR_IDS)
def test_errors_are_one_line(hook: Hook, args: list[str], state: Any, message: str) -> None:
    args, state = _error_case(hook, args, state)
    proc = hook.run(args, state)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(message.replace("{tmp}", str(hook.tmp)))
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "state", "message"), ERRORS[:4], ids=ERROR_IDS[:4])
def test_debug_shows_a_traceback(hook: Hook, args: list[str], state: Any, message: str) -> None:
    args, state = _error_case(hook, ["--debug", *args], state)
    proc = hook.run(args, state)
    assert proc.returncode == 1
    assert "Traceback (most recent call last):" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(message.replace("{tmp}", str(hook.tmp)))


def test_missing_driver_root_is_one_line_with_its_fix(hook: Hook) -> None:
    """Issue 18: not a load-kmods warning plus the ldcache error; the same line everywhere."""
    gone = hook.tmp / "gone"
    config = hook.tmp / "gone.toml"
    config.write_text(f'[nvidia-container-cli]\nroot = "{gone}"\n')
    line = (f"no NVIDIA driver: the driver root {gone} does not exist or is not a directory "
            "(install the NVIDIA driver, or set nvidia-container-cli.root to the directory it "
            "is installed in)\n")
    bundle = hook.bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    state = {"pid": 4242, "bundle": str(bundle)}
    for args, rc in ((["prestart"], 1), (["prestart", "--dry-run"], 0), (["info"], 1),
                     (["list"], 1)):
        proc = hook.run(["--config", str(config), *args], state, cwd=bundle)  # as runc does
        assert (proc.returncode, proc.stderr) == (rc, line), args


def test_invalid_config_fails_even_without_gpus(hook: Hook) -> None:
    config = hook.config('[nvidia-container-runtime]\nmode = "fast"', name="bad.toml")
    proc = hook.run(["--config", str(config), "prestart"], {"bundle": str(hook.bundle([]))})
    assert proc.returncode == 1
    assert proc.stderr == (
        f"invalid config {config}: nvidia-container-runtime.mode = 'fast' "
        "(allowed: auto, cdi, csv, jit-cdi, legacy)\n"
    )


def test_unprivileged_log_line(hook: Hook) -> None:
    config = hook.config("accept-nvidia-visible-devices-envvar-when-unprivileged = false", "u.toml")
    bundle = hook.bundle(["NVIDIA_VISIBLE_DEVICES=all"])
    proc = hook.run(["--config", str(config), "prestart"], {"bundle": str(bundle)})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", UNPRIVILEGED_LINE)


def test_debug_log_file(hook: Hook) -> None:
    log = hook.tmp / "logs" / "hook.log"
    log.parent.mkdir()
    log.write_text("earlier line\n")
    config = hook.config("", name="log.toml", cli=f'debug = "{log}"')
    bundle = hook.bundle(["PATH=/bin"])
    proc = hook.run(["--config", str(config), "prestart"], {"pid": 99, "bundle": str(bundle)})
    assert (proc.returncode, proc.stderr) == (0, "")
    text = log.read_text()
    assert text.startswith("earlier line\n")  # appended
    assert f"container pid 99 bundle {bundle}: not a GPU container" in text


def test_debug_log_file_unwritable_is_a_warning(hook: Hook) -> None:
    config = hook.config("", "w.toml", cli=f'debug = "{hook.tmp}/no/such/dir/x.log"')
    proc = hook.run(["--config", str(config), "prestart"], {"bundle": str(hook.bundle([]))})
    assert proc.returncode == 0
    assert proc.stderr.startswith(f"open debug log {hook.tmp}/no/such/dir/x.log: ")


def test_debug_flag_logs_the_decision(hook: Hook) -> None:
    bundle = hook.bundle(GPU_ENV)
    proc = hook.run(["--debug", "prestart", "--dry-run"], {"pid": 5, "bundle": str(bundle)},
                    cwd=bundle)
    assert proc.returncode == 0
    assert "Auto-detected mode as 'legacy'" in proc.stderr
    assert f"GPU container pid 5 rootfs {bundle}/rootfs" in proc.stderr


def test_missing_command_module_is_a_clear_error(hook: Hook, tmp_path: Path) -> None:
    """A command whose module is absent fails with one line, not a traceback."""
    stub = tmp_path / "stub"
    (stub / "nvhook").mkdir(parents=True)
    (stub / "nvhook" / "launch").mkdir()
    for name in ("__init__.py", "cli.py", "errors.py", "commands.py", "flags.py",
                 "launch/__init__.py", "launch/isolation.py", "logs.py"):
        (stub / "nvhook" / name).write_text((REPO / "nvhook" / name).read_text())
    code = "import sys; from nvhook.cli import main; sys.exit(main(['list']))"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = "
                           f"[{str(stub)!r}, {str(REPO)!r}]; " + code],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr == ("command list: module nvhook.admin is not part of this "
                           "installation (reinstall nvhook, or use a version that has this "
                           "command)\n")


def test_python_m_nvhook(hook: Hook) -> None:
    proc = subprocess.run([sys.executable, "-m", "nvhook", "--version"], capture_output=True,
                          text=True, timeout=30, check=False, cwd="/")  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("nvhook version")


@pytest.mark.root
def test_dry_run_includes_the_engine_plan(hook: Hook, sim_root: Any) -> None:
    bundle = hook.bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    result = hook.dry_run(bundle, "--config", sim_root.config_path)
    assert result["gpu_container"] is True
    assert "plan" in result
    assert isinstance(result["plan"], dict)


def test_control_characters_in_errors_are_escaped() -> None:
    from nvhook.logs import one_line as _one_line

    assert _one_line("bad\nvalue\r\x1b[31m\x07 é") == "bad\\nvalue\\r\\x1b[31m\\x07 é"
    assert _one_line("plain text") == "plain text"


def test_development_commands_missing_from_a_package_say_where_to_get_them(
        tmp_path: Path) -> None:
    """The .deb leaves nvhook/dev out: `nvhook sim` there names the checkout, not a bug."""
    stub = tmp_path / "stub"
    shutil.copytree(REPO / "nvhook", stub / "nvhook",
                    ignore=shutil.ignore_patterns("dev", "__pycache__"))
    code = "import sys; from nvhook.cli import main; sys.exit(main(['sim', '--help']))"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = "
                           f"[{str(stub)!r}, {str(REPO)!r}]; " + code],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith("command sim: the development tools (nvhook.dev")
    assert "packaging/setup.sh" in proc.stderr and proc.stderr.count("\n") == 1
