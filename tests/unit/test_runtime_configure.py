"""`nvhook runtime configure` (nvhook.admin.configure): docker daemon.json, containerd and CRI-O
drop-ins, the hooks.d file; existing content kept, invalid input refused, idempotent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nvhook.admin.configure import containerd, crio, docker, tomlw
from nvhook.errors import ConfigureError
from tests._compat import tomllib

REPO = Path(__file__).resolve().parent.parent.parent
WRAPPER = "/opt/nvhook/bin/nvidia-container-runtime"


def configure(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nvhook", "runtime", "configure", *args],
                          capture_output=True, text=True, timeout=60, check=False, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})


def test_docker_keeps_content_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"storage-driver": "overlay2", "runtimes": {"other": {"path": "/x"}}}')
    path.chmod(0o600)
    args = ("--runtime=docker", f"--config={path}", f"--runtime-path={WRAPPER}",
            "--set-as-default")
    first = configure(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"Wrote updated config to {path}\nrestart dockerd")
    doc = json.loads(path.read_text())
    assert list(doc) == ["storage-driver", "runtimes", "default-runtime"]
    assert doc["runtimes"] == {"other": {"path": "/x"},
                               "nvidia": {"args": [], "path": WRAPPER}}
    assert doc["default-runtime"] == "nvidia" and path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    second = configure(*args)
    assert "already up to date" in second.stdout and path.read_text() == text


@pytest.mark.parametrize(("content", "message"), [
    ("{", "not valid JSON"), ("[]", "not a JSON object"),
    ('{"runtimes": []}', '"runtimes" is not an object'),
    ('{"a": 1, "a": 2}', "duplicate key"),
], ids=["syntax", "array", "runtimes", "duplicate"])
def test_docker_refuses_invalid_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(content)
    proc = configure("--runtime=docker", f"--config={path}", f"--runtime-path={WRAPPER}")
    assert proc.returncode == 1 and message in proc.stderr
    assert path.read_text() == content


def test_docker_dry_run_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "daemon.json"
    proc = configure("--runtime=docker", f"--config={path}", f"--runtime-path={WRAPPER}",
                     "--runtime-name=gpu", "--dry-run")
    assert json.loads(proc.stdout) == {"runtimes": {"gpu": {"args": [], "path": WRAPPER}}}
    assert not path.parent.exists()


MAIN_V2 = """version = 2
imports = ["{dir}/conf.d/*.toml"]
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


