"""The bundle's config.json as the runtime wrapper reads and rewrites it. Effects: one read,
at most one atomic replace.

config.json is trusted no further than JSON parsing: it is opened relative to an O_PATH fd of
the bundle directory with O_NOFOLLOW|O_NONBLOCK (no symlink, no FIFO), must be a regular file
of at most 4 MiB, and is decoded strictly (UTF-8, no NaN/Infinity, no duplicate keys - Go would
merge duplicate objects field by field, Python keeps the last one, so a rewrite could change
what runc sees). The rewrite goes to a new file in the bundle directory (O_EXCL, same mode
and owner as the original) that is renamed over config.json, so runc reads either the old or
the new document, never a partial one. Every field nvhook does not know is kept; key order is
kept; numbers keep their value (floats may be printed differently); non-ASCII text
is written as \\u escapes.
"""

from __future__ import annotations

import os

from nvhook.errors import WrapperError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

MAX_SPEC_BYTES = 4 * 1024 * 1024
NAME = "config.json"


class BundleFile:
    """config.json of one bundle: its bytes and what a rewrite must preserve."""

    __slots__ = ("data", "dir_fd", "gid", "mode", "path", "uid")

    def __init__(self, path: str, dir_fd: int, data: bytes, mode: int, uid: int,
                 gid: int) -> None:
        self.path, self.dir_fd, self.data = path, dir_fd, data
        self.mode, self.uid, self.gid = mode, uid, gid

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> BundleFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_bundle(bundle: str) -> BundleFile:
    """Read `<bundle>/config.json` (bounded, regular file, no symlink)."""
    path = os.path.join(bundle, NAME)
    try:
        dir_fd = os.open(bundle, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise WrapperError(f"open bundle {bundle}: {_text(err)} (is --bundle right?)") from err
    try:
        return _read(path, dir_fd)
    except BaseException:
        os.close(dir_fd)
        raise


def _read(path: str, dir_fd: int) -> BundleFile:
    import stat

    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(NAME, flags, dir_fd=dir_fd)
    except OSError as err:
        raise WrapperError(f"could not open OCI spec: open {path}: {_text(err)}") from err
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WrapperError(f"could not open OCI spec: {path}: not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 18):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_SPEC_BYTES:
                raise WrapperError(f"could not load OCI spec: {path} is larger than "
                                   f"{MAX_SPEC_BYTES} bytes")
    except OSError as err:
        raise WrapperError(f"could not read OCI spec {path}: {_text(err)}") from err
    finally:
        os.close(fd)
    return BundleFile(path, dir_fd, b"".join(chunks), stat.S_IMODE(st.st_mode), st.st_uid,
                      st.st_gid)


def _text(err: OSError) -> str:
    text = err.strerror or str(err)
    return text[:1].lower() + text[1:]


def decode_document(bundle: BundleFile) -> dict[str, Any]:
    """config.json as a JSON object, strictly (module docstring; `nvmount.jsonio.strict_loads`:
    `_json`'s C scanner, not the json package, whose import pulls in `re`: ~5 ms of every GPU
    create)."""
    from nvmount.jsonio import strict_loads

    try:
        doc = strict_loads(bundle.data, max_bytes=MAX_SPEC_BYTES)
    except ValueError as err:
        raise WrapperError(f"could not decode OCI spec: {bundle.path}: {err} (the runtime "
                           "wrapper rewrites only strict JSON)") from err
    if not isinstance(doc, dict):
        raise WrapperError(f"could not decode OCI spec: {bundle.path}: not a JSON object")
    from nvhook.hook.spec_kinds import edited_fields_error

    why = edited_fields_error(doc)  # the fields the wrapper edits have the schema's types
    if why is not None:
        raise WrapperError(f"could not decode OCI spec: {bundle.path}: {why} (the OCI runtime "
                           "spec's type; fix the spec)")
    return doc


def write_document(bundle: BundleFile, doc: dict[str, Any]) -> None:
    """Replace config.json with `doc`, atomically, keeping its mode and owner."""
    from nvmount.jsonio import encode

    data = encode(doc).encode("ascii")
    tmp = f".{NAME}.nvhook-{os.getpid()}-{os.urandom(4).hex()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o600, dir_fd=bundle.dir_fd)
    except OSError as err:
        raise WrapperError(f"write OCI spec {bundle.path}: create {tmp}: {_text(err)}") from err
    try:
        try:
            os.fchown(fd, bundle.uid, bundle.gid)
            os.fchmod(fd, bundle.mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.rename(tmp, NAME, src_dir_fd=bundle.dir_fd, dst_dir_fd=bundle.dir_fd)
    except OSError as err:
        try:  # noqa: SIM105 (contextlib costs 3 ms of imports on every create)
            os.unlink(tmp, dir_fd=bundle.dir_fd)
        except OSError:
            pass
        raise WrapperError(f"write OCI spec {bundle.path}: {_text(err)}") from err
