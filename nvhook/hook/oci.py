"""Stage 1 of the hook: the OCI state (stdin) and the bundle's `config.json`. Reads only those.

Field matching follows Go's `encoding/json` as used by runc and NVIDIA's hook: object keys match
case-insensitively (`"Process"` is `process`), the last matching key wins, `null` means absent,
unknown fields are ignored. Error texts are NVIDIA's (hook-spec 1.3, 1.4); where NVIDIA prints a
Go decoder message, nvhook prints its own description of the same problem.

Inputs are bounded: a state or spec larger than `MAX_DOCUMENT_BYTES` is refused, and the spec must
be a regular file (a FIFO planted as `config.json` cannot block the hook).
"""

from __future__ import annotations

import os

from nvhook.errors import SpecError, StateError
from nvmount.bounds import shorten
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import IO, Any

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
_MAX_PID = 2**31 - 1
_CHUNK = 65536


@record
class State:
    """The fields of the OCI state that the hook uses."""

    pid: int
    bundle: str
    root: str = ""  # the rootfs the runtime names (crun's `root`, `runc state`'s `rootfs`)
    id: str = ""  # the container's id (a valid name: nvhook.hook.locate.runtime_spec_path)


@record
class Spec:
    """The fields of `config.json` that the hook uses (everything else is ignored)."""

    path: str
    oci_version: str
    env: tuple[str, ...]
    capabilities: Any  # raw JSON (None, list or dict); its format depends on oci_version
    root_path: str
    mounts: tuple[tuple[str, str], ...]  # (source, destination)
    linux: Any = None  # raw `linux` object (devices, resources.devices: nvhook.hook.spec_mode)


_NON_ASCII_FOLDS = {"ſ": "S", "K": "K"}  # the only runes that Go folds onto ASCII letters


def fold(name: str) -> str:
    """Go's JSON key folding, for matching against ASCII field names."""
    if name.isascii():
        return name.upper()
    return "".join(c.upper() if c.isascii() else _NON_ASCII_FOLDS.get(c, c) for c in name)


def field(obj: dict[str, Any], name: str) -> Any:
    """The value of field `name` with Go's matching: exact or case-folded key, last one wins."""
    want = fold(name)
    value = None
    for key, item in obj.items():
        if key == name or (len(key) == len(name) and fold(key) == want):
            value = item
    return value


def json_kind(value: Any) -> str:
    """The JSON kind of a decoded value, as Go's decoder names it in its errors."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _string(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {json_kind(value)}")
    return value


def _object(value: Any, where: str) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {json_kind(value)}")
    return value


def _array(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected an array, got {json_kind(value)}")
    return value


def decode_json(data: bytes) -> Any:
    """Decode exactly one JSON value from `data` as Go's Decoder does (the last of duplicate
    keys wins, trailing data is ignored): `nvmount.jsonio.strict_loads(go=True)`."""
    from nvmount.jsonio import strict_loads

    try:
        return strict_loads(data, go=True, max_bytes=MAX_DOCUMENT_BYTES)
    except ValueError as err:
        raise ValueError(str(err)) from None


def _read_bounded(fd: int, what: str) -> bytes:
    """Read until EOF or until a complete JSON object has arrived, at most MAX_DOCUMENT_BYTES."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_DOCUMENT_BYTES:
            raise ValueError(f"{what} is larger than {MAX_DOCUMENT_BYTES} bytes")
        if chunk.rstrip().endswith(b"}"):
            data = b"".join(chunks)
            try:
                decode_json(data)
            except ValueError:
                continue
            return data


def read_state(fd: int) -> bytes:
    """The state's bytes from `fd` (stdin): until EOF or a complete JSON object, bounded."""
    try:
        return _read_bounded(fd, "the container state")
    except OSError as err:
        raise StateError(f"could not decode container state: read stdin: {err.strerror}") from err
    except ValueError as err:
        raise StateError(f"could not decode container state: {err}") from err


def load_state(stream: IO[bytes] | int | bytes) -> State:
    """The OCI state from `stream` (a binary file, a file descriptor, or the bytes already
    read from one), per hook-spec 1.3."""
    if isinstance(stream, bytes):
        data = stream
    else:
        data = read_state(stream if isinstance(stream, int) else stream.fileno())
    try:
        raw = decode_json(data)
        obj = _object(raw, "state")
        if obj is None:
            return State(pid=0, bundle="")
        pid = field(obj, "pid")
        bundle = _string(field(obj, "bundle"), "bundle")
        bundle_path = _string(field(obj, "bundlePath"), "bundlePath")
        root = _state_root(field(obj, "root")) or _state_root(field(obj, "rootfs"))
        cid = field(obj, "id")
    except OSError as err:
        raise StateError(f"could not decode container state: read stdin: {err.strerror}") from err
    except ValueError as err:
        raise StateError(f"could not decode container state: {err}") from err
    if pid is None:
        pid = 0
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid <= _MAX_PID:
        raise StateError(
            f"could not decode container state: pid {shorten(repr(pid))} is not a process id "
            "(expected an integer from 0 to 2147483647)"
        )
    bundle = bundle or bundle_path
    if "\0" in bundle:
        raise StateError(f"could not decode container state: bundle {shorten(repr(bundle))} "
                         "contains a NUL byte (expected a directory path)")
    return State(pid=pid, bundle=bundle, root=root, id=cid if isinstance(cid, str) else "")


