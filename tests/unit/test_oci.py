"""nvhook.hook.oci: the OCI state and config.json, NVIDIA's messages (hook-spec 1.3, 1.4)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from nvhook.errors import SpecError, StateError
from nvhook.hook import oci


def _state(tmp_path: Path, data: bytes) -> oci.State:
    path = tmp_path / "state.json"
    path.write_bytes(data)
    with open(path, "rb") as stream:
        return oci.load_state(stream)


STATES = [
    (b'{"pid": 42, "bundle": "/b"}', 42, "/b"),
    (b'{"pid": 42, "bundlePath": "/old"}', 42, "/old"),
    (b'{"pid": 42, "bundle": "/new", "bundlePath": "/old"}', 42, "/new"),
    (b'{"pid": 42, "bundle": "", "bundlePath": "/old"}', 42, "/old"),
    (b'{"bundle": "/b"}', 0, "/b"),
    (b'{"pid": null, "bundle": null}', 0, ""),
    (b'{"ociVersion": "1.0.2", "id": "x", "status": "creating", "pid": 7, "bundle": "/b",'
     b' "annotations": {"a": "b"}}', 7, "/b"),
    (b'{"PID": 9, "Bundle": "/case"}', 9, "/case"),
    (b'{"bundle": "/first", "BUNDLE": "/last"}', 0, "/last"),
    (b'  \n{"pid": 1, "bundle": "/b"} trailing garbage {', 1, "/b"),
    (b'{"pid": 1, "bundle": "/b"}{"pid": 2}', 1, "/b"),
    (b"null", 0, ""),
]  # fmt: skip
STATE_IDS = [
    "bundle", "bundlePath", "bundle-wins", "empty-bundle-falls-back", "pid-missing", "nulls",
    "full-state", "case-insensitive-keys", "last-key-wins", "trailing-data-ignored",
    "second-value-ignored", "null-state",
]  # fmt: skip


@pytest.mark.parametrize(("data", "pid", "bundle"), STATES, ids=STATE_IDS)
def test_load_state(tmp_path: Path, data: bytes, pid: int, bundle: str) -> None:
    state = _state(tmp_path, data)
    assert (state.pid, state.bundle) == (pid, bundle)


BAD_STATES = [
    (b"", "could not decode container state: Expecting value"),
    (b"{", "could not decode container state: "),
    (b"[1]", "could not decode container state: state: expected an object, got array"),
    (b'{"pid": "1"}', "could not decode container state: pid '1' is not a process id"),
    (b'{"pid": 1.5}', "could not decode container state: pid 1.5 is not a process id"),
    (b'{"pid": -1}', "could not decode container state: pid -1 is not a process id"),
    (b'{"pid": true}', "could not decode container state: pid True is not a process id"),
    (b'{"pid": 2147483648}', "could not decode container state: pid 2147483648 is not"),
    (b'{"bundle": 5}', "could not decode container state: bundle: expected a string, got number"),
    (b'{"pid": NaN}', "could not decode container state: invalid JSON value NaN"),
    (b"[" * 100000, "could not decode container state: "),
]
BAD_STATE_IDS = [
    "empty", "truncated", "not-an-object", "pid-string", "pid-float", "pid-negative", "pid-bool",
    "pid-too-large", "bundle-number", "nan", "deep-nesting",
]  # fmt: skip


@pytest.mark.parametrize(("data", "message"), BAD_STATES, ids=BAD_STATE_IDS)
def test_load_state_errors(tmp_path: Path, data: bytes, message: str) -> None:
    with pytest.raises(StateError) as info:
        _state(tmp_path, data)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_load_state_too_large(tmp_path: Path) -> None:
    data = b'{"bundle": "' + b"x" * (oci.MAX_DOCUMENT_BYTES + 10) + b'"}'
    with pytest.raises(StateError, match="larger than 4194304 bytes"):
        _state(tmp_path, data)


def test_load_state_stops_after_a_complete_object() -> None:
    """Like Go's json.Decoder: one value is enough, stdin need not be closed."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, b'{"pid": 3, "bundle": "/b"}\n')
        assert oci.load_state(read_fd) == oci.State(pid=3, bundle="/b")
    finally:
        os.close(read_fd)
        os.close(write_fd)


def _bundle(tmp_path: Path, spec: Any) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    data = spec if isinstance(spec, bytes) else json.dumps(spec).encode()
    (bundle / "config.json").write_bytes(data)
    return bundle


MINIMAL: dict[str, Any] = {"ociVersion": "1.0.2", "process": {}, "root": {"path": "rootfs"}}


