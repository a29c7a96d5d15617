"""The runtime wrapper's log, where NVIDIA's runtime writes its own (hook-spec 3.1).

No `logging` import: records go, as logrus lines, to the config's
`nvidia-container-runtime.debug` file (unless "" or /dev/null) and to runc's `--log` file
(JSON lines with `--log-format json`, which containerd and Docker read the last error from),
both appended to (parent directories made 0755, files 0644; the debug file only where
`nvmount.fs.trusted.open_log` allows: no symlink, FIFO, hard link or directory a user
controls, else a warning on stderr and no write), at the config's `log-level`
(`--debug` on the command line: debug). Files are opened at the first record that passes the
level, so a call that logs nothing opens nothing. The caller prints errors on stderr.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.log import Sink

LEVELS = {"trace": 5, "debug": 4, "info": 3, "warning": 2, "warn": 2, "error": 1}


def _timestamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def _quote(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)


def _open_file(path: str, trusted: bool) -> int:
    """The config's debug file is a trusted log file (`nvmount.fs.trusted.open_log`: no
    symlink, FIFO or hard link, no directory a user controls; missing parents made 0755;
    else -1, said on stderr); runc's `--log` comes from the daemon and is opened as runc
    opens it."""
    if not trusted:
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                       | os.O_NOCTTY, 0o644)
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import open_log

    try:
        return open_log(path, "runtime debug log", parents=True)
    except TrustError as err:
        sys.stderr.write(f"nvhook-runtime: {err}: not written\n")
        return -1


class RuntimeLog:
    """Append-only logrus-style records to the wrapper's log files."""

    __slots__ = ("_files", "_streams", "level")

    def __init__(self, level: str = "info", debug_file: str = "", log_file: str = "",
                 log_format: str = "text", *, debug: bool = False) -> None:
        self.level = LEVELS["debug"] if debug else LEVELS.get(level, LEVELS["info"])
        files = []
        if debug_file and debug_file != "/dev/null":
            files.append((debug_file, False, True))
        if log_file and log_file != "/dev/null":
            files.append((log_file, log_format == "json", False))
        self._files = files
        self._streams: list[tuple[int, bool]] | None = None

    def configure(self, level: str, debug_file: str) -> None:
        """The config's level and debug file, once it is loaded (runc's --log file is known
        from the command line before, so an error loading the config reaches it too)."""
        if self.level < LEVELS["debug"]:  # --debug on the command line wins
            self.level = LEVELS.get(level, LEVELS["info"])
        if debug_file and debug_file != "/dev/null" and self._streams is None:
            self._files.insert(0, (debug_file, False, True))

    def enabled(self, level: str) -> bool:
        return LEVELS[level] <= self.level

    def log(self, level: str, message: str) -> None:
        if not self.enabled(level) or not self._files:
            return
        stamp = _timestamp()
        for fd, as_json in self._open():
            if as_json:
                line = f'{{"level":"{level}","msg":{_quote(message)},"time":"{stamp}"}}\n'
            else:
                line = f'time="{stamp}" level={level} msg={_quote(message)}\n'
            try:  # noqa: SIM105 (contextlib: one more import on every runc call)
                os.write(fd, line.encode("utf-8", "replace"))
            except OSError:
                pass  # a full disk must not stop the container

    def debug(self, message: str) -> None:
        self.log("debug", message)

    def info(self, message: str) -> None:
        self.log("info", message)

    def warning(self, message: str) -> None:
        self.log("warning", message)

    def error(self, message: str) -> None:
        self.log("error", message)

    def _open(self) -> list[tuple[int, bool]]:
        if self._streams is None:
            self._streams = []
            for path, as_json, trusted in self._files:
                try:
                    fd = _open_file(path, trusted)
                except OSError as err:
                    sys.stderr.write(f"nvhook-runtime: open log {path}: {err.strerror}\n")
                    continue
                if fd >= 0:
                    self._streams.append((fd, as_json))
        return self._streams

    def close(self) -> None:
        for fd, _ in self._streams or ():
            try:  # noqa: SIM105 (contextlib: one more import on every runc call)
                os.close(fd)
            except OSError:
                pass
        self._streams = []


def engine_sink(log: RuntimeLog) -> Sink:
    """An `nvmount.log.Sink` that hands the engine's records to `log` (a spec delivery's
    discovery and plan), so that `logging` is never imported by the wrapper."""
    from nvmount.log import DEBUG, ERROR, INFO, WARNING, Sink

    names = {DEBUG: "debug", INFO: "info", WARNING: "warning", ERROR: "error"}
    levels = {5: DEBUG, 4: DEBUG, 3: INFO, 2: WARNING, 1: ERROR}

    class _RuntimeSink(Sink):
        __slots__ = ()

        def threshold(self) -> int:
            return levels.get(log.level, INFO)

        def emit(self, level: int, name: str, message: str) -> None:
            from nvmount.log import escape

            log.log(names.get(level, "error" if level > ERROR else "debug"), escape(message))

    return _RuntimeSink()
