"""Supervising the ldconfig sandbox from the hook: its pipes drained (bounded), a wall-clock
deadline, the kill. Stage: ldcache; runs in the hook process (no threads: poll(2) on a pidfd
and the two pipes). Used by `nvmount.ldcache.ldconfig.run_ldconfig`.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time

from nvmount.records import mutable_record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc

MAX_OUTPUT = 64 * 1024  # bytes of ldconfig output kept; the rest is drained and dropped


@mutable_record
class Supervised:
    """What the supervisor saw of the sandbox: exit, timeout, output, status."""

    wait_status: int | None = None
    timed_out: bool = False
    output: bytes = b""
    status: bytes = b""


def supervise(pid: int, out_r: int, status_r: int, deadline: float, libc: Libc) -> Supervised:
    """Wait for the sandbox, draining its pipes, killing it at `deadline` (no threads)."""
    sup = Supervised()
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        open_fds = {out_r, status_r, pidfd}
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        while open_fds:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and pidfd in open_fds and not sup.timed_out:
                _drain(status_r, sup, False)  # the worker's pid, if not read yet
                _kill(sup, pidfd, libc)
                sup.timed_out = True
                deadline = time.monotonic() + 1.0  # grace to collect what is left
                continue
            if remaining <= 0:
                break  # pipes held open past the grace time: give up on them
            for fd, _ in poller.poll(remaining * 1000):
                if fd == pidfd:
                    _, sup.wait_status = os.waitpid(pid, 0)
                elif _drain(fd, sup, fd == out_r):
                    continue
                poller.unregister(fd)
                open_fds.discard(fd)
    finally:
        if sup.wait_status is None:  # interrupted: never leave it running
            _kill(sup, pidfd, libc)
            _, sup.wait_status = os.waitpid(pid, 0)
        os.close(pidfd)
    return sup


def _kill(sup: Supervised, pidfd: int, libc: Libc) -> None:
    """Kill the worker (its pid is reserved while the unreaped keeper lives), then the keeper."""
    for line in sup.status.decode("utf-8", "replace").splitlines():
        kind, _, text = line.partition("\t")
        if kind == "pid" and text.isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(text), signal.SIGKILL)  # pid 1 of its namespace: all of it dies
    with contextlib.suppress(ProcessLookupError):
        libc.pidfd_send_signal(pidfd, signal.SIGKILL)


def _drain(fd: int, sup: Supervised, is_output: bool) -> bool:
    """Read what the non-blocking `fd` has (bounded); False at EOF."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return True
    if not data:
        return False
    if is_output:
        sup.output += data[: max(0, MAX_OUTPUT - len(sup.output))]
    else:
        sup.status += data[: max(0, MAX_OUTPUT - len(sup.status))]
    return True
