"""A D-Bus connection to systemd for one method call (effects: a socket, bounded in time).

Stage: cgroup (systemd registration). `call` connects to the system bus
(`/run/dbus/system_bus_socket`, with Hello) or else systemd's private socket
(`/run/systemd/private`, what `systemctl` uses as root: systemd itself answers, no bus
daemon, no Hello),
authenticates with SASL EXTERNAL, sends one method call and returns its reply. The socket's
directory passes the trusted-path rule (`nvmount.fs.trusted`: root's alone up from /) and
the socket must be root's; it is reached through that directory's fd
(`/proc/self/fd/N/NAME`), never by a path a user could redirect. One deadline bounds the
whole exchange (connect, auth, reply); at most MAX_READ bytes are read. No thread: a
blocking socket with a timeout per operation.
"""

from __future__ import annotations

import _socket  # the C module: socket.py imports enum and selectors (~15 ms at the hook's start)
import os
import time

from nvmount.errors import NvmountError, SystemdError
from nvmount.systemd import wire

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable

PRIVATE = ("/run/systemd", "private")
SYSTEM_BUS = ("/run/dbus", "system_bus_socket")
MAX_READ = 1 << 18
MAX_MESSAGES = 64  # signals a bus may send before our reply (NameAcquired, ...)
BUS_ERRORS = ("org.freedesktop.DBus.Error.ServiceUnknown",
              "org.freedesktop.DBus.Error.NameHasNoOwner",
              "org.freedesktop.DBus.Error.AccessDenied")  # the daemon's, not systemd's


def sockets(euid: int) -> tuple[tuple[str, str, bool], ...]:
    """(directory, name, needs Hello) to try in order: the system bus first (systemd serves
    it on a connection it already has: 2.1 ms a call, measured with systemd 262 and
    dbus-daemon on a loaded 2-CPU VM), then systemd's private socket (there on every systemd
    host, also without a bus daemon; 3.8 ms: systemd sets up its API on each new private
    connection), which answers only root."""
    bus = (SYSTEM_BUS[0], SYSTEM_BUS[1], True)
    return (bus, (PRIVATE[0], PRIVATE[1], False)) if euid == 0 else (bus,)


def call(build: Callable[[int], bytes], timeout: float,
         where: tuple[tuple[str, str, bool], ...] | None = None) -> wire.Message:
    """Send the message `build(serial)` and return the reply (METHOD_RETURN or ERROR).
    A socket that cannot be reached, fails the exchange, or whose bus daemon refuses the call
    (an org.freedesktop.DBus.Error from a bus: systemd not on it, a policy) passes the call to
    the next one, within the one deadline; SystemdError (one line) when none answered."""
    deadline = time.monotonic() + timeout
    failures = []
    for directory, name, needs_hello in where or sockets(os.geteuid()):
        path = f"{directory}/{name}"
        try:
            sock = _connect(directory, name, deadline)
        except (OSError, NvmountError) as err:  # TrustError: the directory is not root's alone
            failures.append(f"{path}: {_why(err)}")
            continue
        try:
            reply = _exchange(sock, build, needs_hello, deadline)
        except (OSError, wire.WireError) as err:
            failures.append(f"{path}: {_why(err)}")
            continue
        finally:
            sock.close()
        if needs_hello and reply.kind == wire.ERROR and str(
                reply.fields.get(wire.F_ERROR_NAME, "")).startswith(BUS_ERRORS):
            failures.append(f"{path}: {reply.error_text()}")
            continue
        return reply
    raise SystemdError("call systemd: " + "; ".join(failures))


def _why(err: BaseException) -> str:
    if isinstance(err, _socket.timeout):
        return "timed out"
    if isinstance(err, OSError) and err.errno:
        return os.strerror(err.errno).lower()
    return str(err)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _socket.timeout("timed out")
    return left


def _connect(directory: str, name: str, deadline: float) -> _socket.socket:
    from nvmount.fs import trusted

    dfd = trusted.open_dir(directory, "systemd's socket directory")
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if st.st_mode & 0o170000 != 0o140000 or st.st_uid != 0:  # S_ISSOCK, without `stat`
            raise SystemdError(f"{directory}/{name} is not a socket of root's")
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(f"/proc/self/fd/{dfd}/{name}")
        except BaseException:
            sock.close()
            raise
        return sock
    finally:
        os.close(dfd)


def _exchange(sock: _socket.socket, build: Callable[[int], bytes], needs_hello: bool,
              deadline: float) -> wire.Message:
    sock.settimeout(_left(deadline))
    sock.sendall(wire.auth_external(os.geteuid()))
    buf = bytearray()
    while b"\r\n" not in buf:
        buf += _recv(sock, deadline, len(buf))
        if len(buf) > 512:
            raise wire.WireError("authentication reply longer than 512 bytes")
    line, _, rest = bytes(buf).partition(b"\r\n")
    if not wire.auth_ok(line):
        raise wire.WireError(f"authentication refused: {line[:80].decode('ascii', 'replace')}")
    serial = 2 if needs_hello else 1
    out = b"BEGIN\r\n" + (wire.hello(1) if needs_hello else b"") + build(serial)
    sock.settimeout(_left(deadline))
    sock.sendall(out)
    return _reply(sock, bytearray(rest), serial, deadline)


def _reply(sock: _socket.socket, buf: bytearray, serial: int,
           deadline: float) -> wire.Message:
    total = len(buf)
    for _ in range(MAX_MESSAGES):
        while True:
            size = wire.message_size(bytes(buf[:16]))
            if size is not None and len(buf) >= size:
                break
            chunk = _recv(sock, deadline, total)
            total += len(chunk)
            buf += chunk
        message = wire.parse_message(bytes(buf[:size]))
        del buf[:size]
        if message.kind in (wire.METHOD_RETURN, wire.ERROR) and \
                message.reply_serial == serial:
            return message
    raise wire.WireError(f"no reply among the first {MAX_MESSAGES} messages")


def _recv(sock: _socket.socket, deadline: float, total: int) -> bytes:
    if total > MAX_READ:
        raise wire.WireError(f"more than {MAX_READ} bytes without a reply")
    sock.settimeout(_left(deadline))
    chunk = sock.recv(65536)
    if not chunk:
        raise wire.WireError("connection closed before the reply")
    return chunk