def _state_root(value: Any) -> str:
    """A runtime's own rootfs field (not in the OCI state): used when it is an absolute path
    string, ignored otherwise (as any unknown field)."""
    ok = isinstance(value, str) and value.startswith("/") and "\0" not in value
    return value if ok else ""


def read_spec_file(path: str) -> bytes:
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise SpecError(f"could not open OCI spec: open {path}: {_errno_text(err)}") from err
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SpecError(f"could not open OCI spec: open {path}: not a regular file")
        return _read_all(fd, path)
    except OSError as err:
        raise SpecError(f"could not open OCI spec: read {path}: {_errno_text(err)}") from err
    finally:
        os.close(fd)


def _read_all(fd: int, path: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := os.read(fd, _CHUNK * 4):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_DOCUMENT_BYTES:
            raise SpecError(
                f"could not decode OCI spec: {path} is larger than {MAX_DOCUMENT_BYTES} bytes"
            )
    return b"".join(chunks)


def _errno_text(err: OSError) -> str:
    """Go prints errno texts in lower case: "no such file or directory"."""
    text = err.strerror or str(err)
    return text[:1].lower() + text[1:]


def resolve_bundle(bundle: str, cwd: str | None) -> str:
    """The bundle as an absolute, cleaned path; relative to the hook's original cwd."""
    if "\0" in bundle:
        raise SpecError(f"resolve bundle {shorten(repr(bundle))}: contains a NUL byte "
                        "(expected a directory path)")
    if bundle.startswith("/"):
        return go_clean(bundle)
    if cwd is None:
        raise SpecError(
            f"resolve bundle {shorten(repr(bundle))}: the path is relative and the hook's "
            "working directory is unknown (pass an absolute bundle path in the state)"
        )
    return go_join(cwd, bundle)


def spec_path(bundle: str, cwd: str | None) -> str:
    """`<bundle>/config.json` (an empty bundle means the hook's original cwd)."""
    return go_join(resolve_bundle(bundle, cwd), "config.json")


def load_spec(bundle: str, *, cwd: str | None = None) -> Spec:
    """`<bundle>/config.json` per hook-spec 1.4; `cwd` resolves a relative bundle."""
    path = spec_path(bundle, cwd)
    return parse_spec(path, read_spec_file(path))


def parse_spec(path: str, data: bytes) -> Spec:
    """The spec in `data` (the bytes of `path`), per hook-spec 1.4."""
    try:
        return _decode_spec(path, decode_json(data))
    except ValueError as err:
        raise SpecError(f"could not decode OCI spec: {path}: {err}") from err


def _decode_spec(path: str, raw: Any) -> Spec:
    obj = _object(raw, "spec") or {}
    version = field(obj, "ociVersion")
    process = _object(field(obj, "process"), "process")
    root = _object(field(obj, "root"), "root")
    env: tuple[str, ...] = ()
    capabilities = None
    if process is not None:
        env = tuple(
            _string(e, f"process.env[{i}]")
            for i, e in enumerate(_array(field(process, "env"), "process.env"))
        )
        capabilities = field(process, "capabilities")
    root_path = _string(field(root, "path"), "root.path") if root is not None else ""
    mounts = []
    for i, item in enumerate(_array(field(obj, "mounts"), "mounts")):
        mount = _object(item, f"mounts[{i}]") or {}
        source = _string(field(mount, "source"), f"mounts[{i}].source")
        destination = _string(field(mount, "destination"), f"mounts[{i}].destination")
        mounts.append((source, destination))
    version = _string(version, "ociVersion") if version is not None else None
    if version is None:
        raise SpecError(f"Version is empty in OCI spec (add \"ociVersion\" to {path})")
    if process is None:
        raise SpecError(f"Process is empty in OCI spec (add \"process\" to {path})")
    if root is None:
        raise SpecError(f"Root is empty in OCI spec (add \"root\" to {path})")
    return Spec(
        path=path,
        oci_version=version,
        env=env,
        capabilities=capabilities,
        root_path=root_path,
        mounts=tuple(mounts),
        linux=field(obj, "linux"),
    )


def go_clean(path: str) -> str:
    """Go's `filepath.Clean`: lexical, "" -> ".", a leading "//" becomes "/"."""
    import posixpath

    if not path:
        return "."
    cleaned = posixpath.normpath(path)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def go_join(*parts: str) -> str:
    """Go's `filepath.Join`: join the non-empty parts and clean; "" if all are empty."""
    kept = [p for p in parts if p]
    return go_clean("/".join(kept)) if kept else ""


def resolve_rootfs(spec: Spec, cwd: str | None) -> str:
    """Absolute, lexically cleaned `root.path`; relative to the hook's original cwd (1.4).

    No symlinks are resolved here: the engine opens the rootfs by fd.
    """
    path = spec.root_path
    if "\0" in path:
        raise SpecError(f"resolve rootfs {shorten(repr(path))} of {spec.path}: root.path "
                        "contains a NUL byte (expected a directory path)")
    if path.startswith("/"):
        return go_clean(path)
    if cwd is None:
        raise SpecError(
            f"resolve rootfs {shorten(repr(path))} of {spec.path}: the path is relative and the "
            "hook's working directory is unknown (use an absolute root.path)"
        )
    return go_join(cwd, path)
