"""Registering device rules with systemd (nvmount.systemd): the D-Bus marshalling (pure), the
one-call client against servers written here (a fake systemd on a socket: answers, errors,
silence, garbage), and against a real `dbus-daemon` the test starts, where a fake
org.freedesktop.systemd1 receives our SetUnitProperties and `busctl`'s and finds their bodies
byte for byte equal (an independent marshaller), and the daemon itself validates every
message we send. The real systemd: tests/e2e/test_systemd_reload.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvmount.cgroup.common import systemd_scope
from nvmount.errors import SystemdError
from nvmount.plan.types import DeviceRule
from nvmount.systemd import register, wire

RULES = (DeviceRule(195, 0, "rw"), DeviceRule(195, 255, "rw"), DeviceRule(195, 0, "rw"),
         DeviceRule(506, 1, "rw"))
ENTRIES = [("/dev/char/195:0", "rw"), ("/dev/char/195:255", "rw"), ("/dev/char/506:1", "rw")]


# -- pure ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "unit"), [
    ("/sys/fs/cgroup/system.slice/docker-0123abcd.scope", "docker-0123abcd.scope"),
    ("/sys/fs/cgroup/devices/system.slice/docker-0123abcd.scope", "docker-0123abcd.scope"),
    ("/sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope",
     "cri-containerd-ab.scope"),
    ("/sys/fs/cgroup/machine.slice/libpod-ab.scope/container", "libpod-ab.scope"),  # crun
    ("/sys/fs/cgroup/devices/docker/0123abcd", None),  # cgroupfs drivers
    ("/sys/fs/cgroup/kubepods/besteffort/pod1/ab", None),
    ("/sys/fs/cgroup/default/ctr", None),
    ("/sys/fs/cgroup/a.scope/b/c", None),  # deeper than crun's subgroup
    ("/sys/fs/cgroup/system.slice/x y.scope", None),  # not a unit name
    ("/sys/fs/cgroup/system.slice/.scope", None),
], ids=["v2", "v1", "kubernetes", "crun-subgroup", "docker-cgroupfs", "k8s-cgroupfs",
        "containerd-cgroupfs", "too-deep", "bad-name", "empty-name"])
def test_systemd_scope_from_the_cgroup_path(path: str, unit: str | None) -> None:
    assert systemd_scope(path) == unit


def test_device_allow_entries_in_order_without_repeats() -> None:
    assert register.device_allow(RULES) == ENTRIES


def test_set_unit_properties_reads_back() -> None:
    data = wire.set_unit_properties(7, "docker-ab.scope", ENTRIES)
    assert wire.message_size(data[:16]) == len(data)
    msg = wire.parse_message(data)
    assert (msg.kind, msg.serial) == (wire.METHOD_CALL, 7)
    assert msg.fields[wire.F_MEMBER] == "SetUnitProperties"
    assert msg.fields[wire.F_DESTINATION] == "org.freedesktop.systemd1"
    assert msg.fields[wire.F_SIGNATURE] == "sba(sv)"
    assert msg.body == ["docker-ab.scope", 1, [("DeviceAllow", ("a(ss)", ENTRIES))]]


def test_signatures() -> None:
    assert wire.split_signature("sba(sv)") == ["s", "b", "a(sv)"]
    assert wire.split_signature("a(yv)u") == ["a(yv)", "u"]
    for bad in ("(s", "a", "h", "x", ")", "a" * 40 + "s", "a()"):
        with pytest.raises(wire.WireError):
            wire.split_signature(bad)


def _error(serial: int, reply_to: int, name: str, text: str) -> bytes:
    return wire.build(wire.ERROR, serial, [(wire.F_REPLY_SERIAL, ("u", reply_to)),
                                           (wire.F_ERROR_NAME, ("s", name))], "s", [text])


def test_error_text_is_one_bounded_line() -> None:
    msg = wire.parse_message(_error(3, 2, "org.freedesktop.systemd1.NoSuchUnit",
                                    "Unit x.scope\nnot loaded." + "y" * 500))
    assert msg.reply_serial == 2
    text = msg.error_text()
    assert text.startswith("org.freedesktop.systemd1.NoSuchUnit: Unit x.scope not loaded.")
    assert len(text) == 300 and "\n" not in text


@pytest.mark.parametrize("mangle", [
    lambda m: m[:40],  # truncated
    lambda m: m[:12] + struct.pack("<I", 10**6) + m[16:],  # header array past the end
    lambda m: b"X" + m[1:],  # not a message
    lambda m: m[:4] + struct.pack("<I", 1 << 30) + m[8:],  # body over the limit
], ids=["truncated", "array-past-end", "bad-endian", "huge-body"])
def test_hostile_bytes_are_refused(mangle: Callable[[bytes], bytes]) -> None:
    data = mangle(_error(3, 2, "org.example.E", "text"))
    with pytest.raises(wire.WireError):
        size = wire.message_size(data[:16])
        assert size is not None
        wire.parse_message(data[:size] if len(data) >= size else data)


def test_sasl_lines() -> None:
    assert wire.auth_external(0) == b"\0AUTH EXTERNAL 30\r\n"
    assert wire.auth_external(1000) == b"\0AUTH EXTERNAL 31303030\r\n"
    assert wire.auth_ok(b"OK 0123456789abcdef")
    assert not wire.auth_ok(b"REJECTED EXTERNAL")


# -- a fake systemd on a socket -------------------------------------------------------------
class FakeSystemd:
    """One-connection-at-a-time server in a thread of the test (the hook has none): answers
    SASL with `auth` and each method call with `answer(call)` (bytes, or None for silence)."""

    def __init__(self, directory: Path, answer: Callable[[wire.Message], bytes | None],
                 auth: bytes = b"OK 0123456789abcdef0123456789abcdef\r\n") -> None:
        self.path = directory / "private"
        self.answer, self.auth = answer, auth
        self.calls: list[wire.Message] = []
        self.stop = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def where(self) -> tuple[tuple[str, str, bool], ...]:
        return ((str(self.path.parent), self.path.name, False),)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                self._one(conn)

    def _one(self, conn: socket.socket) -> None:
        buf = b""
        while b"BEGIN\r\n" not in buf:
            chunk = conn.recv(4096)
            if not chunk:
                return
            if b"\r\n" not in buf and b"\r\n" in buf + chunk:
                conn.sendall(self.auth)
            buf += chunk
        buf = buf.split(b"BEGIN\r\n", 1)[1]
        while True:
            size = wire.message_size(buf[:16])
            while size is None or len(buf) < size:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
                size = wire.message_size(buf[:16])
            msg = wire.parse_message(buf[:size])
            buf = buf[size:]
            self.calls.append(msg)
            reply = self.answer(msg)
            if reply is None:
                self.stop.wait(5)
                return
            conn.sendall(reply)

    def close(self) -> None:
        self.stop.set()
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self.listener.close()
        self.thread.join(timeout=10)


def _return(msg: wire.Message) -> bytes:
    signal = wire.build(wire.SIGNAL, 90, [(wire.F_PATH, ("o", "/x")),
                                          (wire.F_INTERFACE, ("s", "x.y")),
                                          (wire.F_MEMBER, ("s", "Z"))], "s", ["noise"])
    return signal + wire.build(wire.METHOD_RETURN, 91,
                               [(wire.F_REPLY_SERIAL, ("u", msg.serial))])


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Callable[..., FakeSystemd]]:
    made: list[FakeSystemd] = []

    def make(answer: Callable[[wire.Message], bytes | None],
             **kw: bytes) -> FakeSystemd:
        directory = tmp_path / f"run{len(made)}"
        directory.mkdir(mode=0o755)
        made.append(FakeSystemd(directory, answer, **kw))
        return made[-1]

    yield make
    for server in made:
        server.close()


def test_register_sends_one_call_and_reads_the_reply(
        fake: Callable[..., FakeSystemd]) -> None:
    server = fake(_return)
    done = register.register("docker-ab.scope", RULES, 2.0, server.where)
    assert done == "systemd unit docker-ab.scope: DeviceAllow= 3 devices"
    (call,) = server.calls  # private socket: no Hello
    assert call.body == ["docker-ab.scope", 1, [("DeviceAllow", ("a(ss)", ENTRIES))]]


def test_an_error_reply_is_one_line(fake: Callable[..., FakeSystemd]) -> None:
    server = fake(lambda m: _error(5, m.serial, "org.freedesktop.systemd1.NoSuchUnit",
                                   "Unit docker-ab.scope not loaded."))
    with pytest.raises(SystemdError, match=r"^register 3 devices with systemd unit "
                       r"docker-ab.scope: org.freedesktop.systemd1.NoSuchUnit: Unit "
                       r"docker-ab.scope not loaded.$"):
        register.register("docker-ab.scope", RULES, 2.0, server.where)


def test_a_bus_without_systemd_passes_the_call_on(fake: Callable[..., FakeSystemd]) -> None:
    """A bus daemon that answers ServiceUnknown (systemd not on it) is not the end: the call
    goes to the next socket (systemd's private one) within the same deadline."""
    bus = fake(lambda m: _error(9, m.serial, "org.freedesktop.DBus.Error.ServiceUnknown",
                                "The name is not activatable"))
    private = fake(_return)
    where = ((str(bus.path.parent), bus.path.name, True), *private.where)
    assert register.register("docker-ab.scope", RULES, 2.0, where).endswith("3 devices")
    assert [m.fields[wire.F_MEMBER] for m in bus.calls] == ["Hello", "SetUnitProperties"]
    assert len(private.calls) == 1
    with pytest.raises(SystemdError, match=r"ServiceUnknown: The name is not activatable$"):
        register.register("docker-ab.scope", RULES, 2.0, where[:1])


def test_a_silent_systemd_costs_the_timeout_only(fake: Callable[..., FakeSystemd]) -> None:
    server = fake(lambda m: None)
    start = time.monotonic()
    with pytest.raises(SystemdError, match="timed out"):
        register.register("docker-ab.scope", RULES, 0.3, server.where)
    assert time.monotonic() - start < 1.5


@pytest.mark.parametrize(("answer", "auth", "cause"), [
    (_return, b"REJECTED EXTERNAL\r\n", "authentication refused"),
    (lambda m: b"garbage!" * 4, None, "not a D-Bus v1 message"),
    (lambda m: b"", None, "timed out"),  # an answer that never ends
], ids=["auth-refused", "garbage", "nothing"])
def test_a_broken_server_is_one_error(fake: Callable[..., FakeSystemd],
                                      answer: Callable[[wire.Message], bytes],
                                      auth: bytes | None, cause: str) -> None:
    server = fake(answer, **({"auth": auth} if auth else {}))
    with pytest.raises(SystemdError, match=cause):
        register.register("docker-ab.scope", RULES, 0.5, server.where)


def test_no_socket_and_untrusted_sockets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemdError, match=r"call systemd: .*/private: no such file"):
        register.register("docker-ab.scope", RULES, 0.5, ((str(tmp_path), "private", False),))
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)  # a directory anyone can write: a user could put a socket there
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(open_dir / "private"))
        with pytest.raises(SystemdError, match="writable"):
            register.register("docker-ab.scope", RULES, 0.5, ((str(open_dir), "private",
                                                               False),))


