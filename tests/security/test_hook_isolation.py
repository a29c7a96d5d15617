"""The installed hook launcher is not influenced by its environment or its working directory.

runc runs the hook as host root with cwd = the (untrusted) bundle, and older runc or crun may
hand it the container's environment (CVE-2025-23266). The launcher (`nvhook install`) runs
`/usr/bin/python3 -IS`, re-executes once without dynamic-loader variables and changes to "/".
Each case plants code that writes a marker file when it runs, then checks that no marker
appears and that the decision is the same as in a clean run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nvhook.dev.demo.driver import launcher_python

REPO = Path(__file__).resolve().parent.parent.parent
_SCRIPT = Path(sys.executable).parent / "nvhook"
NVHOOK = [str(_SCRIPT)] if os.access(_SCRIPT, os.X_OK) else [sys.executable, "-m", "nvhook"]
PYTHON = launcher_python()  # /usr/bin/python3 unless the tests run under another version
INSTALL = [*NVHOOK, "install", "--python", PYTHON]
SHADOWED = ("json", "ctypes", "logging", "dataclasses", "enum", "typing", "tomllib", "re",
            "encodings", "sitecustomize", "usercustomize", "evilmod", "startup")  # fmt: skip
EVIL_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {
    char line[64];
    int fd = open(MARKER, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
        if (n > 0) (void)!write(fd, line, (size_t)n);
        close(fd);
    }
}
"""


