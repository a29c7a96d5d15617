"""Reading any valid CDI spec (`nvhook.cdi.document`): YAML with PyYAML's C loader or JSON, every
cdiVersion up to the newest the official schema has (1.1.0), every field type-checked where it
is read with a one-line error, and no internal error on any input (hypothesis). The official
schema's examples and NVIDIA's own specs (nvidia-ctk 1.17.8 and 1.20.0) round-trip."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvhook.cdi.document import (
    NEWEST,
    VERSIONS,
    check_spec,
    minimal_version,
    parse_document,
)
from nvhook.cdi.engines import newest_readable, unreadable
from nvhook.cdi.generate import render
from nvhook.errors import CdiError

DATA = Path(__file__).resolve().parent.parent / "data"
EXAMPLES = DATA / "cdi-schema" / "testdata"
NVIDIA = sorted((DATA / "nvidia-cdi").glob("*.yaml"))
PLACEHOLDER = "@SIM_ROOT@"

FULL: dict[str, Any] = {
    "cdiVersion": "1.1.0", "kind": "example.com/net.dev",
    "annotations": {"a": "b"},
    "devices": [{"name": "dev-0", "annotations": {"c": "d"}, "containerEdits": {
        "env": ["A=1"],
        "deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y", "type": "c", "major": 1,
                         "minor": 3, "fileMode": 438, "permissions": "rw", "uid": 0, "gid": 5}],
        "netDevices": [{"hostInterfaceName": "eth1", "name": "net0"}]}}],
    "containerEdits": {
        "hooks": [{"hookName": "createContainer", "path": "/bin/h", "args": ["h", "a::b"],
                   "env": ["X=y"], "timeout": 5}],
        "mounts": [{"hostPath": "/a", "containerPath": "/b", "options": ["ro"], "type": "bind"}],
        "intelRdt": {"closID": "c", "l3CacheSchema": "L3:0=f", "memBwSchema": "MB:0=50",
                     "schemata": ["x"], "enableMonitoring": True},
        "additionalGids": [44]},
}


def nvidia_text(path: Path) -> str:
    return path.read_text().replace(PLACEHOLDER, "/sim")


def test_versions_are_the_schemas() -> None:
    assert NEWEST == "1.1.0" and VERSIONS[2:5] == ("0.3.0", "0.4.0", "0.5.0")
    assert check_spec(copy.deepcopy(FULL), "full") == FULL


@pytest.mark.parametrize("path", sorted((EXAMPLES / "good").glob("*.json")),
                         ids=lambda p: p.name)
def test_official_examples_read_and_round_trip(path: Path) -> None:
    spec = check_spec(parse_document(path.read_bytes(), str(path)), str(path))
    for fmt in ("yaml", "json"):
        assert parse_document(render(spec, fmt).encode(), fmt) == spec


@pytest.mark.parametrize("path", sorted((EXAMPLES / "bad").glob("*.json")),
                         ids=lambda p: p.name)
def test_official_bad_examples_are_refused(path: Path) -> None:
    with pytest.raises(CdiError, match=str(path)):
        check_spec(parse_document(path.read_bytes(), str(path)), str(path))


@pytest.mark.parametrize("path", NVIDIA, ids=lambda p: p.stem)
def test_nvidia_specs_read_and_round_trip(path: Path) -> None:
    text = nvidia_text(path)
    spec = check_spec(parse_document(text.encode(), path.name), path.name)
    assert spec == yaml.safe_load(text)
    args = [a for h in spec["containerEdits"]["hooks"] for a in h["args"]]
    assert "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so" in args  # `::` stays a string
    assert spec["devices"][0]["containerEdits"]["deviceNodes"][0].get("minor") is None
    for fmt in ("yaml", "json"):
        assert parse_document(render(spec, fmt).encode(), fmt) == spec
    assert minimal_version(spec) == spec["cdiVersion"] == "0.5.0"


BAD = [
    ({"cdiVersion": 5}, "spec.cdiVersion: not a string (an integer)"),
    ({"cdiVersion": "0.9.0"}, "cdiVersion: unknown version '0.9.0'"),
    ({"cdiVersion": "0.4.0"}, "cdiVersion: 0.4.0 is lower than 1.1.0"),
    ({"kind": "nvidia.com"}, "kind: 'nvidia.com' is not vendor/class"),
    ({"devices": []}, "devices: no devices"),
    ({"devices": {}}, "spec.devices: not an array (an object)"),
    ({"extra": 1}, "spec: unknown field 'extra'"),
    ({"devices[0].name": "-x"}, "devices[0].name: '-x' is not a valid device name"),
    ({"devices[0].name": 0}, "devices[0].name: not a string (an integer)"),
    ({"devices[0].containerEdits": {}}, "devices[0].containerEdits: empty"),
    ({"node.major": "195"}, "deviceNodes[0].major: not an integer (a string)"),
    ({"node.major": True}, "deviceNodes[0].major: not an integer (a boolean)"),
    ({"node.fileMode": -1}, "deviceNodes[0].fileMode: -1 is out of range"),
    ({"node.type": "x"}, "deviceNodes[0].type: 'x' is not b, c, u or p"),
    ({"node.permissions": "rwx"}, "deviceNodes[0].permissions: 'rwx' is not r, w, m"),
    ({"node.path": ""}, "deviceNodes[0].path: empty"),
    ({"hook.hookName": "later"}, "hooks[0].hookName: 'later' is not a hook stage"),
    ({"hook.args": {"a": "b"}}, "hooks[0].args: not an array (an object)"),
    ({"hook.args": ["a", {"k": "v"}]}, "hooks[0].args[1]: not a string (an object)"),
    ({"hook.env": ["NOEQUALS"]}, "hooks[0].env[0]: 'NOEQUALS' is not NAME=VALUE"),
    ({"mount.options": "ro"}, "mounts[0].options: not an array (a string)"),
    ({"mount.hostPath": ""}, "mounts[0].hostPath: empty"),
    ({"rdt.closID": "a/b"}, "intelRdt.closID: not a valid file name"),
    ({"gids": [-1]}, "additionalGids[0]: -1 is out of range"),
]


def _mutate(edit: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(FULL)
    (where, value), = edit.items()
    edits = spec["devices"][0]["containerEdits"]
    common = spec["containerEdits"]
    targets = {"node": edits["deviceNodes"][0], "hook": common["hooks"][0],
               "mount": common["mounts"][0], "rdt": common["intelRdt"]}
    if where == "gids":
        common["additionalGids"] = value
    elif where.startswith("devices[0]."):
        spec["devices"][0][where.split(".", 1)[1]] = value
    elif "." in where:
        head, key = where.split(".", 1)
        targets[head][key] = value
    else:
        spec[where] = value
    return spec


@pytest.mark.parametrize(("edit", "message"), BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_each_field_is_checked_in_one_line(edit: dict[str, Any], message: str) -> None:
    with pytest.raises(CdiError) as info:
        check_spec(_mutate(edit), "/etc/cdi/x.yaml")
    text = str(info.value)
    assert text.startswith("/etc/cdi/x.yaml: ") and message in text and "\n" not in text


def test_parser_errors_are_one_line() -> None:
    for data, start in ((b"devices: [\n", "x: not valid YAML: "), (b"{\"a\": ", "x: not valid "
                        "JSON"), (b"\xff\xfe", "x: not UTF-8"), (b"a: !!python/object:os.x {}",
                                                                  "x: not valid YAML")):
        with pytest.raises(CdiError) as info:
            parse_document(data, "x")
        assert str(info.value).startswith(start) and "\n" not in str(info.value)


def test_aliases_cannot_make_a_huge_document() -> None:
    env = ", ".join(f"A{i}=1" for i in range(1000))
    text = (f"cdiVersion: 0.5.0\nkind: a.b/c\ndevices: [&d {{name: d, containerEdits: "
            f"{{env: [{env}]}}}}, " + ", ".join(["*d"] * 2000) + "]\n")
    assert len(text) < 40_000
    with pytest.raises(CdiError, match=r"more than 1000000 values \(the spec is too large\)"):
        check_spec(parse_document(text.encode(), "bomb"), "bomb")


def test_pyyaml_c_loader_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    original = yaml.load

    def spy(text: str, Loader: Any) -> Any:
        seen.append(Loader)
        return original(text, Loader=Loader)

    monkeypatch.setattr(yaml, "load", spy)
    parse_document(b"kind: a/b\n", "x")
    assert seen == [getattr(yaml, "CSafeLoader", yaml.SafeLoader)]


# -- no internal error, whatever the document -------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats()
                    | st.text(max_size=8), lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


SMALL_NVIDIA = yaml.safe_load(nvidia_text(NVIDIA[-1])) if NVIDIA else FULL


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_type_confused_documents_give_one_line_errors(data: st.DataObject) -> None:
    base = copy.deepcopy(FULL if data.draw(st.booleans()) else SMALL_NVIDIA)
    paths = _paths(base)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        value = data.draw(JSON)
        if not path:
            base = value
            break
        node = base
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    try:
        check_spec(base, "p")
    except CdiError as err:
        assert "\n" not in str(err) and str(err).startswith("p: ")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_parse_or_fail_in_one_line(data: bytes) -> None:
    try:
        doc = parse_document(data, "b")
    except CdiError as err:
        assert "\n" not in str(err)
        return
    try:
        check_spec(doc, "b")
    except CdiError as err:
        assert "\n" not in str(err)


# -- which engines read which cdiVersion ------------------------------------------------------

@pytest.mark.parametrize(("engine", "version", "reads"), [
    ("podman", "4.3.1", "0.5.0"), ("podman", "5.0.3", "0.6.0"), ("podman", "5.1.0", "0.7.0"),
    ("podman", "3.4.4", None), ("containerd", "1.6.20~ds1", None),
    ("containerd", "1.7.15", "0.6.0"), ("containerd", "1.7.16", "0.7.0"),
    ("containerd", "2.2.1", "1.1.0"), ("docker", "20.10.24+dfsg1", None),
    ("docker", "26.1.0", "0.7.0"), ("cri-o", "1.29.1", "0.6.0"), ("cri-o", "1.30.0", "0.7.0"),
])
def test_newest_readable(engine: str, version: str, reads: str | None) -> None:
    assert newest_readable(engine, version) == reads


def test_unreadable_names_each_engine() -> None:
    engines = {"podman": ("/usr/bin/podman", "4.3.1"), "docker": ("/usr/sbin/dockerd", "20.10"),
               "containerd": ("/usr/bin/containerd", "1.7.16")}
    assert unreadable("0.7.0", engines) == ["podman 4.3.1 (reads up to 0.5.0)"]
    assert unreadable("0.5.0", engines) == []
    assert json.dumps(unreadable("1.1.0", engines)).count("reads up to") == 2
