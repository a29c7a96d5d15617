"""Logging of the nvhook commands: stderr handler, the debug log file, one-line messages.

Off the hook's common path: `logging` is imported only inside these functions.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    pass


def one_line(message: str) -> str:
    """One printable line: newlines and other control characters (terminal escapes from a
    hostile image's env or paths) are shown escaped, never sent to the terminal."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def configure_logging(debug: bool) -> None:
    """stderr: warnings (everything with --debug), message only; no other handlers yet."""
    import logging

    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(logging.DEBUG if debug else logging.WARNING)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)


_STDERR_ALIASES = frozenset(("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"))


def attach_log_file(path: str) -> None:
    """Also log everything (debug and up) to `path`, appending: `nvidia-container-cli.debug`.

    A file that cannot be opened is a warning, not a failed container start.
    """
    import logging

    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    if path in _STDERR_ALIASES:
        for handler in root.handlers:
            handler.setLevel(logging.DEBUG)
        return
    try:
        handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    except OSError as err:
        logging.getLogger("nvhook").warning(
            "open debug log %s: %s (check nvidia-container-cli.debug)", path, err.strerror)
        return
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    )
    handler.setLevel(logging.DEBUG)
    root.addHandler(handler)
