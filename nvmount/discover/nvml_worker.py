"""Driver discovery stage: run the NVML queries in a short-lived, unprivileged child.

Why a child (libnvc-spec §8 does the same with its RPC process):
- the hook must stay single-threaded for setns; a real libnvidia-ml may start threads and
  keeps driver code mapped, so it is never loaded into the hook process itself;
- NVML runs unprivileged: the child drops every capability and sets no_new_privs first;
- a driver without persistence mode can take seconds per GPU on first open: the child is
  bounded by a timeout and killed, with a message that says what to do.

The child answers with one JSON document on a pipe; the parent rebuilds the records.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import select
import signal
import time

from nvmount.errors import DriverError, NvmlError
from nvmount.log import WARNING, Sink, get_logger, install
from nvmount.records import asdict

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import Any

log = get_logger(__name__)

DEFAULT_TIMEOUT = 30.0
_MAX_ANSWER = 16 << 20
_PR_SET_PDEATHSIG = 1


def query_nvml(path: str, *, timeout: float = DEFAULT_TIMEOUT) -> tuple[str, str, tuple[Any, ...]]:
    """(driver version, CUDA version, devices) from the NVML library at absolute `path`."""
    # Imported before the fork so that the child finds them loaded: importing them in the
    # child, where every page it touches gets copied, takes ~4 ms longer (8-GPU simulated
    # driver), and `_decode` needs the records here anyway. Loading libnvidia-ml stays in the
    # child: nothing in these modules loads it at import time.
    from nvmount.discover import _nvml  # noqa: F401

    rfd, wfd = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, reported through the pipe
        os.close(rfd)
        faulthandler.disable()  # a crash inside the library is reported by the parent
        _child(path, wfd)
    os.close(wfd)
    try:
        data = _read_answer(rfd, pid, timeout)
    finally:
        os.close(rfd)
        _reap(pid)
    return _decode(data, path)


def _child(path: str, wfd: int) -> None:  # pragma: no cover - child process
    code = 0
    try:
        answer = _run_queries(path)
    except _Failed as failed:
        answer = failed.answer
    except NvmlError as err:
        answer = {"nvml_error": [err.function, err.code, err.text]}
    except DriverError as err:
        answer = {"driver_error": str(err)}
    except BaseException as err:  # everything must reach the parent
        answer = {"driver_error": f"query nvml {path}: {type(err).__name__}: {err}"}
        code = 1
    try:
        os.write(wfd, json.dumps(answer).encode())
    finally:
        os._exit(code)


class _Collect(Sink):
    """Keeps the child's warnings so the parent can log them under the same logger."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        super().__init__(WARNING)
        self.records: list[list[str]] = []

    def threshold(self) -> int:
        return WARNING

    def emit(self, level: int, name: str, message: str) -> None:
        self.records.append([name, message])


def _run_queries(path: str) -> dict[str, Any]:  # pragma: no cover - child process
    collect = _Collect()
    install(collect)
    _unprivileged()
    from nvmount.discover._nvml import open_nvml

    try:
        with open_nvml(path) as session:
            devices = [asdict(d) for d in session.devices()]
            return {"driver": session.driver_version(), "cuda": session.cuda_version(),
                    "devices": devices, "warnings": collect.records}
    except NvmlError as err:
        raise _Failed({"nvml_error": [err.function, err.code, err.text],
                       "warnings": collect.records}) from err


class _Failed(Exception):
    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer)
        self.answer = answer


def _unprivileged() -> None:  # pragma: no cover - child process
    """Die with the parent; no capabilities, no_new_privs (a no-op when not root)."""
    from nvmount.privileges import drop_for_exec

    try:
        import _prctl  # type: ignore[import-not-found]

        _prctl.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (ImportError, OSError):
        pass
    drop_for_exec(os.getuid(), os.getgid())


def _read_answer(rfd: int, pid: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    poller = select.poll()
    poller.register(rfd, select.POLLIN | select.POLLHUP)
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(max(1, int(left * 1000))):
            os.kill(pid, signal.SIGKILL)
            raise DriverError(
                f"query nvml: no answer within {timeout:g} s (a GPU without persistence mode "
                f"can take seconds to open: start nvidia-persistenced on the host, or raise "
                f"[nvhook] nvml-timeout)")
        chunk = os.read(rfd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > _MAX_ANSWER:
            os.kill(pid, signal.SIGKILL)
            raise DriverError("query nvml: answer too large")
        chunks.append(chunk)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _decode(data: bytes, path: str) -> tuple[str, str, tuple[Any, ...]]:
    from nvmount.discover._nvml import NvmlDevice, NvmlMig

    try:
        answer = json.loads(data)
    except ValueError as err:
        raise DriverError(f"query nvml {path}: the NVML helper died without an answer "
                          f"(crashed inside libnvidia-ml?)") from err
    for name, message in answer.get("warnings", ()):
        get_logger(name).warning("%s", message)
    if "nvml_error" in answer:
        function, code, text = answer["nvml_error"]
        from nvmount.discover._nvml import HINTS

        raise NvmlError(function, code, text, HINTS.get(code, ""))
    if "driver_error" in answer:
        raise DriverError(answer["driver_error"])
    devices = tuple(
        NvmlDevice(**{**d, "migs": tuple(NvmlMig(**m) for m in d["migs"])})
        for d in answer["devices"])
    return answer["driver"], answer["cuda"], devices
