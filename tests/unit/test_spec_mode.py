"""Spec mode: one plan, two deliveries (nvmount.plan.split, nvhook.runtime.spec_entries/edit,
nvhook.hook.spec_mode), and the wrapper's cheap GPU test against the hook's decision.

The round trip: the wrapper's spec entries, written into a config.json and read back the way
the hook reads it, leave the hook exactly the part a runtime cannot do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvhook.config.model import config_from_document
from nvhook.dev.sim import SimRoot
from nvhook.errors import NvhookError, WrapperError
from nvhook.hook.oci import parse_spec
from nvhook.hook.request import derive_request
from nvhook.hook.spec_mode import delivered_by_spec
from nvhook.launch.settings import settings_from_document
from nvhook.runtime.bundle import BundleFile, decode_document
from nvhook.runtime.create import may_want_gpus
from nvhook.runtime.edit import add_devices, add_mounts, add_prestart_hook, hook_entry
from nvhook.runtime.spec_entries import device_nodes, spec_entries
from nvmount._libc import Libc
from nvmount.capabilities import DriverCapability as C
from nvmount.fs.paths import SourceKind
from nvmount.pipeline import plan_only
from nvmount.plan.split import RUNTIME_MOUNTS, Delivered, hook_share
from nvmount.plan.types import Bind, MountPlan, Symlink, Tmpfs, WriteFile
from nvmount.requests import EngineOptions, EngineRequest
from tests.fixtures.containers import RootfsCache


@pytest.fixture(scope="module")
def plan(sim_root: SimRoot, rootfs_cache: RootfsCache) -> MountPlan:
    options = EngineOptions(root=sim_root.path, proc_root=sim_root.proc_root)
    request = EngineRequest(devices=("1", "3"), capabilities=C.UTILITY | C.COMPUTE)
    made = plan_only(request, str(rootfs_cache.get()), options, Libc())
    assert made is not None
    return made


def _doc() -> dict[str, object]:
    return {"ociVersion": "1.0.2", "process": {"env": []}, "root": {"path": "rootfs"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}}}


def test_round_trip_leaves_the_hook_only_what_a_runtime_cannot_do(plan: MountPlan) -> None:
    doc = _doc()
    entries = spec_entries(plan, {n.source: 0o20666 for n in device_nodes(plan)})
    add_devices(doc, entries.devices, entries.rules)
    add_mounts(doc, entries.mounts)
    spec = parse_spec("/b/config.json", json.dumps(doc).encode())
    share = hook_share(plan, delivered_by_spec(spec))
    assert share.device_rules == ()
    assert not [e for e in share.entries if isinstance(e, Bind)
                and (e.what in RUNTIME_MOUNTS or e.kind == SourceKind.DEVICE)]
    kept = {type(e) for e in share.entries}
    assert {Tmpfs, WriteFile, Symlink} <= kept  # procfs view, its files, the links
    assert share.ldconfig_dirs == plan.ldconfig_dirs and share.gpus == plan.gpus
    assert [d["path"] for d in doc["linux"]["devices"]][-2:] == ["/dev/nvidia1", "/dev/nvidia3"]
    assert {"allow": True, "type": "c", "major": 195, "minor": 3, "access": "rw"} in \
        doc["linux"]["resources"]["devices"]
    assert doc["linux"]["devices"][0]["fileMode"] == 0o666


def test_an_unedited_spec_leaves_the_plan_whole(plan: MountPlan) -> None:
    spec = parse_spec("/b/config.json", json.dumps(_doc()).encode())
    assert hook_share(plan, delivered_by_spec(spec)) is plan
    assert hook_share(plan, None) is plan


def test_no_devbind_drops_device_nodes_only(plan: MountPlan) -> None:
    share = hook_share(plan, Delivered(all_devices=True))
    assert not [e for e in share.entries if isinstance(e, Bind) and e.kind == SourceKind.DEVICE]
    assert share.device_rules == plan.device_rules


RULES = [
    ([{"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rw"}], {(195, 0)}),
    ([{"allow": True, "type": "c", "major": 195, "minor": 0, "access": "r"}], set()),
    ([{"allow": True, "type": "c", "major": 195, "access": "rwm"}], set()),  # wildcard
    ([{"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"},
      {"allow": False, "type": "c", "major": 195, "access": "rw"}], set()),
    ([{"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"},
      {"allow": False, "type": "c", "major": 195, "minor": 1}], {(195, 0)}),
    ([{"allow": True, "type": "b", "major": 195, "minor": 0, "access": "rw"}], set()),
    ([{"allow": "yes", "type": "c", "major": 195, "minor": 0}, "junk", None], set()),
]


@pytest.mark.parametrize(("rules", "want"), RULES,
                         ids=["exact", "read-only", "wildcard", "later-deny", "other-deny",
                              "block", "malformed"])
def test_delivered_rules(rules: list[object], want: set[tuple[int, int]]) -> None:
    doc = {**_doc(), "linux": {"resources": {"devices": rules},
                               "devices": [{"path": "/dev/x", "type": "c", "major": 1,
                                            "minor": True}, "junk"]}}
    delivered = delivered_by_spec(parse_spec("/c", json.dumps(doc).encode()))
    assert delivered.rules == want
    assert delivered.devices == frozenset()  # a bool is not a minor


def test_edits_are_idempotent_and_refuse_conflicts(plan: MountPlan) -> None:
    doc = _doc()
    entries = spec_entries(plan, {})
    assert add_devices(doc, entries.devices, entries.rules) != (0, 0)
    assert add_devices(doc, entries.devices, entries.rules) == (0, 0)
    assert add_mounts(doc, entries.mounts) == len(entries.mounts)
    assert add_mounts(doc, entries.mounts) == 0
    other = [{**entries.devices[0], "minor": 99}]
    with pytest.raises(WrapperError, match=r"linux\.devices already has /dev/nvidiactl"):
        add_devices(doc, other, [])


def test_prestart_hook_added_once_and_nvidia_hooks_kept() -> None:
    doc: dict[str, object] = {"hooks": {"prestart": [{"path": "/x/other"}]}}
    entry = hook_entry("/opt/bin/nvidia-container-runtime-hook", "/etc/c.toml")
    assert add_prestart_hook(doc, entry) and not add_prestart_hook(doc, entry)
    assert doc["hooks"]["prestart"][-1]["env"][-1] == "NVIDIA_CTK_CONFIG_FILE_PATH=/etc/c.toml"
    nvidia: dict[str, object] = {"hooks": {"prestart": [
        {"path": "/usr/bin/nvidia-container-toolkit", "args": ["x", "prestart"]}]}}
    assert not add_prestart_hook(nvidia, entry)
    with pytest.raises(WrapperError, match="spell it 'hooks'"):
        add_prestart_hook({"Hooks": {}}, entry)
    with pytest.raises(WrapperError, match=r"hooks\.prestart is not a JSON array"):
        add_prestart_hook({"hooks": {"prestart": {}}}, entry)
    with pytest.raises(WrapperError, match="not absolute"):
        hook_entry("nvidia-container-runtime-hook", None)


@pytest.mark.parametrize(("data", "message"), [
    (b'{"a": 1, "a": 2}', "duplicate key 'a'"),
    (b'{"a": NaN}', "invalid JSON value NaN"),
    (b'{"a": 1e999}', "out of range"),
    (b'[1]', "not a JSON object"),
    (b'\xff', "codec"),
], ids=["duplicate", "nan", "inf", "array", "utf8"])
def test_config_json_is_decoded_strictly(data: bytes, message: str) -> None:
    bundle = BundleFile("/b/config.json", -1, data, 0o644, 0, 0)
    with pytest.raises(WrapperError, match=message):
        decode_document(bundle)


# -- the cheap GPU test never says "no" where the hook says "GPU" ---------------------------
_NAMES = ["NVIDIA_VISIBLE_DEVICES", "CUDA_VERSION", "NVIDIA_REQUIRE_CUDA", "SWARM_GPU",
          "NVIDIA_DRIVER_CAPABILITIES", "FOO", "NVIDIA_VISIBLE_DEVICE\\u0053"]
_VALUES = ["", "all", "0", "none", "void", "12.4", "cuda>=12.0", "x"]
_CONFIGS = [{}, {"swarm-resource": "SWARM_GPU"},
            {"accept-nvidia-visible-devices-as-volume-mounts": True}]


@settings(max_examples=400, deadline=None)
@given(env=st.lists(st.tuples(st.sampled_from(_NAMES), st.sampled_from(_VALUES)), max_size=4),
       mount=st.sampled_from(["", "/var/run/nvidia-container-devices/0", "/x/../var/run/"
                              "nvidia-container-devices/all", "/var/run/other"]),
       config=st.sampled_from(_CONFIGS))
def test_cheap_gpu_test_is_conservative(env: list[tuple[str, str]], mount: str,
                                        config: dict[str, object]) -> None:
    entries = ",".join(f'"{n}={v}"' for n, v in env)
    mounts = f'[{{"source": "/dev/null", "destination": "{mount}"}}]' if mount else "[]"
    data = (f'{{"ociVersion": "1.0.2", "process": {{"env": [{entries}]}}, '
            f'"root": {{"path": "r"}}, "mounts": {mounts}}}').encode()
    try:
        wants = derive_request(parse_spec("/c", data), config_from_document(config, None))
    except NvhookError:
        wants = None  # errors are only reported for GPU containers (a documented deviation)
    if wants is not None:
        assert may_want_gpus(data, settings_from_document(config, None))


def test_cheap_gpu_test_examples(tmp_path: Path) -> None:
    plain = settings_from_document({}, None)
    assert not may_want_gpus(b'{"process": {"env": ["PATH=/bin"]}}', plain)
    assert may_want_gpus(b'{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}', plain)
    assert may_want_gpus(b'{"process": {"env": ["\\u004eVIDIA_VISIBLE_DEVICES=0"]}}', plain)