def test_load_spec_fields(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, {
        "ociVersion": "1.0.2",
        "process": {"env": ["A=1", "B=2"], "capabilities": {"bounding": ["CAP_SYS_ADMIN"]},
                    "args": ["sh"], "unknown": {"x": 1}},
        "root": {"path": "/r", "readonly": True},
        "mounts": [{"source": "/dev/null", "destination": "/d", "type": "bind", "options": []},
                   {"destination": "/proc"}, None],
        "hooks": {}, "linux": {"whatever": [1, 2]}, "extra": 1,
    })  # fmt: skip
    spec = oci.load_spec(str(bundle))
    assert spec == oci.Spec(
        path=str(bundle / "config.json"),
        oci_version="1.0.2",
        env=("A=1", "B=2"),
        capabilities={"bounding": ["CAP_SYS_ADMIN"]},
        root_path="/r",
        mounts=(("/dev/null", "/d"), ("", "/proc"), ("", "")),
        linux={"whatever": [1, 2]},  # raw: only spec mode reads it (nvhook.hook.spec_mode)
    )


SPECS: list[tuple[Any, str, Any]] = [
    ({**MINIMAL, "ociVersion": ""}, "oci_version", ""),
    ({**MINIMAL, "process": {"env": None}}, "env", ()),
    ({**MINIMAL, "process": {"env": ["A=1", None]}}, "env", ("A=1", "")),
    ({**MINIMAL, "process": {"capabilities": None}}, "capabilities", None),
    ({**MINIMAL, "root": {}}, "root_path", ""),
    ({**MINIMAL, "mounts": None}, "mounts", ()),
    ({"OCIVERSION": "1.0.2", "Process": {"ENV": ["X=y"]}, "ROOT": {"Path": "r"}}, "env", ("X=y",)),
    ({**MINIMAL, "process": {"env": ["A=1"]}, "PROCESS": {"env": ["B=2"]}}, "env", ("B=2",)),
    (b'{"ociVersion": "1", "process": {}, "root": {"path": "a", "Path": "c", "path": "b"}}',
     "root_path", "b"),
    ({**MINIMAL, "process": {"ENV": ["A=1"], "env": None}}, "env", ()),
]  # fmt: skip
SPEC_IDS = [
    "empty-version-accepted", "null-env", "null-env-entry", "null-capabilities", "no-root-path",
    "null-mounts", "case-insensitive-keys", "last-case-variant-wins", "duplicate-key",
    "null-variant-wins",
]  # fmt: skip


@pytest.mark.parametrize(("spec", "attr", "want"), SPECS, ids=SPEC_IDS)
def test_load_spec_variants(tmp_path: Path, spec: Any, attr: str, want: Any) -> None:
    assert getattr(oci.load_spec(str(_bundle(tmp_path, spec))), attr) == want


def test_go_key_folding() -> None:
    assert oci.field({"ENV": 1}, "env") == 1
    assert oci.field({"bundlepath": 1}, "bundlePath") == 1
    assert oci.field({"ſource": 1}, "source") == 1  # U+017F folds to "s" in Go
    assert oci.field({"caKe": 1}, "cake") == 1  # U+212A KELVIN SIGN folds to "k"
    assert oci.field({"ocıVersion": 1}, "ociVersion") is None  # U+0131 does not fold to "i"


BAD_SPECS: list[tuple[bytes, str]] = [
    (b"{", "could not decode OCI spec: {path}: Expecting"),
    (b"[]", "could not decode OCI spec: {path}: spec: expected an object, got array"),
    (b'{"ociVersion": 1}', "could not decode OCI spec: {path}: ociVersion: expected a string"),
    (b'{"ociVersion": "1", "process": [], "root": {}}',
     "could not decode OCI spec: {path}: process: expected an object, got array"),
    (b'{"ociVersion": "1", "process": {"env": "A=1"}, "root": {}}',
     "could not decode OCI spec: {path}: process.env: expected an array, got string"),
    (b'{"ociVersion": "1", "process": {"env": [1]}, "root": {}}',
     "could not decode OCI spec: {path}: process.env[0]: expected a string, got number"),
    (b'{"ociVersion": "1", "process": {}, "root": {"path": 5}}',
     "could not decode OCI spec: {path}: root.path: expected a string, got number"),
    (b'{"ociVersion": "1", "process": {}, "root": {}, "mounts": [{"source": 1}]}',
     "could not decode OCI spec: {path}: mounts[0].source: expected a string, got number"),
    (b'{"ociVersion": "1", "process": {}, "root": {}, "mounts": {}}',
     "could not decode OCI spec: {path}: mounts: expected an array, got object"),
    (b'{"process": {}, "root": {}}', "Version is empty in OCI spec"),
    (b'{"ociVersion": null, "process": {}, "root": {}}', "Version is empty in OCI spec"),
    (b'{"ociVersion": "1", "root": {}}', "Process is empty in OCI spec"),
    (b'{"ociVersion": "1", "process": null, "root": {}}', "Process is empty in OCI spec"),
    (b'{"ociVersion": "1", "process": {}}', "Root is empty in OCI spec"),
    (b"{}", "Version is empty in OCI spec"),
    (b"null", "Version is empty in OCI spec"),
    (b'{"process": {"env": 5}}', "could not decode OCI spec: {path}: process.env: expected"),
    (b'{"ociVersion": Infinity}', "could not decode OCI spec: {path}: invalid JSON value"),
]  # fmt: skip
BAD_SPEC_IDS = [
    "truncated", "array", "version-number", "process-array", "env-string", "env-number-entry",
    "root-path-number", "mount-source-number", "mounts-object", "no-version", "null-version",
    "no-process", "null-process", "no-root", "empty-object", "null", "decode-error-wins",
    "infinity",
]  # fmt: skip


