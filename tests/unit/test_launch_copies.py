"""The facts the sh launcher keeps a copy of have one home each; what the sh spells itself is
checked here against it.

- the config lookup: `nvhook_config_file` (runtime.sh) finds the file
  `nvhook.launch.settings.find_config_path` finds, in the order of
  `nvhook.config.basics.candidates`, for every combination of its inputs;
- the runtimes default and the needles come from their homes into the header
  (`runtime_sh.values`), the create/run flag lists from `runtime_flags` (test_runtime_grammar);
- the runtimes default is defined once (config/basics.py) and documented;
- the constants launch/ keeps beside their originals (cache dir and format, document bound)
  equal them.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvhook.config import basics
from nvhook.config.load import gate_facts
from nvhook.config.model import RuntimeConfig, config_from_document
from nvhook.config.toml_read import loads as toml_loads
from nvhook.hook import request_env
from nvhook.hook.oci import load_spec
from nvhook.hook.request import derive_request
from nvhook.launch import runtime_sh, screen, shfile
from nvhook.launch import settings as settings_mod
from nvhook.launch.settings import Settings, find_config_path, load_settings
from nvhook.runtime.create import may_want_gpus

REPO = Path(__file__).resolve().parent.parent.parent


def sh_lookup(values: dict[str, str], env: dict[str, str]) -> str:
    text = shfile.render("runtime.sh", "# m", values)
    functions = text[:text.index("\nnvhook_parse \"$@\"\n")]
    proc = subprocess.run(["/bin/sh", "-c", functions + '\nnvhook_config_file\n'
                           'printf %s "$nvhook_cfg"'], capture_output=True, text=True,
                          env=env, timeout=30, check=True)
    return proc.stdout


@pytest.mark.parametrize(("named", "recorded", "xdg", "default"),
                         list(itertools.product((False, True), repeat=4)))
def test_the_launcher_finds_the_config_the_wrapper_finds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: bool, recorded: bool,
        xdg: bool, default: bool) -> None:
    etc = tmp_path / "etc.toml"
    if default:
        etc.write_text("")
    home = tmp_path / "xdg"
    if xdg:
        (home / "nvidia-container-runtime").mkdir(parents=True)
        (home / basics.XDG_RELATIVE).write_text("")
    env = {"PATH": "/usr/bin:/bin", basics.XDG_ENV: str(home)}
    if named:
        env[basics.CONFIG_PATH_ENV] = str(tmp_path / "named.toml")
    record = str(tmp_path / "recorded.toml") if recorded else None
    values = {**runtime_sh.values("/usr/bin/python3", ["/x"], version="0", config=record),
              "nvhook_default_config": str(etc)}
    monkeypatch.setattr(basics, "DEFAULT_CONFIG_PATH", str(etc))
    monkeypatch.setattr(settings_mod, "config_candidates",
                        lambda environ, recorded=None: basics.candidates(
                            environ, recorded=recorded, default=str(etc)))
    want = find_config_path(env, record)[0] or ""
    assert sh_lookup(values, env) == want


def test_the_header_takes_the_defaults_from_their_homes() -> None:
    values = runtime_sh.values("/usr/bin/python3", ["/x"], version="0")
    assert values["nvhook_runtimes"].split("\n") == list(basics.DEFAULT_RUNTIMES)
    assert values["nvhook_needles"].split("\n") == list(Settings().needles())
    assert values["nvhook_default_config"] == basics.DEFAULT_CONFIG_PATH
    text = shfile.source("runtime.sh")
    for name in (basics.CONFIG_PATH_ENV, basics.XDG_ENV):  # the two names the sh spells
        assert f"${{{name}-}}" in text


def test_one_runtimes_default() -> None:
    assert RuntimeConfig().runtimes == Settings().runtimes == basics.DEFAULT_RUNTIMES
    listed = ", ".join(f'"{r}"' for r in basics.DEFAULT_RUNTIMES)
    assert f"runtimes = [{listed}]" in (REPO / "docs/configuration.md").read_text()


# -- the GPU screen: one table (nvhook.hook.request_env), every screen drawn from it -----------
def gpu_specs() -> list[tuple[str, dict[str, Any], str]]:
    """(label, config.json, config.toml) for each way the table says a container asks."""
    base: dict[str, Any] = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                            "process": {"args": ["x"], "env": ["PATH=/bin"]}}

    def env(*entries: str) -> dict[str, Any]:
        return {**base, "process": {"args": ["x"], "env": ["PATH=/bin", *entries]}}

    mount = {**base, "mounts": [{"source": "/dev/null", "type": "bind",
                                 "destination": f"{request_env.DEVICE_LIST_ROOT}/all"}]}
    return [
        ("visible", env(f"{request_env.VISIBLE_DEVICES}=all"), ""),
        ("legacy cuda", env(f"{request_env.CUDA_VERSION}=12.4"), ""),
        ("swarm", env("DOCKER_RESOURCE_GPU=0"), 'swarm-resource = "DOCKER_RESOURCE_GPU"\n'),
        ("volume mounts", mount, "accept-nvidia-visible-devices-as-volume-mounts = true\n"),
    ]


@pytest.mark.parametrize("case", gpu_specs(), ids=lambda c: c[0])
def test_no_screen_declines_what_the_request_takes(tmp_path: Path, case: tuple[
        str, dict[str, Any], str]) -> None:
    _, spec, toml = case
    config = config_from_document(toml_loads(toml), None)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(spec))
    assert derive_request(load_spec(str(bundle)), config) is not None  # the request's answer
    data = json.dumps({"pid": 1, "bundle": str(bundle)}).encode()
    assert not screen.declines(data, gate_facts(config)[:2])  # the hook's screen
    toml_path = tmp_path / "config.toml"
    toml_path.write_text(toml)
    wrapper = load_settings({}, str(toml_path))
    assert may_want_gpus((bundle / "config.json").read_bytes(), wrapper)  # the wrapper's
    needles = [n.encode() for n in wrapper.needles()]  # the launcher's grep -F patterns
    assert any(n in (bundle / "config.json").read_bytes() for n in needles)


# -- constants launch/ keeps beside their originals (the hot path imports neither nvmount nor
# the hook's modules): one table, one test ---------------------------------------------------
def test_copies_kept_in_launch_match_their_originals() -> None:
    from nvhook.config import load
    from nvhook.hook import oci
    from nvhook.launch import facts, hook_records
    from nvmount import cachefile

    copies = [  # (copy, original)
        (screen.CACHE, (cachefile.DEFAULT_DIR, load._CACHE_NAME)),
        (screen.CACHE_FORMAT, cachefile.FORMAT),
        (screen.MAX_DOCUMENT, oci.MAX_DOCUMENT_BYTES),
        (facts.FACTS_DIR, cachefile.DEFAULT_DIR),
        (hook_records.RECORD_PARENT, cachefile.DEFAULT_DIR),
    ]
    for copy, original in copies:
        assert copy == original
