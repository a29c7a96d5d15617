"""nvhook.config.toml_subset: whenever it returns a document, tomllib returns the same one.

The runtime wrapper reads config.toml with it on every runc call (tomllib costs several ms to
import); anything outside its subset goes to tomllib, so the only property that matters is
that an accepted text means exactly what TOML says it means.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvhook.config.toml_subset import parse_simple
from tests._compat import tomllib

NVIDIA_DEFAULT = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false
"""

ACCEPTED = [
    ("nvidia default", NVIDIA_DEFAULT),
    ("dotted keys", 'nvidia-container-runtime.runtimes = ["crun"]\nnvhook.runtime-mode = "spec"\n'),
    ("quoted key", '["nvhook"]\n"sim-procfs" = true # comment\n'),
    ("escapes", 'a = "x\\"y\\\\z"\nb = \'lit\\eral\'\n'),
    ("ints", "a = 0\nb = -12\nc = +7\n"),
    ("spaces", "[ a . b ]\n  k = [ 'x' , \"y\" , ]  \n"),
    ("implicit parent then header", "[a.b]\nx = 1\n[a]\ny = 2\n"),
]
REFUSED = [
    ("float", "a = 1.5\n"),
    ("multi-line array", "a = [\n 'x'\n]\n"),
    ("inline table", "a = {b = 1}\n"),
    ("unicode escape", 'a = "\\u0041"\n'),
    ("duplicate key", "a = 1\na = 2\n"),
    ("duplicate table", "[a]\n[a]\n"),
    ("dotted then header", "[a]\nb.c = 1\n[a.b]\n"),
    ("header then dotted", "[a.b]\n[a]\nb.c = 1\n"),
    ("array of tables", "[[a]]\n"),
    ("crlf", "a = 1\r\n"),
    ("leading zero", "a = 01\n"),
    ("date", "a = 1979-05-27\n"),
    ("control char", 'a = "x\x01"\n'),
    ("garbage", "a = 1 b\n"),
]


@pytest.mark.parametrize(("text",), [(t,) for _, t in ACCEPTED], ids=[n for n, _ in ACCEPTED])
def test_accepted_texts_match_tomllib(text: str) -> None:
    assert parse_simple(text) == tomllib.loads(text)


@pytest.mark.parametrize(("text",), [(t,) for _, t in REFUSED], ids=[n for n, _ in REFUSED])
def test_other_texts_go_to_tomllib(text: str) -> None:
    assert parse_simple(text) is None


_PIECES = st.sampled_from([
    "a", "b", "a.b", "b.c", '"q k"', "x-y", "1", "[a]", "[a.b]", "[b]", "[ a ]", "[[a]]", "=",
    " = ", '"s"', "'l'", '"e\\"s"', '"\\n"', "true", "false", "0", "-1", "+2", "01", "1.0",
    "[1, 2]", "['x',]", "[]", "[[1]]", "{}", "#c", " #c", "\t", " ", ",", "]", "[", '"', "'",
    "\n", "\n", "\n", "\r", "\x00", "é", "'''", '"""', "a = 1", "b.c = 'x'", "[a]\nb = 1",
])


@settings(max_examples=3000, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_never_disagrees_with_tomllib(text: str) -> None:
    try:
        expected = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        assert parse_simple(text) is None
        return
    got = parse_simple(text)
    assert got is None or got == expected
