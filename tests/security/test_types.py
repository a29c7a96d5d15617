"""Issue 19 class 4: type confusion is never an internal error. Property tests (hypothesis) feed
every reader documents whose fields have another JSON type than the schema's - an object where
an array belongs (`linux.devices: {}`), a list for an object (`hooks: []`), a string as a mount
entry, null, numbers, huge strings and arrays - and assert that each reader returns or raises the
package's one-line error (NvhookError, NvmountError), bounded in time:

- the OCI state (`nvhook.hook.oci.load_state`) and the gate's decision on it;
- config.json as the hook reads it (`parse_spec`, `derive_request`, `delivered_by_spec`,
  `engine_request`);
- config.json as the runtime wrapper edits it (`gpu_document`: the legacy hook entry, and the
  CDI path that resolves `nvidia.com/gpu=0` from a spec dir);
- config.toml (`config_from_document`, `check_document`, the wrapper's `settings_from_document`),
  key by key and table by table;
- the cache files (the config cache through `load_config`, the inventory cache through
  `cached_inventory` and `lookup`): a value of another shape is a miss. (The gate reads the
  config cache too; it hands anything unusual to the hook.)

CDI spec documents are read by nvhook.cdi (engineer "cdi" replaces that reader). CI runs
`CI_EXAMPLES` per target, NVHOOK_LONG=1 `LONG_EXAMPLES`.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.conftest import LONG
from tests.security.test_fuzz import bounded, survive

CI_EXAMPLES = 100
LONG_EXAMPLES = 3000
TYPES = settings(max_examples=LONG_EXAMPLES if LONG else CI_EXAMPLES, deadline=None,
                 database=None, suppress_health_check=list(HealthCheck))

# Values of every JSON kind, and oversized ones (the 4 MiB document bound still holds).
confused = st.sampled_from([None, True, False, 0, -1, 2**63, 1.5, "", "s", [], [None], [1],
                            [[]], [{}], ["x"], {}, {"a": 1}, {"path": 1}]) | st.sampled_from(
    ["x" * 100_000, list(range(5_000)), [{}] * 5_000, {str(i): i for i in range(5_000)}])

SPEC: dict[str, Any] = {
    "ociVersion": "1.0.2",
    "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute"],
                "capabilities": {"bounding": ["CAP_SYS_ADMIN"], "effective": ["CAP_SYS_ADMIN"]}},
    "root": {"path": "rootfs"},
    "mounts": [{"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/0",
                "type": "bind", "options": ["ro"]}],
    "linux": {"devices": [{"path": "/dev/x", "type": "c", "major": 1, "minor": 2}],
              "resources": {"devices": [{"allow": True, "type": "c", "major": 195, "minor": 0,
                                         "access": "rw"}]}},
    "hooks": {"prestart": [{"path": "/bin/true", "args": ["true"]}]},
    "annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=0"},
}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


SPEC_PATHS = list(_paths(SPEC))


def confuse(doc: Any, changes: list[tuple[tuple[Any, ...], Any]]) -> Any:
    """`doc` with the value at each path replaced (a path made stale by an earlier change is
    skipped)."""
    doc = copy.deepcopy(doc)
    for path, shared in changes:
        value = copy.deepcopy(shared)  # the strategy's values are shared between examples
        if not path:
            doc = value
            continue
        node = doc
        for part in path[:-1]:
            if not _has(node, part):
                break
            node = node[part]
        else:
            if _has(node, path[-1]) or isinstance(node, dict):
                node[path[-1]] = value
    return doc


def _has(node: Any, part: Any) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and part < len(node)


def changes_of(paths: list[tuple[Any, ...]]) -> st.SearchStrategy[list[tuple[tuple[Any, ...],
                                                                          Any]]]:
    return st.lists(st.tuples(st.sampled_from(paths), confused), min_size=1, max_size=3)


# ---- the state and config.json as the hook reads them ------------------------------------------

def test_the_state_and_the_hooks_spec_readers() -> None:
    from nvhook.config.model import config_from_document
    from nvhook.hook.mount import engine_request
    from nvhook.hook.oci import load_state, parse_spec
    from nvhook.hook.request import derive_request
    from nvhook.hook.spec_mode import delivered_by_spec
    from nvhook.launch import screen as gate

    configs = [config_from_document({}, None), config_from_document(
        {"accept-nvidia-visible-devices-envvar-when-unprivileged": False,
         "accept-nvidia-visible-devices-as-volume-mounts": True}, "/x.toml")]
    state = {"ociVersion": "1.0.2", "pid": 1, "bundle": "/nonexistent/bundle"}

    def hook(data: bytes) -> None:
        spec = parse_spec("/b/config.json", data)
        delivered_by_spec(spec)
        for config in configs:
            request = derive_request(spec, config)
            if request is not None:
                engine_request(request)

    @TYPES
    @given(changes_of(SPEC_PATHS), changes_of(list(_paths(state))))
    def run(spec_changes: list[Any], state_changes: list[Any]) -> None:
        data = json.dumps(confuse(SPEC, spec_changes)).encode()
        survive("types-spec", lambda: hook(data))
        raw = json.dumps(confuse(state, state_changes)).encode()
        survive("types-state", lambda: load_state(raw))
        with bounded():
            assert gate.declines(raw, ((), True)) in (True, False)
    run()


# ---- config.json as the runtime wrapper edits it -----------------------------------------------

@pytest.fixture
def wrapper_rig(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(config with a CDI spec dir, config without, the wrapper's own dir with a hook)."""
    specs = tmp_path / "cdi"
    specs.mkdir()
    (specs / "nvidia.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "containerEdits": {"env": ["A=1"], "hooks": [
            {"hookName": "createRuntime", "path": "/bin/true"}],
            "mounts": [{"hostPath": "/dev/null", "containerPath": "/x", "options": ["ro"]}]},
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [
            {"path": "/dev/null", "major": 1, "minor": 3}]}}]}))
    nodriver = tmp_path / "nodriver"
    (nodriver / "proc").mkdir(parents=True)
    base = f'[nvidia-container-cli]\nroot = "{nodriver}"\n'
    cdi = tmp_path / "cdi.toml"
    cdi.write_text(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{specs}"]\n{base}')
    legacy = tmp_path / "legacy.toml"
    legacy.write_text(base)
    own = tmp_path / "bin"
    own.mkdir()
    (own / "nvidia-container-runtime-hook").write_text("#!/bin/sh\n")
    (own / "nvidia-container-runtime-hook").chmod(0o755)
    return cdi, legacy, own


def test_the_runtime_wrappers_spec_reader(wrapper_rig: tuple[Path, Path, Path],
                                          tmp_path: Path) -> None:
    """Before: `linux.devices` an object, `hooks` a list, a mount entry a string, `process.env`
    null ... on the CDI path died with `internal error: AttributeError` (or TypeError)."""
    from nvhook.launch.runtime_log import RuntimeLog
    from nvhook.launch.settings import Settings
    from nvhook.runtime.bundle import BundleFile
    from nvhook.runtime.create import gpu_document

    cdi, legacy, own = wrapper_rig
    env = [["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], ["NVIDIA_VISIBLE_DEVICES=0"]]

    def wrap(doc: Any, config: Path) -> None:
        bundle = BundleFile(str(tmp_path / "config.json"), -1, json.dumps(doc).encode(),
                            0o644, 0, 0)
        gpu_document(bundle, str(tmp_path), Settings(str(config)), RuntimeLog(),
                     {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}, str(own))

    @TYPES
    @given(changes_of(SPEC_PATHS), st.sampled_from([0, 1]))
    def run(changes: list[Any], pick: int) -> None:
        doc = confuse(SPEC, [(("process", "env"), env[pick]), *changes])
        survive("types-wrapper", lambda: wrap(doc, (cdi, legacy)[pick]))
    run()


@pytest.mark.parametrize(("path", "value", "words"), [
    (("linux", "devices"), {}, "linux.devices is an object, not an array"),
    (("hooks",), [], "hooks is an array, not an object"),
    (("mounts", 0), "/x", r"mounts\[0\]: expected an object, got string"),  # the hook's
    (("hooks", "prestart"), {}, "hooks.prestart is an object, not an array"),
    (("linux", "resources", "devices", 0), 7,
     r"linux.resources.devices\[0\] is a number, not an object"),
], ids=["devices-object", "hooks-list", "mount-string", "stage-object", "rule-number"])
def test_the_wrapper_names_the_field(wrapper_rig: tuple[Path, Path, Path], tmp_path: Path,
                                     path: tuple[Any, ...], value: Any, words: str) -> None:
    from nvhook.errors import NvhookError
    from nvhook.launch.runtime_log import RuntimeLog
    from nvhook.launch.settings import Settings
    from nvhook.runtime.bundle import BundleFile
    from nvhook.runtime.create import gpu_document

    cdi, _, own = wrapper_rig
    doc = confuse(SPEC, [(("process", "env", 0), "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"),
                         (path, value)])
    bundle = BundleFile(str(tmp_path / "config.json"), -1, json.dumps(doc).encode(), 0o644, 0,
                        0)
    with pytest.raises(NvhookError, match=words) as err:
        gpu_document(bundle, str(tmp_path), Settings(str(cdi)), RuntimeLog(),
                     {"NVIDIA_CTK_CONFIG_FILE_PATH": str(cdi)}, str(own))
    assert str(err.value).startswith(f"could not decode OCI spec: {tmp_path}/config.json: ")


# ---- config.toml ------------------------------------------------------------------------------

def test_the_config_toml_readers() -> None:
    from nvhook.config.check import check_document
    from nvhook.config.model import config_from_document, known_keys
    from nvhook.launch.settings import settings_from_document

    keys = sorted(known_keys())
    tables = sorted({k.rsplit(".", n)[0] for k in keys for n in range(1, k.count(".") + 1)})

    def nest(changes: list[tuple[str, Any]]) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for dotted, value in changes:
            node: Any = doc
            parts = dotted.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {}) if isinstance(node, dict) else {}
            if isinstance(node, dict):
                node[parts[-1]] = value
        return doc

    @TYPES
    @given(st.lists(st.tuples(st.sampled_from(keys + tables), confused), min_size=1,
                    max_size=4))
    def run(changes: list[tuple[str, Any]]) -> None:
        doc = nest([(k, v) for k, v in changes if v is not None])
        survive("types-config", lambda: config_from_document(copy.deepcopy(doc), "/x.toml"))
        survive("types-config", lambda: check_document(copy.deepcopy(doc), "/x.toml"))
        survive("types-config", lambda: settings_from_document(copy.deepcopy(doc), "/x.toml"))
    run()


# ---- cache files ------------------------------------------------------------------------------

@pytest.mark.root
def test_the_cache_readers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root-only files, but what they hold is still checked where it is read: a cache of
    another shape (another nvhook build of the same version, a truncated write) is a miss.
    Before: `load_config` failed with TypeError/IndexError/KeyError, `cached_inventory` with
    ValueError/TypeError."""
    if os.geteuid() != 0:
        pytest.skip("the caches are root's")
    from nvhook import __version__
    from nvhook.config import load as config_load
    from nvmount import cachefile
    from nvmount.discover import cache as inventory_cache

    directory = tmp_path / "cache"
    monkeypatch.setattr(config_load, "DEFAULT_DIR", str(directory))
    config = tmp_path / "config.toml"
    config.write_text("[nvhook]\n")
    stamp = cachefile.file_stamp(str(config))
    shaped = st.sampled_from([(stamp,), (stamp, 5), (stamp, {}, 5), (stamp, [("a", 1)], ()),
                              (stamp, {"nvhook": 5}, ((), False, False)), (stamp, {}, (5,)),
                              (stamp, {}, ((), 1, 2, 3))])
    key = ("key",)

    @TYPES
    @given(confused | shaped, st.sampled_from(["top", "entry"]))
    def run(value: Any, where: str) -> None:
        table = value if where == "top" else {str(config): value, key: value}
        cachefile.store(str(directory), "config", __version__, table)
        survive("types-cache", lambda: config_load.load_config(str(config), {}))
        cachefile.store(str(directory), "inventory", inventory_cache._FORMAT, table)
        survive("types-cache", lambda: inventory_cache.lookup(str(directory), key, "/proc", ()))
        survive("types-cache", lambda: inventory_cache.cached_inventory(
            str(directory), key, "/proc", (), lambda: _empty_inventory(tmp_path)))
    run()


def _empty_inventory(tmp_path: Path) -> Any:
    """Discovery on a root without a driver: the DriverError the engine would report."""
    from nvmount.discover.driver import discover_driver

    return discover_driver(str(tmp_path), "/etc/ld.so.cache", str(tmp_path))
