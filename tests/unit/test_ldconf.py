"""nvmount.ldcache.ldconf: glibc's ld.so.conf syntax (pure) and the conf we write for ldconfig.
The sandbox runs the readers for real (tests/unit/test_ldconfig.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvmount.ldcache.ldconf import dir_path, parse_conf, write_conf

PARSE = [
    ("/usr/lib/x\n", [("dir", "/usr/lib/x")]),
    ("  /a/  \n\t/b//\n", [("dir", "/a"), ("dir", "/b")]),
    ("# comment\n/a # trailing\n\n", [("dir", "/a")]),
    ("include /etc/ld.so.conf.d/*.conf\n", [("include", "/etc/ld.so.conf.d/*.conf")]),
    ("include\ta.conf  b.conf\n", [("include", "a.conf"), ("include", "b.conf")]),
    ("includes/x\n", [("dir", "includes/x")]),
    ("hwcap 1 nosegneg\nHWCAP 2 x\n/a\n", [("dir", "/a")]),
    ("/lib=libc5\n", [("dir", "/lib=libc5")]),
    ("/a\0/evil\n/b\n", [("dir", "/a"), ("dir", "/b")]),
    ("/\n", [("dir", "/")]),
    ("/with space/lib\r\n", [("dir", "/with space/lib")]),
]


@pytest.mark.parametrize(("text", "want"), PARSE, ids=[
    "dir", "blanks-and-slashes", "comments", "include", "include-tab-two", "not-include",
    "hwcap-ignored", "type-suffix", "nul-ends-line", "root", "inner-space-crlf"])
def test_parse_conf_like_glibc(text: str, want: list[tuple[str, str]]) -> None:
    assert parse_conf(text) == want


@pytest.mark.parametrize(("line", "want"), [
    ("/lib=libc5", "/lib"), ("/a/ =x", "/a"), ("/", "/"), ("rel/dir", "rel/dir")])
def test_dir_path(line: str, want: str) -> None:
    assert dir_path(line) == want


def test_written_conf_has_only_directory_lines(tmp_path: Path) -> None:
    path = tmp_path / "ld.so.conf"
    write_conf(str(path), ["/a", "/lib=libc5"])
    assert path.read_text() == "/a\n/lib=libc5\n"
    assert parse_conf(path.read_text()) == [("dir", "/a"), ("dir", "/lib=libc5")]
    with pytest.raises(FileExistsError):  # O_EXCL: never an existing entry
        write_conf(str(path), [])


def test_parsing_a_huge_line_is_linear() -> None:
    import time

    text = "/" + "a" * 1_000_000 + "\n" + "include " + "x " * 200_000 + "\n"
    start = time.monotonic()
    items = parse_conf(text)
    assert len(items) == 200_001 and time.monotonic() - start < 1.0