# -- a real dbus-daemon -------------------------------------------------------------------
BUS_CONF = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={path}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/>
  </policy>
</busconfig>
"""


def _service(address: str, got: list[bytes], ready: threading.Event) -> None:
    """org.freedesktop.systemd1 on the test's bus: records each call's body, returns ()."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(address)
    sock.sendall(wire.auth_external(os.geteuid()))
    assert sock.recv(4096).startswith(b"OK ")
    sock.sendall(b"BEGIN\r\n" + wire.hello(1) + wire.method_call(
        2, path=wire.BUS_PATH, interface=wire.BUS, member="RequestName",
        destination=wire.BUS, signature="su", args=("org.freedesktop.systemd1", 4)))
    buf = b""
    while True:
        size = wire.message_size(buf[:16])
        while size is None or len(buf) < size:
            chunk = sock.recv(65536)
            if not chunk:
                return
            buf += chunk
            size = wire.message_size(buf[:16])
        msg, raw, buf = wire.parse_message(buf[:size]), buf[:size], buf[size:]
        if msg.reply_serial == 2:
            ready.set()
        if msg.kind == wire.METHOD_CALL and msg.fields.get(wire.F_MEMBER) == "SetUnitProperties":
            got.append(raw[len(raw) - struct.unpack("<I", raw[4:8])[0]:])
            sock.sendall(wire.build(wire.METHOD_RETURN, 100 + len(got), [
                (wire.F_REPLY_SERIAL, ("u", msg.serial)),
                (wire.F_DESTINATION, ("s", str(msg.fields[wire.F_SENDER])))]))