@pytest.mark.parametrize(("data", "message"), BAD_SPECS, ids=BAD_SPEC_IDS)
def test_load_spec_errors(tmp_path: Path, data: bytes, message: str) -> None:
    bundle = _bundle(tmp_path, data)
    with pytest.raises(SpecError) as info:
        oci.load_spec(str(bundle))
    assert str(info.value).startswith(message.format(path=bundle / "config.json"))


def test_load_spec_missing(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        oci.load_spec(str(tmp_path / "nope"))
    path = tmp_path / "nope" / "config.json"
    assert str(info.value) == f"could not open OCI spec: open {path}: no such file or directory"


def test_load_spec_fifo_does_not_block(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    os.mkfifo(bundle / "config.json")
    with pytest.raises(SpecError, match="not a regular file"):
        oci.load_spec(str(bundle))


def test_load_spec_too_large(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, b" " * (oci.MAX_DOCUMENT_BYTES + 1) + b"{}")
    with pytest.raises(SpecError, match="larger than 4194304 bytes"):
        oci.load_spec(str(bundle))


def test_load_spec_relative_bundle_uses_cwd(tmp_path: Path) -> None:
    _bundle(tmp_path, MINIMAL)
    spec = oci.load_spec("bundle", cwd=str(tmp_path))
    assert spec.path == str(tmp_path / "bundle" / "config.json")
    spec = oci.load_spec("", cwd=str(tmp_path / "bundle"))
    assert spec.path == str(tmp_path / "bundle" / "config.json")
    with pytest.raises(SpecError, match="working directory is unknown"):
        oci.load_spec("bundle", cwd=None)


def _spec(root_path: str) -> oci.Spec:
    return oci.Spec("/b/config.json", "1.0.2", (), None, root_path, ())


ROOTFS = [
    ("rootfs", "/bundle", "/bundle/rootfs"),
    ("/var/lib/x/../rootfs", "/bundle", "/var/lib/rootfs"),
    ("/abs/rootfs/", "/bundle", "/abs/rootfs"),
    ("//double//slash", "/bundle", "/double/slash"),
    ("../other/rootfs", "/run/bundle", "/run/other/rootfs"),
    ("", "/bundle", "/bundle"),
    ("./r/.", "/bundle", "/bundle/r"),
]
ROOTFS_IDS = ["relative", "dotdot-cleaned", "trailing-slash", "double-slash", "relative-dotdot",
              "empty-is-cwd", "dot"]  # fmt: skip


@pytest.mark.parametrize(("root", "cwd", "want"), ROOTFS, ids=ROOTFS_IDS)
def test_resolve_rootfs(root: str, cwd: str, want: str) -> None:
    assert oci.resolve_rootfs(_spec(root), cwd) == want


def test_resolve_rootfs_relative_without_cwd() -> None:
    assert oci.resolve_rootfs(_spec("/abs"), None) == "/abs"
    with pytest.raises(SpecError, match="relative"):
        oci.resolve_rootfs(_spec("rootfs"), None)


@pytest.mark.parametrize(
    ("bundle", "cwd", "want"),
    [("/b/", None, "/b"), ("b", "/x", "/x/b"), ("", "/x", "/x"), ("/a/../b", None, "/b")],
    ids=["absolute", "relative", "empty", "cleaned"],
)
def test_resolve_bundle(bundle: str, cwd: str | None, want: str) -> None:
    assert oci.resolve_bundle(bundle, cwd) == want
