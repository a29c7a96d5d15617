"""nvmount.apply.namespace: enter a real mount namespace and always come back."""

from __future__ import annotations

import os
import threading

import pytest

from nvmount._libc import Libc
from nvmount.apply.namespace import entered, same_namespace, thread_count
from nvmount.errors import ContainerError
from tests.fixtures.privns import in_private_ns, sleeper

pytestmark = pytest.mark.root


def _ino(path: str = "/proc/self/ns/mnt") -> int:
    return os.stat(path).st_ino


def _enter_and_leave(pid: int, fail: bool) -> dict[str, object]:
    libc = Libc()
    own, target = _ino(), _ino(f"/proc/{pid}/ns/mnt")
    os.chdir("/tmp")
    ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    out: dict[str, object] = {"fds_before": len(os.listdir("/proc/self/fd"))}
    try:
        with entered(ns, libc):
            out["inside"] = _ino() == target
            if fail:
                raise RuntimeError("boom")
    except RuntimeError as err:
        out["raised"] = str(err)
    os.close(ns)
    out["back"] = _ino() == own
    out["cwd"] = os.getcwd()
    out["fds_after"] = len(os.listdir("/proc/self/fd")) + 1  # ns was open before
    return out


@pytest.mark.parametrize("fail", [False, True], ids=["normal-exit", "exception"])
def test_entered_always_returns(fail: bool) -> None:
    with sleeper("-m", "--propagation", "private") as pid:
        out = in_private_ns(_enter_and_leave, pid, fail)
    assert out["inside"] is True
    assert out["back"] is True
    assert out["cwd"] == "/tmp"
    assert out["fds_before"] == out["fds_after"]
    assert out.get("raised") == ("boom" if fail else None)


def _with_thread(pid: int) -> str:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with entered(ns, Libc()):
            return "entered"
    except ContainerError as err:
        return str(err)
    finally:
        stop.set()
        t.join()
        os.close(ns)


def test_threads_are_refused() -> None:
    with sleeper("-m") as pid:
        msg = in_private_ns(_with_thread, pid)
    assert "the process has 2 threads" in msg and "single-threaded" in msg


def test_setns_failure_is_a_container_error() -> None:
    fd = os.open("/", os.O_RDONLY | os.O_CLOEXEC)  # not a namespace
    try:
        with pytest.raises(ContainerError, match="enter mount namespace: setns failed"), \
                entered(fd, Libc()):
            pass
    finally:
        os.close(fd)
    assert thread_count() >= 1


def test_same_namespace() -> None:
    with sleeper("-m") as pid:
        a = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        b = os.open(f"/proc/{os.getpid()}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        c = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            assert same_namespace(a, b)
            assert not same_namespace(a, c)
        finally:
            for fd in (a, b, c):
                os.close(fd)
