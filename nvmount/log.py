"""Logging for the engine and the hook without `import logging` on the common path.

Modules take `log = get_logger(__name__)` and call `log.debug/info/warning/error(msg, *args)`
as with the standard library. Where records go is decided once per process:

- no sink installed (library use, tests, off-path commands): each record is handed to the
  standard `logging` (imported then), so `caplog` and logging handlers see everything;
- the hook's command line installs a `Sink` (`install`): records at or above its level are
  written as one escaped line to stderr (the message only) and, with a debug file (`file`,
  opened by the caller as a trusted log file: `nvhook.logs.open_debug_log`), every record to
  that file (`<time> <pid> <LEVEL> <name>: <message>`), appended; `logging` is never
  imported. This module opens no file (it is below `nvmount.fs`, which logs through it). A
  record below every threshold costs one comparison.

Every formatted message is escaped (`escape`): control characters, newlines included, are shown
as `\\n`, `\\x1b`, ..., so a string from the image or the spec cannot forge a log line or
send terminal escapes. The one module-level value is the installed sink (like logging's root
logger); `install` returns the previous one so that callers can restore it.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import TextIO

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40
LEVEL_NAMES = {DEBUG: "DEBUG", INFO: "INFO", WARNING: "WARNING", ERROR: "ERROR"}


def escape(text: str) -> str:
    """One printable line: control characters (newline, CR, ESC, ...) shown escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Sink:
    """Where the hook's records go: stderr from `level` up, and a debug file (all records)."""

    __slots__ = ("file", "level", "stderr")

    def __init__(self, level: int = WARNING, stderr: TextIO | None = None,
                 file: TextIO | None = None) -> None:
        self.level = level
        self.stderr = sys.stderr if stderr is None else stderr
        self.file = file

    def threshold(self) -> int:
        return DEBUG if self.file is not None else self.level

    def emit(self, level: int, name: str, message: str) -> None:
        line = escape(message)
        if level >= self.level:
            self.stderr.write(line + "\n")
            self.stderr.flush()
        if self.file is not None:
            now = time.time()
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            self.file.write(f"{stamp},{int(now % 1 * 1000):03d} {os.getpid()} "
                            f"{LEVEL_NAMES.get(level, str(level))} {name}: {line}\n")
            self.file.flush()


_SINK: list[Sink | None] = [None]  # the installed sink (None: hand records to `logging`)


def install(sink: Sink | None) -> Sink | None:
    """Install `sink` for this process (None: back to the standard logging); the previous."""
    previous = _SINK[0]
    _SINK[0] = sink
    return previous


def installed() -> Sink | None:
    return _SINK[0]


class Logger:
    """A named logger with the standard library's calling conventions (a subset)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def isEnabledFor(self, level: int) -> bool:
        sink = _SINK[0]
        if sink is None:
            import logging

            return logging.getLogger(self.name).isEnabledFor(level)
        return level >= sink.threshold()

    def log(self, level: int, msg: str, *args: object) -> None:
        sink = _SINK[0]
        if sink is None:
            import logging

            logging.getLogger(self.name).log(level, msg, *args)
        elif level >= sink.threshold():
            sink.emit(level, self.name, msg % args if args else msg)

    def debug(self, msg: str, *args: object) -> None:
        self.log(DEBUG, msg, *args)

    def info(self, msg: str, *args: object) -> None:
        self.log(INFO, msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        self.log(WARNING, msg, *args)

    def error(self, msg: str, *args: object) -> None:
        self.log(ERROR, msg, *args)


def get_logger(name: str) -> Logger:
    return Logger(name)