class Planted:
    """A bundle full of shadowing modules, an evil PYTHONPATH dir and an installed launcher."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.markers = root / "markers"
        self.markers.mkdir()
        self.evil = root / "evil"
        self.bundle = root / "bundle"
        for directory in (self.evil, self.bundle):
            self._plant(directory)
        (self.bundle / "rootfs").mkdir()
        spec = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"env": [
            "NVIDIA_VISIBLE_DEVICES=0,1", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0"]}}  # fmt: skip
        (self.bundle / "config.json").write_text(json.dumps(spec))
        nodriver = root / "nodriver"
        (nodriver / "proc").mkdir(parents=True)
        self.config = root / "config.toml"
        self.config.write_text(f'[nvidia-container-cli]\nroot = "{nodriver}"\n'
                               f'[nvhook]\nproc-root = "{nodriver}/proc"\n')  # fmt: skip
        proc = subprocess.run([*INSTALL, "--prefix", str(root / "bin")],
                              capture_output=True, text=True, check=False, timeout=60)
        assert proc.returncode == 0, proc.stderr
        self.launcher = root / "bin" / "nvidia-container-runtime-hook"

    def _plant(self, directory: Path) -> None:
        directory.mkdir()
        for name in SHADOWED:
            code = (f"open({str(self.markers / name)!r}, 'a').write(__name__ + '\\n')\n"
                    "class X(Warning):\n    pass\n")  # fmt: skip
            (directory / f"{name}.py").write_text(code)
        for package in ("nvhook", "nvmount"):
            (directory / package).mkdir()
            (directory / package / "__init__.py").write_text(
                f"open({str(self.markers / package)!r}, 'a').write('imported\\n')\n"
            )
            (directory / package / "cli.py").write_text(
                f"open({str(self.markers / (package + '.cli'))!r}, 'a').write('x')\n"
                "def main(*a, **k):\n    return 0\n"
            )
        (directory / "evil.pth").write_text(
            f"import os; open({str(self.markers / 'pth')!r}, 'a').write('x')\n"
        )

    def env(self, **extra: str) -> dict[str, str]:
        base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                "NVIDIA_CTK_CONFIG_FILE_PATH": str(self.config)}  # fmt: skip
        return {**base, **extra}

    def run(self, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.launcher), *flags, "prestart", "--dry-run"],
            input=json.dumps({"pid": 4242, "bundle": "."}), capture_output=True, text=True,
            cwd=self.bundle, env=env, timeout=60, check=False,
        )  # fmt: skip

    def marker_names(self) -> list[str]:
        return sorted(p.name for p in self.markers.iterdir())


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    return Planted(tmp_path_factory.mktemp("isolation"))


@pytest.fixture(scope="module")
def baseline(planted: Planted) -> dict[str, Any]:
    proc = planted.run(planted.env())
    assert proc.returncode == 0, proc.stderr
    assert planted.marker_names() == [], "cwd files were imported in a clean run"
    result: dict[str, Any] = json.loads(proc.stdout)
    assert result["request"]["devices"] == ["0", "1"]
    assert result["container"]["bundle"] == str(planted.bundle)
    return result


def _clear(planted: Planted) -> None:
    for path in planted.markers.iterdir():
        path.unlink()


PYTHON_CASES = [
    {"PYTHONPATH": "{evil}"},
    {"PYTHONSTARTUP": "{evil}/startup.py", "PYTHONINSPECT": "1"},
    {"PYTHONWARNINGS": "ignore::evilmod.X", "PYTHONPATH": "{evil}"},
    {"PYTHONHOME": "{evil}"},
    {"PYTHONUSERBASE": "{evil}", "PYTHONNOUSERSITE": ""},
    {"PYTHONPLATLIBDIR": "{evil}", "PYTHONSAFEPATH": "", "PYTHONEXECUTABLE": "{evil}/python"},
    {"PYTHONPATH": "{evil}", "PYTHONSTARTUP": "{evil}/startup.py", "PYTHONHOME": "{evil}",
     "PYTHONWARNINGS": "ignore::evilmod.X", "PYTHONINSPECT": "1", "PYTHONVERBOSE": "1"},
]  # fmt: skip
PYTHON_IDS = ["pythonpath", "pythonstartup", "pythonwarnings", "pythonhome", "userbase",
              "misc", "all-python"]


@pytest.mark.parametrize("extra", PYTHON_CASES, ids=PYTHON_IDS)
def test_python_variables_and_cwd_have_no_effect(
    planted: Planted, baseline: dict[str, Any], extra: dict[str, str]
) -> None:
    _clear(planted)
    env = planted.env(**{k: v.replace("{evil}", str(planted.evil)) for k, v in extra.items()})
    proc = planted.run(env)
    assert planted.marker_names() == []
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == baseline


@pytest.fixture(scope="module")
def evil_libs(planted: Planted) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the marker libraries (packaging/setup.sh installs it)")
    libdir = planted.root / "evil-lib"
    libdir.mkdir()
    source = libdir / "evil.c"
    source.write_text(EVIL_C)
    for name, marker in (("libffi.so.8", "ld-library-path"), ("preload.so", "ld-preload")):
        define = f'-DMARKER="{planted.markers / marker}"'
        subprocess.run([gcc, "-shared", "-fPIC", define, "-o", str(libdir / name), str(source)],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
    return libdir


def test_ld_library_path_is_dropped_before_anything_is_loaded(
    planted: Planted, baseline: dict[str, Any], evil_libs: Path
) -> None:
    """An evil libffi.so.8 would be picked up by `import ctypes` (the engine's dry run imports
    it); the re-executed hook no longer has LD_LIBRARY_PATH, so the real one is loaded."""
    _clear(planted)
    proc = planted.run(planted.env(LD_LIBRARY_PATH=str(evil_libs)), "--debug")
    assert planted.marker_names() == []
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == baseline
    assert "re-executed without dynamic-loader variables" in proc.stderr


def test_ld_library_path_would_matter_without_the_reexec(
    planted: Planted, evil_libs: Path
) -> None:
    """Control: pretending the re-exec already happened (`-X nvhook_reexec`), the same run
    loads the evil libffi.so.8 and fails, so the test above exercises a real threat."""
    proc = subprocess.run(
        [PYTHON, "-X", "nvhook_reexec", "-IS", str(planted.launcher), "prestart",
         "--dry-run"],
        input=json.dumps({"bundle": "."}), capture_output=True, text=True, cwd=planted.bundle,
        env=planted.env(LD_LIBRARY_PATH=str(evil_libs)), timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "ffi" in proc.stderr


def test_ld_preload_runs_only_in_the_first_image(
    planted: Planted, baseline: dict[str, Any], evil_libs: Path
) -> None:
    """Preloaded code runs before any interpreter code: no interpreter can stop that (the hook
    entries nvhook writes carry an explicit env). The re-exec keeps it out of the process image
    that does the work: the constructor runs once, not twice."""
    _clear(planted)
    env = planted.env(LD_PRELOAD=str(evil_libs / "preload.so"), LD_AUDIT="/nonexistent.so",
                      GCONV_PATH=str(planted.evil))  # fmt: skip
    proc = planted.run(env, "--debug")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == baseline
    assert len((planted.markers / "ld-preload").read_text().splitlines()) == 1
    assert "re-executed without dynamic-loader variables" in proc.stderr


def test_launcher_text(tmp_path: Path) -> None:
    proc = subprocess.run([*INSTALL, "--print"], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith(f"#!{PYTHON} -IS\n# nvhook hook launcher")
    assert 'os.chdir("/")' in text
    assert "sys.path.extend(" in text and "sys.path.insert" not in text
    assert str(REPO) in text  # where nvhook is imported from (editable install)
    assert "main(cwd=_cwd, stdin=_stdin)" in text and "screen(sys.argv[1:], _cwd)" in text
    assert "import posix as os" in text  # the os module is not loaded for the gate


def test_install_writes_names_and_refuses_foreign_files(tmp_path: Path) -> None:
    prefix = tmp_path / "bin"
    proc = subprocess.run([*INSTALL, "--prefix", str(prefix), "--name", "a",
                           "--name", "b"], capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(prefix / "a"), str(prefix / "b")]
    assert (prefix / "a").stat().st_mode & 0o777 == 0o755
    foreign = prefix / "nvhook-hook"
    foreign.write_text("#!/bin/sh\necho not ours\n")
    proc = subprocess.run([*INSTALL, "--prefix", str(prefix)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"install launcher {foreign}: the file exists and is not")
    assert foreign.read_text() == "#!/bin/sh\necho not ours\n"
    proc = subprocess.run([*INSTALL, "--prefix", str(prefix), "--force"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "nvhook hook launcher" in foreign.read_text()
    assert sorted(p.name for p in prefix.iterdir()) == [
        "a", "b", "nvhook-hook", "nvhook-runtime", "nvidia-cdi-hook", "nvidia-container-cli",
        "nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-ctk"]


def test_install_relative_prefix_and_bad_interpreter(tmp_path: Path) -> None:
    proc = subprocess.run([*INSTALL, "--prefix", "rel"], capture_output=True,
                          text=True, timeout=60, check=False, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rel" / "nvidia-container-runtime-hook").is_file()
    proc = subprocess.run([*NVHOOK, "install", "--print", "--python", "/nonexistent/python3"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("install launcher: run /nonexistent/python3: ")


@pytest.mark.parametrize("name", ["nvidia-container-cli", "nvhook-runtime", "nvidia-ctk",
                                  "nvidia-cdi-hook"])
def test_cli_and_runtime_launchers_are_isolated_too(
    planted: Planted, evil_libs: Path, name: str
) -> None:
    """The drop-in CLI and the runtime wrapper run as root for containerd/dockerd: planted
    modules in the working directory, PYTHONPATH and .pth files are not imported."""
    _clear(planted)
    env = planted.env(PYTHONPATH=str(planted.evil), PYTHONSTARTUP=str(planted.evil / "x.py"),
                      LD_LIBRARY_PATH=str(evil_libs))
    proc = subprocess.run([str(planted.root / "bin" / name), "--version"], capture_output=True,
                          text=True, cwd=planted.bundle, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert planted.marker_names() == []
    first = {"nvidia-container-cli": "cli-version: ", "nvhook-runtime": "nvhook-runtime version ",
             "nvidia-ctk": "NVIDIA Container Toolkit CLI version ",
             "nvidia-cdi-hook": "NVIDIA CDI Hook version "}[name]
    assert proc.stdout.startswith(first)


def test_launcher_kinds(tmp_path: Path) -> None:
    """hook and cli leave their cwd and drop loader variables; the runtime wrapper keeps both
    (runc's default bundle is the cwd, and the runtime must get the daemon's environment)."""
    texts = {}
    for kind in ("hook", "cli", "runtime", "ctk", "cdihook"):
        proc = subprocess.run([*NVHOOK, "--config", "/etc/x.toml", "install", "--python", PYTHON,
                               "--print", kind], capture_output=True, text=True, timeout=60,
                              check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        texts[kind] = proc.stdout
    for kind in ("hook", "cli", "ctk", "cdihook"):  # the last two run for containers too
        assert 'os.chdir("/")' in texts[kind] and "nvhook_reexec" in texts[kind]
        assert "_CONFIG = (b'NVIDIA_CTK_CONFIG_FILE_PATH', b'/etc/x.toml')\n" in texts[kind]
        assert "    os.environ.setdefault(*_CONFIG)" in texts[kind]  # launcher.pyt's body
    assert "from nvhook.compat.nvcli.nvidia_container_cli import main" in texts["cli"]
    runtime = texts["runtime"]  # a POSIX sh front (nvhook.launch.runtime_sh)
    assert runtime.startswith("#!/bin/sh\n") and "cd " not in runtime
    assert "nvhook_reexec" not in runtime and "export " not in runtime  # env passed unchanged
    assert f"exec {PYTHON} -IS" in runtime.replace('"$nvhook_python"', PYTHON)
    assert "from nvhook.runtime.wrapper import launched" in runtime
    assert "nvhook_config=/etc/x.toml\n" in runtime


def test_moved_installation_fails_with_one_line(tmp_path: Path) -> None:
    """A launcher whose recorded import directories are gone (a moved venv) says so in one
    line and exits 127, for every kind."""
    for kind in ("hook", "cli", "runtime"):
        proc = subprocess.run([*INSTALL, "--print", kind], capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        if kind == "runtime":  # the sh launcher checks the wrapper module before Python
            head, _, rest = proc.stdout.partition("nvhook_module=")
            moved = head + f"nvhook_module={tmp_path}/gone/wrapper.py\n" + rest.split("\n", 1)[1]
        else:
            head, _, rest = proc.stdout.partition("sys.path.extend(")
            moved = (head + f"sys.path.extend([{str(tmp_path / 'gone')!r}])\n"
                     + rest.split(")\n", 1)[1])
        launcher = tmp_path / f"launcher-{kind}"
        launcher.write_text(moved)
        launcher.chmod(0o755)
        run = subprocess.run([str(launcher), "--version"], capture_output=True, text=True,
                             timeout=60, check=False, cwd="/")
        assert run.returncode == 127, run.stderr
        lines = run.stderr.splitlines()
        assert len(lines) == 1 and "Traceback" not in run.stderr
        start = ("nvhook-runtime: cannot run the runtime wrapper: " if kind == "runtime" else
                 f"{launcher}: cannot import nvhook (No module named 'nvhook')")
        assert lines[0].startswith(start)
        assert "re-run `nvhook install`, or reinstall the nvhook package" in lines[0]


def test_uninstall_removes_only_launchers(tmp_path: Path) -> None:
    prefix = tmp_path / "bin"
    proc = subprocess.run([*INSTALL, "--prefix", str(prefix)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (prefix / "nvhook-hook").write_text("#!/bin/sh\necho not ours\n")  # replaced by someone
    (prefix / "other").write_text("keep")
    proc = subprocess.run([*INSTALL, "--prefix", str(prefix), "--uninstall"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.split()) == 6  # every default launcher but the replaced one
    assert f"leaving {prefix / 'nvhook-hook'}: not an nvhook launcher" in proc.stderr
    assert sorted(p.name for p in prefix.iterdir()) == ["nvhook-hook", "other"]
    again = subprocess.run([*INSTALL, "--prefix", str(prefix), "--uninstall"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0 and again.stdout == ""