@pytest.mark.root
def test_a_real_bus_accepts_our_call_and_busctl_marshals_the_same_body(tmp_path: Path) -> None:
    daemon = shutil.which("dbus-daemon")
    busctl = shutil.which("busctl")
    if daemon is None or busctl is None:
        pytest.skip("needs dbus-daemon and busctl (apt-get install dbus systemd)")
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    conf = tmp_path / "bus.conf"
    conf.write_text(BUS_CONF.format(path=run / "bus"))
    proc = subprocess.Popen([daemon, f"--config-file={conf}", "--nofork", "--nopidfile",
                             "--nosyslog"], stdin=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if (run / "bus").exists():
                break
            time.sleep(0.05)
        got: list[bytes] = []
        ready = threading.Event()
        service = threading.Thread(target=_service, args=(str(run / "bus"), got, ready),
                                   daemon=True)
        service.start()
        assert ready.wait(10)
        where = ((str(run), "bus", True),)
        done = register.register("docker-ab.scope", RULES, 5.0, where)
        assert done.endswith("3 devices")
        args = ["docker-ab.scope", "true", "1", "DeviceAllow", "a(ss)", "3"]
        for path, access in ENTRIES:
            args += [path, access]
        out = subprocess.run([busctl, f"--address=unix:path={run / 'bus'}", "call",
                              "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                              "org.freedesktop.systemd1.Manager", "SetUnitProperties",
                              "sba(sv)", *args], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert len(got) == 2 and got[0] == got[1]  # ours, then busctl's
        with pytest.raises(SystemdError, match=r"ServiceUnknown|NameHasNoOwner"):
            _call_absent(where)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _call_absent(where: tuple[tuple[str, str, bool], ...]) -> None:
    """A call to a name nobody owns: the daemon's own error reply, read as one line."""
    from nvmount.systemd import bus

    reply = bus.call(lambda serial: wire.method_call(
        serial, path="/x", interface="org.example.X", member="Y",
        destination="org.example.Nobody"), 5.0, where)
    assert reply.kind == wire.ERROR
    raise SystemdError(reply.error_text())


# -- the engine's decision ----------------------------------------------------------------
class _Handle:
    def __init__(self, path: str | None, in_userns: bool = False) -> None:
        from nvmount.container.cgroup import CgroupTarget

        self.cgroup = None if path is None else CgroupTarget(2, path)
        self.in_userns = in_userns


class _Plan:
    def __init__(self, rules: tuple[DeviceRule, ...]) -> None:
        self.device_rules = rules


class _Options:
    def __init__(self, no_cgroups: bool = False) -> None:
        self.no_cgroups = no_cgroups


SCOPE = "/sys/fs/cgroup/system.slice/docker-ab.scope"


@pytest.mark.parametrize(("handle", "rules", "no_cgroups", "unit"), [
    (_Handle(SCOPE), RULES, False, "docker-ab.scope"),
    (_Handle("/sys/fs/cgroup/devices/docker/ab"), RULES, False, None),  # cgroupfs
    (_Handle(None), RULES, False, None),  # root cgroups only
    (_Handle(SCOPE), (), False, None),  # no rules
    (_Handle(SCOPE), RULES, True, None),  # no-cgroups = true
    (_Handle(SCOPE, in_userns=True), RULES, False, None),  # rootless
], ids=["scope", "cgroupfs", "no-cgroup", "no-rules", "no-cgroups", "userns"])
def test_which_starts_register(handle: _Handle, rules: tuple[DeviceRule, ...],
                               no_cgroups: bool, unit: str | None) -> None:
    """The engine asks systemd only for a scope's container with rules it wrote itself."""
    from nvmount.effects import Run

    run = Run.__new__(Run)
    run.handle, run.plan = handle, _Plan(rules)  # type: ignore[assignment]
    run.options = _Options(no_cgroups)  # type: ignore[assignment]
    assert run._systemd_unit() == unit