def test_containerd_v2_dropin_copies_runc_options(tmp_path: Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text(MAIN_V2.format(dir=tmp_path))
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    proc = configure("--runtime=containerd", f"--config={main}", f"--drop-in={drop}",
                     f"--runtime-path={WRAPPER}", "--set-as-default")
    assert proc.returncode == 0, proc.stderr
    assert "imports" not in proc.stdout  # imported by the glob: the main file is not touched
    cri = tomllib.loads(drop.read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "container_annotations": ["cdi.k8s.io/*"],
        "options": {"SystemdCgroup": True, "BinaryName": WRAPPER}}
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": True}
    assert main.read_text() == MAIN_V2.format(dir=tmp_path)
    assert not (tmp_path / "config.toml.nvhook.bak").exists()
    assert "already up to date" in configure("--runtime=containerd", f"--config={main}",
                                             f"--drop-in={drop}", f"--runtime-path={WRAPPER}",
                                             "--set-as-default").stdout


def test_containerd_v3_holds_only_the_runtime(tmp_path: Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text('version = 3\nimports = ["d/*.toml"]\n'
                    '[plugins."io.containerd.cri.v1.images"]\nsnapshotter = "native"\n'
                    '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n'
                    'runtime_type = "io.containerd.runc.v2"\n')
    drop = tmp_path / "d" / "99-nvidia.toml"
    drop.parent.mkdir()
    drop.write_text('version = 3\n[plugins."io.containerd.cri.v1.images"]\nkeep = true\n')
    proc = configure("--runtime=containerd", f"--config={main}", f"--drop-in={drop}",
                     f"--runtime-path={WRAPPER}")
    assert proc.returncode == 0, proc.stderr
    assert "imports" not in proc.stdout  # 2.x: a relative glob is relative to the file's dir
    doc = tomllib.loads(drop.read_text())
    assert doc["plugins"]["io.containerd.cri.v1.images"] == {"keep": True}
    assert doc["plugins"]["io.containerd.cri.v1.runtime"] == {"containerd": {"runtimes": {
        "nvidia": {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": WRAPPER},
                   "container_annotations": ["cdi.k8s.io/*"]}}}}


def test_containerd_refuses_a_disabled_cri_plugin(tmp_path: Path) -> None:
    main = tmp_path / "config.toml"
    main.write_text('version = 3\ndisabled_plugins = ["io.containerd.cri.v1.runtime"]\n')
    drop = tmp_path / "d" / "99-nvidia.toml"
    proc = configure("--runtime=containerd", f"--config={main}", f"--drop-in={drop}",
                     f"--runtime-path={WRAPPER}")
    assert proc.returncode == 1 and "the CRI plugin is disabled" in proc.stderr
    assert proc.stderr.splitlines()[-1].endswith("nothing was written")  # one line
    assert not drop.parent.exists()


def test_containerd_refusals() -> None:
    with pytest.raises(ConfigureError, match="version 4 is not supported"):
        containerd.config_version({"version": 4}, 2)
    assert containerd.config_version({"root": "/x"}, 2) == 1
    with pytest.raises(ConfigureError, match="has version 3 but the main config is version 2"):
        containerd.drop_in_document({}, {"version": 3, "root": "/x"}, None, 2, "nvidia",
                                    WRAPPER, set_default=False, where="d.toml")


def test_crio_dropin() -> None:
    main = {"crio": {"runtime": {"default_runtime": "crun", "runtimes": {
        "crun": {"runtime_path": "/usr/bin/crun", "monitor_path": "/usr/bin/conmon"}}}}}
    doc = crio.configure(main, None, "nvidia", WRAPPER, set_default=True, where="d")
    assert doc == {"crio": {"runtime": {"default_runtime": "nvidia", "runtimes": {"nvidia": {
        "runtime_path": WRAPPER, "monitor_path": "/usr/bin/conmon", "runtime_type": "oci"}}}}}
    assert tomllib.loads(tomlw.render_checked(doc, "d")) == doc


def test_hooks_file(tmp_path: Path) -> None:
    hook = tmp_path / "nvidia-container-runtime-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    proc = configure("--runtime=podman", f"--hooks-dir={tmp_path}/hooks.d",
                     f"--hook-path={hook}", "--hook-config=/etc/sim.toml")
    assert proc.returncode == 0, proc.stderr
    assert "nothing to restart" in proc.stdout
    doc = json.loads((tmp_path / "hooks.d" / "oci-nvidia-hook.json").read_text())
    assert list(doc) == ["version", "hook", "when", "stages"]
    assert doc["hook"] == {"path": str(hook), "args": ["nvidia-container-runtime-hook",
                                                       "prestart"],
                           "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                                   "/sbin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH=/etc/sim.toml"]}
    assert doc["when"] == {"always": True} and doc["stages"] == ["prestart"]
    relative = configure("--runtime=podman", f"--hooks-dir={tmp_path}", "--hook-path=rel")
    assert relative.returncode == 1 and "must be an absolute path" in relative.stderr


TOML_DOCS: list[dict[str, Any]] = [
    {"version": 2, "a": {"b.c": {"d": [1, "x"], "e": {}}}, "f": 1.5, "g": {"h": {"i": True}}},
    {"plugins": {'q"k': {"inline": [{"x": 1}], "s": "line\nbreak\u00e9\x01"}}},
]


@pytest.mark.parametrize("doc", TOML_DOCS, ids=["nested", "quoting"])
def test_toml_writer_round_trips(doc: dict[str, Any]) -> None:
    assert tomllib.loads(tomlw.render_checked(doc, "x")) == doc


def test_docker_module_keeps_existing_entry_keys() -> None:
    doc = docker.configure({"runtimes": {"nvidia": {"path": "/old", "args": ["--x"], "y": 1}}},
                           "nvidia", WRAPPER, set_default=False, where="d")
    assert doc["runtimes"]["nvidia"] == {"path": WRAPPER, "args": ["--x"], "y": 1}


def test_remove_docker_crio_and_hooks_file(tmp_path: Path) -> None:
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"data-root": "/d", "runtimes": {"other": {"path": "/x"}}}')
    before = daemon.read_text()
    args = ("--runtime=docker", f"--config={daemon}", f"--runtime-path={WRAPPER}")
    assert configure(*args, "--set-as-default").returncode == 0
    proc = configure(*args, "--remove")
    assert proc.returncode == 0 and "restart docker to apply it" in proc.stdout, proc.stderr
    assert json.loads(daemon.read_text()) == json.loads(before)
    assert "has no such runtime" in configure(*args, "--remove").stdout

    drop = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    crio_args = ("--runtime=crio", f"--config={tmp_path}/crio.conf", f"--drop-in={drop}",
                 f"--runtime-path={WRAPPER}")
    assert configure(*crio_args, "--set-as-default").returncode == 0
    assert configure(*crio_args, "--remove").returncode == 0 and not drop.exists()

    hook = tmp_path / "hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    hooks = ("--runtime=podman", f"--hooks-dir={tmp_path}/hooks.d", f"--hook-path={hook}")
    assert configure(*hooks).returncode == 0
    assert configure(*hooks, "--remove").returncode == 0
    assert not (tmp_path / "hooks.d" / "oci-nvidia-hook.json").exists()
    assert "does not exist" in configure(*hooks, "--remove").stdout


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_nvidia_ctk_from_an_install_prefix_finds_its_sibling(tmp_path: Path, how: str) -> None:
    """Issue 27 class 7: `nvhook install --prefix DIR` fills DIR with nvidia-ctk and
    nvidia-container-runtime; DIR's nvidia-ctk configures Docker with DIR's runtime although
    DIR is not on PATH (it was "not installed on PATH")."""
    from nvhook.dev.demo.driver import launcher_python

    prefix = tmp_path / "prefix"
    proc = subprocess.run([sys.executable, "-m", "nvhook", "install", "--prefix", str(prefix),
                           "--python", launcher_python()], capture_output=True, text=True,
                          timeout=120, check=False, env={"PATH": "/usr/bin:/bin",
                                                         "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    daemon = tmp_path / "daemon.json"
    program = str(prefix / "nvidia-ctk") if how == "absolute" else "prefix/nvidia-ctk"
    proc = subprocess.run([program, "runtime", "configure", "--runtime=docker",
                           f"--config={daemon}"], capture_output=True, text=True, timeout=120,
                          check=False, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    path = json.loads(daemon.read_text())["runtimes"]["nvidia"]["path"]
    assert path == str(prefix / "nvidia-container-runtime")
