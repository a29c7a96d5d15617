"""logrus-style lines, as NVIDIA's Go tools and runtime write them: the one line writer behind
the runtime wrapper's log files (`nvhook.launch.runtime_log.RuntimeLog`) and the nvidia-ctk and
nvidia-cdi-hook drop-ins' stderr (`nvhook.compat.urfave.Log`). Effects: only in `write`.

A writer is a `nvmount.log.Sink` of the one logger: installed (`nvmount.log.install`), the
engine's records come out as the same lines as nvhook's own messages (`log(level, message)`),
each from its own threshold. One level scale, the engine's: DEBUG 10 < INFO 20 < WARNING 30 <
ERROR 40, with logrus' trace (5) below debug.

| writer | where | `time=` | `msg=` |
|---|---|---|---|
| `RuntimeLog` | debug file; runc's `--log` (text, or JSON) | UTC, microseconds, `Z` | JSON string |
| urfave `Log` | stderr | local, seconds, zone offset | bare when safe, else Go's `%q` |

    text:  time="2026-01-02T03:04:05.000006Z" level=warning msg="..."
    JSON:  {"level":"warning","msg":"...","time":"2026-01-02T03:04:05.000006Z"}
"""

from __future__ import annotations

import _json
import time

from nvmount.log import DEBUG, ERROR, INFO, WARNING, Sink

TRACE = 5
LEVELS = {"trace": TRACE, "debug": DEBUG, "info": INFO, "warning": WARNING, "warn": WARNING,
          "error": ERROR}
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/@^+")


def level_name(level: int) -> str:
    """The logrus name of an engine level."""
    return ("debug" if level <= DEBUG else "info" if level <= INFO else
            "warning" if level <= WARNING else "error")


def go_quote(text: str) -> str:
    """logrus' TextFormatter value: bare when it needs no quoting, else Go's %q."""
    if text and all(c in _SAFE for c in text):
        return text
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif ord(c) < 0x20 or ord(c) == 0x7F or 0x80 <= ord(c) < 0xA0:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def json_quote(text: str) -> str:
    """A JSON string, non-ASCII kept: what `json.dumps(text, ensure_ascii=False)` returns,
    from the json package's C encoder (importing the package pulls in `re`, ~5 ms of every
    GPU create that docker or containerd runs with `--log-format json`)."""
    return _json.encode_basestring(text)


def local_time() -> str:
    """logrus' default full timestamp: local time, seconds, Z or the zone's offset."""
    now = time.localtime()
    offset = now.tm_gmtoff or 0
    sign, minutes = "+" if offset > 0 else "-", abs(offset) // 60
    zone = "Z" if offset == 0 else f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    return time.strftime("%Y-%m-%dT%H:%M:%S", now) + zone


def utc_time() -> str:
    """runc's log timestamp: UTC with microseconds."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def text_line(stamp: str, level: str, quoted: str) -> str:
    return f'time="{stamp}" level={level} msg={quoted}\n'


def json_line(stamp: str, level: str, quoted: str) -> str:
    return f'{{"level":"{level}","msg":{quoted},"time":"{stamp}"}}\n'


class LogrusLog(Sink):
    """nvhook's own messages from `own` up and the engine's records from `level` up, as
    logrus lines; a subclass says where they go (`write`)."""

    __slots__ = ("own",)

    def __init__(self, own: int, engine: int) -> None:
        super().__init__(engine)
        self.own = own

    def threshold(self) -> int:
        return self.level

    def enabled(self, level: str) -> bool:
        return LEVELS[level] >= self.own

    def log(self, level: str, message: str) -> None:
        if LEVELS[level] >= self.own:
            self.write(level, message)

    def debug(self, message: str) -> None:
        self.log("debug", message)

    def info(self, message: str) -> None:
        self.log("info", message)

    def warning(self, message: str) -> None:
        self.log("warning", message)

    def error(self, message: str) -> None:
        self.log("error", message)

    def emit(self, level: int, name: str, message: str) -> None:
        if level >= self.level:
            self.write(level_name(level), self.engine_text(message))

    def engine_text(self, message: str) -> str:
        """An engine record's message as this writer shows it."""
        return message

    def write(self, level: str, message: str) -> None:
        raise NotImplementedError
