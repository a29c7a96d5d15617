"""nvhook.launch.screen: the launcher's quick "no GPU wanted" answer. It may defer anything to the
hook, but whatever it declines, the hook itself must find to be no GPU container and no error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvhook.config.load import gate_facts
from nvhook.config.model import HookConfig, config_from_document
from nvhook.errors import NvhookError
from nvhook.hook.oci import load_spec, load_state
from nvhook.hook.request import derive_request
from nvhook.launch import screen as gate

BASE: dict[str, Any] = {"ociVersion": "1.0.2", "process": {"env": ["PATH=/bin"], "args": ["x"]},
                        "root": {"path": "rootfs"}}


def decide(bundle: Path, spec: Any, config: HookConfig, state: Any = None) -> bool:
    (bundle / "config.json").write_text(json.dumps(spec))
    data = json.dumps(state if state is not None else {"pid": 1, "bundle": str(bundle)})
    return gate.declines(data.encode(), gate_facts(config)[:2])


def hook_says_no_gpu(bundle: Path, config: HookConfig, state: Any = None) -> bool:
    data = json.dumps(state if state is not None else {"pid": 1, "bundle": str(bundle)})
    try:
        state_rec = load_state(data.encode())
        return derive_request(load_spec(state_rec.bundle), config) is None
    except NvhookError:
        return False


@pytest.mark.parametrize("change, declined", [
    (lambda s: None, True),
    (lambda s: s["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=all"), False),
    (lambda s: s["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=void"), False),
    (lambda s: s["process"]["env"].append("CUDA_VERSION=12.4"), False),
    (lambda s: s["process"]["env"].append("CUDA_VERSION="), True),
    (lambda s: s["process"]["env"].append("NOEQUALS"), False),
    (lambda s: s["process"].update(Env=["NVIDIA_VISIBLE_DEVICES=0"]), False),
    (lambda s: s.update(Process=s["process"]), False),
    (lambda s: s.pop("root"), False),
    (lambda s: s.update(ociVersion=None), False),
    (lambda s: s["process"].update(capabilities={"bounding": ["CAP_SYS_ADMIN"]}), True),
    (lambda s: (s.update(ociVersion="1.0.2-dev"), s["process"].update(capabilities={})), True),
    (lambda s: s["process"].update(capabilities={"bounding": "CAP_SYS_ADMIN"}), False),
    (lambda s: s["process"].update(capabilities=["CAP_SYS_ADMIN"]), False),
    (lambda s: (s.update(ociVersion="1.0.0-rc2"), s["process"].update(capabilities=[])), False),
    (lambda s: s.update(mounts=[{"source": "/dev/null",
                                 "destination": "/var/run/nvidia-container-devices/0"}]), True),
], ids=["plain", "nvd", "nvd-void", "legacy-cuda", "empty-cuda", "bad-env", "key-case",
        "top-key-case", "no-root", "null-version", "caps", "runc-dev-version",
        "caps-wrong-type", "caps-as-list",
        "old-format", "volume-mount-not-accepted"])
def test_decisions(tmp_path: Path, change: Any, declined: bool) -> None:
    spec = json.loads(json.dumps(BASE))
    change(spec)
    config = config_from_document({}, None)
    assert decide(tmp_path, spec, config) is declined
    if declined:
        assert hook_says_no_gpu(tmp_path, config)


def test_volume_mounts_and_swarm_variables_from_the_config(tmp_path: Path) -> None:
    config = config_from_document({"accept-nvidia-visible-devices-as-volume-mounts": True,
                                   "swarm-resource": "DOCKER_RESOURCE_GPU"}, "/c.toml")
    spec = json.loads(json.dumps(BASE))
    spec["mounts"] = [{"source": "/dev/null",
                       "destination": "/var/run/nvidia-container-devices/0"}]
    assert not decide(tmp_path, spec, config)
    spec = json.loads(json.dumps(BASE))
    spec["process"]["env"].append("DOCKER_RESOURCE_GPU=")
    assert not decide(tmp_path, spec, config)


@pytest.mark.parametrize("state", [{"pid": -1, "bundle": "B"}, {"pid": True, "bundle": "B"},
                                   {"pid": 1, "bundle": "relative"}, {"pid": 1, "Bundle": "B"},
                                   {"pid": 1, "bundle": "B/../B"}],
                         ids=["negative-pid", "bool-pid", "relative", "key-case", "unclean"])
def test_unusual_states_are_deferred(tmp_path: Path, state: dict[str, Any]) -> None:
    state = {k: (str(tmp_path) if v == "B" else v.replace("B", str(tmp_path))
                 if isinstance(v, str) else v) for k, v in state.items()}
    assert not decide(tmp_path, BASE, config_from_document({}, None), state)


def test_argv_forms() -> None:
    assert gate.config_path(["prestart"]) == (True, None)
    assert gate.config_path(["--config", "/c", "prestart"]) == (True, "/c")
    assert gate.config_path(["-config=/c", "prestart"]) == (True, "/c")
    assert gate.config_path(["--debug", "prestart"])[0] is False
    assert gate.config_path(["prestart", "--dry-run"])[0] is False


json_values = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)
env_entries = st.lists(st.sampled_from(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0", "CUDA_VERSION=9",
                                        "CUDA_VERSION=", "NVIDIA_REQUIRE_CUDA=cuda>=9", "X",
                                        "NVIDIA_DRIVER_CAPABILITIES=all", "SWARM=1"])
                       | st.text(max_size=10), max_size=5)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(version=st.sampled_from(["1.0.2", "1.0.2-dev", "1.0.0-rc3", "1.0.0-rc10", "", "x"])
       | st.none(),
       env=env_entries | json_values,
       caps=st.none() | json_values | st.fixed_dictionaries({"bounding": json_values}),
       mounts=st.none() | json_values, extra=st.dictionaries(
           st.sampled_from(["Process", "root", "Mounts", "linux"]), json_values, max_size=2))
def test_what_the_gate_declines_the_hook_declines(tmp_path: Path, version: Any, env: Any,
                                                 caps: Any, mounts: Any,
                                                 extra: dict[str, Any]) -> None:
    spec: dict[str, Any] = {"ociVersion": version, "process": {"env": env, "capabilities": caps},
                            "root": {"path": "rootfs"}, "mounts": mounts, **extra}
    for config in (config_from_document({}, None), config_from_document(
            {"accept-nvidia-visible-devices-as-volume-mounts": True, "swarm-resource": "SWARM",
             "accept-nvidia-visible-devices-envvar-when-unprivileged": False}, "/c.toml")):
        if decide(tmp_path, spec, config):
            assert hook_says_no_gpu(tmp_path, config), spec
