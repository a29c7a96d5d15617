"""D-Bus wire format, the little that registering devices with systemd needs (pure).

Stage: cgroup (systemd registration). Marshalling of method calls (little-endian, protocol
version 1) for the signatures systemd's `SetUnitProperties(s name, b runtime, a(sv)
properties)` and the bus's `Hello()` use, a reader for any message a server sends back
(header fields; an error's first string), and the SASL EXTERNAL lines. No I/O: `bus.py`
moves the bytes.

Types: `y` byte, `b` boolean, `u` uint32, `i` int32, `s` string, `o` object path,
`g` signature, `a` array, `(...)` struct, `v` variant (a `(signature, value)` pair when
marshalled). Every length read is checked against the bytes there and against
`MAX_MESSAGE` before anything is decoded: a hostile or broken server cannot make the
reader allocate or loop more than the message's own size.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence

METHOD_CALL, METHOD_RETURN, ERROR, SIGNAL = 1, 2, 3, 4
NO_REPLY_EXPECTED = 0x1
F_PATH, F_INTERFACE, F_MEMBER, F_ERROR_NAME, F_REPLY_SERIAL = 1, 2, 3, 4, 5
F_DESTINATION, F_SENDER, F_SIGNATURE = 6, 7, 8
FIELD_TYPES = {F_PATH: "o", F_INTERFACE: "s", F_MEMBER: "s", F_ERROR_NAME: "s",
               F_REPLY_SERIAL: "u", F_DESTINATION: "s", F_SENDER: "s", F_SIGNATURE: "g"}
MAX_MESSAGE = 1 << 16  # systemd's replies here are a few hundred bytes
MAX_DEPTH = 16
_ALIGN = {"y": 1, "g": 1, "v": 1, "b": 4, "u": 4, "i": 4, "s": 4, "o": 4, "a": 4, "(": 8}

SYSTEMD = "org.freedesktop.systemd1"
SYSTEMD_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
BUS = "org.freedesktop.DBus"
BUS_PATH = "/org/freedesktop/DBus"


class WireError(ValueError):
    """Bytes that are not a D-Bus message this reader accepts (one line: what and where)."""


# -- signatures ---------------------------------------------------------------------------
def _one_type(sig: str, at: int, depth: int = 0) -> int:
    """The end of the single complete type starting at `sig[at]`."""
    if depth > MAX_DEPTH or at >= len(sig):
        raise WireError(f"signature {sig!r}: incomplete or nested too deep")
    c = sig[at]
    if c == "a":
        return _one_type(sig, at + 1, depth + 1)
    if c == "(":
        if sig[at + 1:at + 2] == ")":
            raise WireError(f"signature {sig!r}: empty struct")
        at += 1
        while at < len(sig) and sig[at] != ")":
            at = _one_type(sig, at, depth + 1)
        if at >= len(sig):
            raise WireError(f"signature {sig!r}: unclosed struct")
        return at + 1
    if c not in _ALIGN or c == ")":
        raise WireError(f"signature {sig!r}: type {c!r} not supported")
    return at + 1


def split_signature(sig: str) -> list[str]:
    """The complete types of `sig` in order ("sba(sv)" -> ["s", "b", "a(sv)"])."""
    out, at = [], 0
    while at < len(sig):
        end = _one_type(sig, at)
        out.append(sig[at:end])
        at = end
    return out


def _seq(value: object, n: int | None = None) -> Sequence[object]:
    """`value` as the tuple or list a struct, variant or array needs (`n` items)."""
    if not isinstance(value, (tuple, list)) or (n is not None and len(value) != n):
        raise WireError(f"value {str(value)[:60]!r} does not fit its signature")
    return value


# -- writing ------------------------------------------------------------------------------
class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def pad(self, n: int) -> None:
        self.buf += b"\0" * (-len(self.buf) % n)

    def put(self, t: str, value: object) -> None:
        c = t[0]
        self.pad(_ALIGN[c])
        if c in "ybui":
            fmt = {"y": "<B", "b": "<I", "u": "<I", "i": "<i"}[c]
            self.buf += struct.pack(fmt, value)
        elif c in "so":
            data = str(value).encode()
            self.buf += struct.pack("<I", len(data)) + data + b"\0"
        elif c == "g":
            data = str(value).encode()
            self.buf += bytes((len(data),)) + data + b"\0"
        elif c == "v":
            inner, inner_value = _seq(value, 2)
            self.put("g", inner)
            self.put(str(inner), inner_value)
        elif c == "(":
            types = split_signature(t[1:-1])
            for item_t, item in zip(types, _seq(value, len(types))):
                self.put(item_t, item)
        else:  # "a"
            self.array(t[1:], _seq(value))

    def array(self, elem: str, items: Sequence[object]) -> None:
        at = len(self.buf)
        self.buf += b"\0\0\0\0"
        self.pad(_ALIGN[elem[0]])
        start = len(self.buf)
        for item in items:
            self.put(elem, item)
        struct.pack_into("<I", self.buf, at, len(self.buf) - start)


def build(kind: int, serial: int, fields: Sequence[tuple[int, tuple[str, object]]],
          signature: str = "", args: Sequence[object] = (), flags: int = 0) -> bytes:
    """One message: header `fields` as (code, (type, value)), the body `args` of
    `signature` (added as the SIGNATURE field when not empty)."""
    body = _Writer()
    for t, value in zip(split_signature(signature), args):
        body.put(t, value)
    all_fields = [*fields, (F_SIGNATURE, ("g", signature))] if signature else list(fields)
    head = _Writer()
    head.buf += struct.pack("<cBBBII", b"l", kind, flags, 1, len(body.buf), serial)
    head.array("(yv)", all_fields)
    head.pad(8)
    return bytes(head.buf + body.buf)


def method_call(serial: int, *, path: str, interface: str, member: str, destination: str,
                signature: str = "", args: Sequence[object] = ()) -> bytes:
    """One METHOD_CALL message."""
    return build(METHOD_CALL, serial, [
        (F_PATH, ("o", path)), (F_INTERFACE, ("s", interface)), (F_MEMBER, ("s", member)),
        (F_DESTINATION, ("s", destination))], signature, args)


def hello(serial: int) -> bytes:
    """The bus's Hello(), the first call on a message bus (not on systemd's private socket)."""
    return method_call(serial, path=BUS_PATH, interface=BUS, member="Hello", destination=BUS)


def set_unit_properties(serial: int, unit: str,
                        device_allow: Sequence[tuple[str, str]]) -> bytes:
    """SetUnitProperties(unit, runtime=true, [("DeviceAllow", [(path, access)...])]):
    appends to the unit's DeviceAllow= list until the unit goes (runtime: nothing on disk
    survives it)."""
    prop = ("DeviceAllow", ("a(ss)", list(device_allow)))
    return method_call(serial, path=SYSTEMD_PATH, interface=MANAGER,
                       member="SetUnitProperties", destination=SYSTEMD,
                       signature="sba(sv)", args=(unit, True, [prop]))


# -- reading ------------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes, at: int = 0) -> None:
        self.data, self.at = data, at

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise WireError(f"message truncated at byte {self.at} (wanted {n} more)")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def get(self, t: str, depth: int = 0) -> object:
        if depth > MAX_DEPTH:
            raise WireError("message nested too deep")
        c = t[0]
        self.take(-self.at % _ALIGN[c])
        if c in "ybui":
            fmt = {"y": "<B", "b": "<I", "u": "<I", "i": "<i"}[c]
            return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        if c in "sog":
            n = self.take(1)[0] if c == "g" else struct.unpack("<I", self.take(4))[0]
            text = self.take(n + 1)
            if text[-1:] != b"\0":
                raise WireError(f"string at byte {self.at - n - 1} is not NUL-terminated")
            return text[:-1].decode("utf-8", "replace")
        if c == "v":
            inner = str(self.get("g", depth + 1))
            if len(split_signature(inner)) != 1:
                raise WireError(f"variant signature {inner!r} is not one type")
            return (inner, self.get(inner, depth + 1))
        if c == "(":
            return tuple(self.get(x, depth + 1) for x in split_signature(t[1:-1]))
        n = struct.unpack("<I", self.take(4))[0]
        if n > len(self.data) - self.at:
            raise WireError(f"array of {n} bytes at byte {self.at} runs past the message")
        self.take(-self.at % _ALIGN[t[1]])
        end, items = self.at + n, []
        while self.at < end:
            items.append(self.get(t[1:], depth + 1))
        return items


class Message:
    """A message received: type, serial, header fields, and the body's values (as far as the
    signature is one this reader knows)."""

    __slots__ = ("body", "fields", "kind", "serial")

    def __init__(self, kind: int, serial: int, fields: dict[int, object],
                 body: list[object]) -> None:
        self.kind, self.serial, self.fields, self.body = kind, serial, fields, body

    @property
    def reply_serial(self) -> int | None:
        value = self.fields.get(F_REPLY_SERIAL)
        return value if isinstance(value, int) else None

    def error_text(self) -> str:
        """`<error name>: <message>` of an ERROR (the name alone when the body has no
        string), shortened to one line."""
        name = str(self.fields.get(F_ERROR_NAME, "unknown error"))
        first = self.body[0] if self.body and isinstance(self.body[0], str) else ""
        text = f"{name}: {first}" if first else name
        return " ".join(text.split())[:300]


def message_size(data: bytes) -> int | None:
    """The size of the message at the start of `data` (None: its fixed header is not there
    yet). Refuses a message larger than MAX_MESSAGE or not little/big-endian v1."""
    if len(data) < 16:
        return None
    if data[0:1] not in (b"l", b"B") or data[3] != 1:
        raise WireError(f"not a D-Bus v1 message (first bytes {data[:4]!r})")
    order = "<" if data[0:1] == b"l" else ">"
    body_len, _serial, fields_len = struct.unpack(order + "III", data[4:16])
    size = int(16 + fields_len + (-(16 + fields_len) % 8) + body_len)
    if size > MAX_MESSAGE:
        raise WireError(f"message of {size} bytes is over the {MAX_MESSAGE}-byte limit")
    return size


def parse_message(data: bytes) -> Message:
    """One complete message (`data` is exactly `message_size(data)` bytes)."""
    if data[0:1] == b"B":
        raise WireError("big-endian messages are not supported")
    kind, _flags, _version, body_len, serial = struct.unpack("<xBBBII", data[:12])
    reader = _Reader(data, 12)
    fields: dict[int, object] = {}
    for item in _seq(reader.get("a(yv)")):
        code, variant = _seq(item, 2)
        sig, value = _seq(variant, 2)
        if isinstance(code, int) and FIELD_TYPES.get(code, sig) == sig:
            fields[code] = value  # a known field of another type is dropped
    reader.take(-reader.at % 8)
    body_start = reader.at
    body: list[object] = []
    sig = fields.get(F_SIGNATURE, "")
    try:
        for t in split_signature(str(sig)):
            body.append(reader.get(t))
    except WireError:
        pass  # a body this reader does not know: what it read before is kept
    if body_start + body_len != len(data):
        raise WireError(f"message length {len(data)} does not match its header")
    return Message(kind, serial, fields, body)


# -- SASL ---------------------------------------------------------------------------------
def auth_external(uid: int) -> bytes:
    """The NUL byte and `AUTH EXTERNAL <uid in hex ASCII>` (the kernel vouches for the uid
    through SO_PEERCRED)."""
    return b"\0AUTH EXTERNAL " + str(uid).encode().hex().encode() + b"\r\n"


def auth_ok(line: bytes) -> bool:
    """Whether the server's reply line accepts the authentication (`OK <guid>`)."""
    return line.startswith(b"OK ") or line.rstrip(b"\r\n") == b"OK"
