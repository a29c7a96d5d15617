"""The runtime wrapper's log, where NVIDIA's runtime writes its own (hook-spec 3.1).

No `logging` import: records go, as logrus lines (`nvhook.logrus`, the one line writer),
to the config's `nvidia-container-runtime.debug` file (unless "" or /dev/null) and to runc's
`--log` file (JSON lines with `--log-format json`, which containerd and Docker read the last
error from), both appended to (parent directories made 0755, files 0644; the debug file only where
`nvmount.fs.trusted.open_log` allows: no symlink, FIFO, hard link or directory a user
controls, else a warning on stderr and no write), at the config's `log-level`
(`--debug` on the command line: debug). Files are opened at the first record that passes the
level, so a call that logs nothing opens nothing. The caller prints errors on stderr.
"""

from __future__ import annotations

import os
import sys

from nvhook.logrus import LEVELS, LogrusLog, json_line, json_quote, text_line, utc_time
from nvmount.log import DEBUG, INFO, escape


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


class RuntimeLog(LogrusLog):
    """Append-only logrus-style records to the wrapper's log files (`nvhook.logrus`): its own
    messages and, installed as the engine's sink (`nvmount.log.install`), the engine's
    records, both from the configured level up."""

    __slots__ = ("_files", "_streams")

    def __init__(self, level: str = "info", debug_file: str = "", log_file: str = "",
                 log_format: str = "text", *, debug: bool = False) -> None:
        threshold = DEBUG if debug else LEVELS.get(level, INFO)
        super().__init__(threshold, threshold)
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
        if self.own > DEBUG:  # --debug on the command line wins
            self.own = self.level = LEVELS.get(level, INFO)
        if debug_file and debug_file != "/dev/null" and self._streams is None:
            self._files.insert(0, (debug_file, False, True))

    def engine_text(self, message: str) -> str:
        return escape(message)

    def write(self, level: str, message: str) -> None:
        if not self._files:
            return
        stamp, quoted = utc_time(), json_quote(message)
        for fd, as_json in self._open():
            line = (json_line if as_json else text_line)(stamp, level, quoted)
            try:  # noqa: SIM105 (contextlib: one more import on every runc call)
                os.write(fd, line.encode("utf-8", "replace"))
            except OSError:
                pass  # a full disk must not stop the container

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
