"""`nvhook config check` / `config default`, unknown-key warnings, and the driver-container
root detection (`[nvhook] driver-container-root`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nvhook.config.check import check_document
from nvhook.config.default import default_text
from nvhook.config.model import config_from_document, is_driver_root, unknown_keys
from tests._compat import tomllib
from tests.unit.test_cli import NVHOOK


def _levels(findings: list[tuple[str, str, str]]) -> dict[str, str]:
    return {key: level for level, key, _ in findings}


def test_default_file_is_the_built_in_defaults() -> None:
    document = tomllib.loads(default_text())
    loaded = config_from_document(document, "/etc/x.toml")
    builtin = config_from_document({}, None)
    for group in ("cli", "runtime", "runtime_hook", "ctk", "features", "nvhook"):
        assert getattr(loaded, group) == getattr(builtin, group), group
    assert loaded.supported_driver_capabilities == builtin.supported_driver_capabilities
    assert check_document(document, "/etc/x.toml") == []


def test_default_file_names_every_key() -> None:
    """Every key nvhook reads is in the default file, active or as a commented example (but
    the test-only ones)."""
    from nvhook.config.model import known_keys

    text = default_text()
    for key in known_keys():
        if key in ("nvhook.sim-procfs", "nvhook.test-faults"):
            continue
        assert key.rsplit(".", 1)[-1] + " = " in text, key


def test_unknown_keys_named_with_the_nearest_known_key() -> None:
    document = {"nvidia-container-cli": {"lod-kmods": False, "root": "/"},
                "load-kmods": True, "nvidia-container-clii": {"root": "/"},
                "nvhook": {"ldcahce": "write"}, "zzz": 1}
    findings = {key: message for _, key, message in check_document(document, "p")}
    assert "did you mean nvidia-container-cli.load-kmods?" in findings[
        "nvidia-container-cli.lod-kmods"]
    assert "did you mean nvidia-container-cli.load-kmods?" in findings["load-kmods"]
    assert "did you mean nvidia-container-cli?" in findings["nvidia-container-clii"]
    assert "did you mean nvhook.ldcache?" in findings["nvhook.ldcahce"]
    assert findings["zzz"] == "unknown key zzz: ignored"
    assert set(unknown_keys(document)) == set(findings)


def test_every_wrong_type_and_choice_is_an_error() -> None:
    document = {"nvidia-container-cli": {"root": 5, "load-kmods": "yes"},
                "nvidia-container-runtime": {"mode": "fast", "runtimes": "runc"},
                "nvhook": {"ldcache": "x", "proc-root": "proc"},
                "supported-driver-capabilities": "compute,gaming"}
    levels = _levels(check_document(document, "p"))
    assert levels == dict.fromkeys(
        ("nvidia-container-cli.root", "nvidia-container-cli.load-kmods",
         "nvidia-container-runtime.mode", "nvidia-container-runtime.runtimes",
         "nvhook.ldcache", "nvhook.proc-root", "supported-driver-capabilities"), "error")


def test_a_scalar_where_a_table_belongs_is_an_error() -> None:
    levels = _levels(check_document({"nvidia-container-cli": "x"}, "p"))
    assert levels["nvidia-container-cli.root"] == "error"


def test_keys_read_but_unused_are_notes_unless_default() -> None:
    document = {"nvidia-container-cli": {"no-pivot": True, "environment": [],
                                         "path": "/usr/bin/nvidia-container-cli"},
                "nvidia-ctk": {"path": "nvidia-ctk"}}
    findings = check_document(document, "p")
    assert _levels(findings) == {"nvidia-container-cli.no-pivot": "note",
                                 "nvidia-container-cli.path": "note"}
    assert all("read but unused" in m for _, _, m in findings)


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(tmp_path / "none")}
    return subprocess.run([*NVHOOK, *args], capture_output=True, text=True, env=env,
                          check=False, timeout=60)


def test_cli_check_exit_codes_and_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[nvidia-container-cli]\nlod-kmods = false\nroot = 5\n')
    proc = _run(["config", "check", "--config", str(bad)], tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "error: nvidia-container-cli.root = 5 is an integer, expected a string" in proc.stdout
    assert "did you mean nvidia-container-cli.load-kmods?" in proc.stdout
    doc = json.loads(_run(["config", "check", "--json", "--config", str(bad)], tmp_path).stdout)
    assert [f["level"] for f in doc["findings"]] == ["error", "warning"]
    good = tmp_path / "good.toml"
    good.write_text(_run(["config", "default"], tmp_path).stdout)
    proc = _run(["--config", str(good), "config", "check"], tmp_path)
    assert proc.returncode == 0 and "ok: no problems found" in proc.stdout


def test_cli_check_broken_toml(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[nvidia-container-cli\n")
    proc = _run(["config", "check", "--config", str(broken)], tmp_path)
    assert proc.returncode == 1
    assert "error: couldn't parse configuration file" in proc.stdout


def test_hook_warns_about_unknown_keys_with_debug(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[nvidia-container-cli]\nlod-kmods = false\n')
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps(
        {"ociVersion": "1.0.2", "process": {"env": ["PATH=/bin"]}, "root": {"path": "rootfs"}}))
    state = json.dumps({"ociVersion": "1.0.2", "id": "x", "pid": 1, "bundle": str(bundle)})
    for debug, expected in ((["--debug"], True), ([], False)):
        proc = subprocess.run([*NVHOOK, "--config", str(config), *debug, "prestart"],
                              input=state, capture_output=True, text=True, check=False,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert ("unknown keys ignored: nvidia-container-cli.lod-kmods" in proc.stderr) is (
            expected)


def test_driver_container_root_detected(tmp_path: Path) -> None:
    driver = tmp_path / "run-nvidia-driver"
    key = {"nvhook": {"driver-container-root": str(driver)}}
    config = config_from_document(key, "p")
    assert (config.cli.root, config.cli.root_origin) == ("", "")  # not there: /
    (driver / "usr/bin").mkdir(parents=True)
    assert not is_driver_root(str(driver))  # an empty mount point is not a driver
    (driver / "usr/bin/nvidia-smi").write_text("")
    config = config_from_document(key, "p")
    assert (config.cli.root, config.cli.root_origin) == (str(driver), "detected")
    named = config_from_document({**key, "nvidia-container-cli": {"root": "/x"}}, "p")
    assert (named.cli.root, named.cli.root_origin) == ("/x", "config")
    off = config_from_document({"nvhook": {"driver-container-root": ""}}, "p")
    assert off.cli.root == ""


def test_info_says_which_root(sim_root: object, tmp_path: Path) -> None:
    config_path = sim_root.config_path  # type: ignore[attr-defined]
    proc = subprocess.run([*NVHOOK, "--config", config_path, "info", "--json"],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    root = json.loads(proc.stdout)["driver_root"]
    assert root == {"path": sim_root.path,  # type: ignore[attr-defined]
                    "from": "nvidia-container-cli.root"}
    assert sys.version_info >= (3, 9)
