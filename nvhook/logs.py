"""Logging of the nvhook commands: where records go, the debug log file, one-line messages.

Hook commands (prestart, poststart, poststop) use the engine's lean logger
(`nvmount.log.Sink`: no `logging` import): warnings and errors on stderr (everything with
`--debug`), every record appended to `nvidia-container-cli.debug` when configured. Other
commands configure the standard `logging` (imported then) the same way. Either way every
message is escaped: a string from the image or the spec cannot forge a line.
"""

from __future__ import annotations

import os
import sys

from nvmount.log import DEBUG, WARNING, Sink, escape, get_logger, install, installed

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    import logging
    from typing import TextIO

_STDERR_ALIASES = frozenset(("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"))


def one_line(message: str) -> str:
    """One printable line: newlines and other control characters (terminal escapes from a
    hostile image's env or paths) are shown escaped, never sent to the terminal."""
    return escape(message)


def configure_hook_logging(debug: bool) -> Sink | None:
    """Install the lean sink for a hook command; returns the sink it replaced."""
    return install(Sink(DEBUG if debug else WARNING))


def configure_logging(debug: bool) -> None:
    """Standard logging for the other commands: stderr, warnings (everything with --debug),
    the message only (escaped)."""
    import logging

    install(None)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_escaping_formatter("%(message)s"))
    handler.setLevel(logging.DEBUG if debug else logging.WARNING)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)


def _escaping_formatter(fmt: str) -> logging.Formatter:
    import logging

    class EscapingFormatter(logging.Formatter):
        def formatMessage(self, record: logging.LogRecord) -> str:
            record.message = escape(record.message)
            return super().formatMessage(record)

    return EscapingFormatter(fmt)


def attach_log_file(path: str) -> None:
    """Also log everything (debug and up) to `path`, appending: `nvidia-container-cli.debug`.

    A file that cannot be opened, or is not a trusted log file (`nvmount.fs.trusted.open_log`:
    a symlink, a FIFO, a hard link, under a directory a user controls), is a warning and no
    write, not a failed container start.
    """
    sink = installed()
    if sink is not None:
        if path in _STDERR_ALIASES:
            sink.level = DEBUG
            return
        if path == "/dev/null":
            return
        stream, failed = open_debug_log(path)
        if stream is not None:
            sink.file = stream
        else:
            get_logger("nvhook").warning(
                "open debug log %s: %s (check nvidia-container-cli.debug)", path, failed)
        return
    _attach_std_log_file(path)


def open_debug_log(path: str) -> tuple[TextIO | None, str | None]:
    """(the file, opened to append, None), or (None, why not): `path` must be a trusted log
    file (`nvmount.fs.trusted.open_log`)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import open_log

    try:
        fd = open_log(path, "debug log")
    except TrustError as err:
        return None, err.detail
    except OSError as err:
        return None, err.strerror or str(err)
    return os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace"), None


def _attach_std_log_file(path: str) -> None:
    import logging

    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    if path in _STDERR_ALIASES:
        for handler in root.handlers:
            handler.setLevel(logging.DEBUG)
        return
    if path == "/dev/null":
        return
    stream, failed = open_debug_log(path)
    if stream is None:
        logging.getLogger("nvhook").warning(
            "open debug log %s: %s (check nvidia-container-cli.debug)", path, failed)
        return
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        _escaping_formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    root.addHandler(handler)
