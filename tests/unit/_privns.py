"""Test helpers: run a function in a forked child with a private mount namespace.

`in_private_ns(fn, *args)` forks; the child unshares CLONE_NEWNS, makes / rprivate (so
nothing it mounts reaches the host), runs `fn` under an alarm and sends back its result or
exception (pickled). `sleeper(...)` starts a `sleep` process, optionally in its own mount
(and user) namespace, to serve as a container init; it is killed and reaped on exit.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


class ChildFailed(Exception):
    """The child died without reporting (signal, alarm, unpicklable result)."""


def _child(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], w: int,
           timeout: int) -> None:
    from nvmount import _libc

    try:
        signal.alarm(timeout)
        libc = _libc.Libc()
        libc.unshare(_libc.CLONE_NEWNS)
        libc.mount(None, "/", None, _libc.MS_REC | _libc.MS_PRIVATE)
        outcome: tuple[str, Any] = ("ok", fn(*args, **kwargs))
    except BaseException as err:
        outcome = ("err", err)
    try:
        data = pickle.dumps(outcome)
    except Exception as err:
        data = pickle.dumps(("err", ChildFailed(f"unpicklable outcome: {err!r}: {outcome!r}")))
    view = memoryview(data)
    while view:
        view = view[os.write(w, view):]


def in_private_ns(fn: Callable[..., T], *args: Any, timeout: int = 30, **kwargs: Any) -> T:
    """Run fn(*args, **kwargs) in a forked child in a private mount namespace."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespaces)")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 0
        try:
            os.close(r)
            _child(fn, args, kwargs, w, timeout)
        except BaseException:
            code = 3
        os._exit(code)
    os.close(w)
    chunks = []
    with os.fdopen(r, "rb") as f:
        chunks.append(f.read())
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if not data:
        raise ChildFailed(f"child ended without a result (wait status {status:#x})")
    kind, value = pickle.loads(data)
    if kind == "err":
        raise value
    return value  # type: ignore[no-any-return]


@contextmanager
def sleeper(*unshare_args: str, prefix: tuple[str, ...] = ()) -> Iterator[int]:
    """Pid of a `sleep 60`, run through `unshare <args>` when args are given (and through
    the `prefix` command, e.g. setpriv); killed after."""
    argv = ["unshare", *unshare_args, "sleep", "60"] if unshare_args else ["sleep", "60"]
    argv = [*prefix, *argv]
    proc = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 5
        # unshare execs sleep after entering the namespaces: wait until that happened
        while time.monotonic() < deadline:
            try:
                if os.readlink(f"/proc/{proc.pid}/exe").endswith("/sleep"):
                    break
            except OSError:
                pass
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
