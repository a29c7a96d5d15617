"""nvhook.logs and nvmount.log: every record is escaped on stderr and in the debug log file,
through the hook's lean sink and through the standard logging (issue 8, class 3: a newline in
an image's symlink text forged a line in the admin's log)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.logs import attach_log_file, configure_hook_logging, configure_logging, one_line
from nvmount.log import escape, get_logger, install

FORGED = "\n2026-01-01 00:00:00,000 1 ERROR nvhook: FORGED line\r\x1b[2K"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    sink = install(None)
    yield
    install(sink)
    for handler in list(root.handlers):
        root.removeHandler(handler)
        if handler not in handlers:
            handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize(("text", "want"), [
    ("plain /usr/lib", "plain /usr/lib"),
    ("a\nb", "a\\nb"),
    ("\x1b[31mred", "\\x1b[31mred"),
    ("tab\there\r", "tab\\there\\r"),
    ("nul\x00", "nul\\x00"),
    ("ünïcode ok", "ünïcode ok"),
    ("\u2028line-separator", "\\u2028line-separator"),
], ids=["printable", "newline", "terminal-escape", "tab-cr", "nul", "unicode", "u2028"])
def test_escape(text: str, want: str) -> None:
    assert escape(text) == want
    assert one_line(text) == want
    assert "\n" not in escape(text) and "\r" not in escape(text)


@pytest.mark.parametrize("path", ["hook-sink", "std-logging"])
def test_every_record_is_escaped_on_stderr_and_in_the_debug_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None,
        path: str) -> None:
    log_file = tmp_path / "debug.log"
    if path == "hook-sink":
        configure_hook_logging(True)
    else:
        configure_logging(True)
    attach_log_file(str(log_file))
    log = get_logger("nvmount.fs.walk")
    log.debug("following symlink %s -> %s inside the rootfs", "/usr/lib/x", "real" + FORGED)
    log.warning("replaced symlink -> %s at %s with an empty file", FORGED, "/usr/bin/x")
    get_logger("nvhook").info("literal %s message" + FORGED)  # no args: msg itself
    for handler in logging.getLogger().handlers:
        handler.flush()
    sink = install(None)
    if sink is not None and sink.file is not None:
        sink.file.close()
    lines = log_file.read_text().splitlines()
    assert len(lines) == 3, lines
    record_line = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \d+ (DEBUG|INFO|WARNING) ")
    assert all(record_line.match(line) for line in lines), lines
    assert all("\x1b" not in line and "\r" not in line for line in lines)
    assert "real\\n2026-01-01 00:00:00,000 1 ERROR nvhook: FORGED line\\r\\x1b[2K" in lines[0]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and not any(line.startswith("2026") for line in err), err


@pytest.mark.parametrize("text", ["plain", 'a "quoted" \\ path', "tab\tnew\nline\x01\x1f",
                                  "non-ASCII: é ✓ 🚀", "\u2028 \u2029 \x7f", ""])
def test_json_quote_is_json_dumps_without_the_json_package(text: str) -> None:
    """The runtime log's JSON strings: json.dumps(ensure_ascii=False), from `_json` alone."""
    import json

    from nvhook.logrus import json_quote

    assert json_quote(text) == json.dumps(text, ensure_ascii=False)
    assert json.loads(json_quote(text)) == text
