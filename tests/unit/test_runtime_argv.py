"""runc's command line as the wrapper reads it, checked against runc itself.

Both parsers - the Python wrapper's (`nvhook.launch.argv`) and the sh launcher's
(`nvhook_parse` in `nvhook.launch.runtime_sh`) - must find the command runc finds: runc run with
a generated command line whose words are replaced by unique probes (`w<i>`; Go's flag parser
only looks at whether an argument starts with `-`, so the parse is the same) prints `No help
topic for 'w<i>'` for the command it would run. Where runc refuses the line (Go's flag errors,
help, version) neither parser may act on a create.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvhook.launch.argv import CRUN_VALUE_FLAGS, parse_runtime_argv
from nvhook.launch.runtime_sh import render

RUNC = shutil.which("runc") or "/usr/sbin/runc"
DASH = shutil.which("dash") or "/bin/sh"
KEEP = frozenset(("json", "text"))  # log-format values: runc checks them before the command

FLAGS = ["--root", "-root", "--log", "-log", "--log-format", "--criu", "--rootless",
         "--root=/r", "-log=l1", "--log-format=json", "--log-format=text", "--rootless=auto",
         "--debug", "-debug", "--systemd-cgroup", "--debug=true", "--debug=false", "--debug=1",
         "--debug=0", "-debug=T", "--debug=yes", "--debug=", "--systemd-cgroup=F",
         "--help", "-h", "--version", "-v", "--version=false", "-help=0",
         "--cgroup-manager", "--log-level=debug", "--bogus", "---root", "-=x", "--=x", "-",
         "--", "-b", "--bundle", "--bundle=/b1", "-b=b2", "---bundle", "-bundle"]
WORDS = ["create", "run", "state", "delete", "x", "", "json", "text", "/b3", "v1"]
TOKENS = st.lists(st.sampled_from(FLAGS + WORDS), max_size=9)


def launcher_parse() -> str:
    text = render("/usr/bin/python3", ["/nonexistent"], version="0", marker="# m")
    return text[:text.index("# END nvhook_parse")]  # the header, then the functions


PARSE = launcher_parse()


def sh_parse(args: list[str], shell: tuple[str, ...] = (DASH,)) -> tuple[bool, str, str]:
    """(slow, command, bundle) from the launcher's own nvhook_parse, run by dash (or
    `shell`)."""
    script = (PARSE + 'nvhook_parse "$@"\nprintf "%s\\n%s\\n%s" "$nvhook_slow" '
              '"$nvhook_cmd" "$nvhook_bundle"\n')
    proc = subprocess.run([*shell, "-c", script, "sh", *args], capture_output=True, text=True,
                          check=True, timeout=30)
    slow, cmd, bundle = proc.stdout.split("\n")
    return bool(slow), cmd, bundle


REFUSED = ("Incorrect Usage", "flag provided but not defined", "flag needs an argument",
           "bad flag syntax", "invalid boolean value")


def runc_command(args: list[str], cwd: Path) -> str | None:
    """The word runc would run as its command (original spelling); "" when Go's flag parser
    refuses the command line; None when runc stops later, before choosing one (an invalid
    --log-format, help, version)."""
    probes = [a if a in KEEP or a.startswith("-") else f"w{i}" for i, a in enumerate(args)]
    for old in cwd.iterdir():
        old.unlink()
    proc = subprocess.run([RUNC, "--root", str(cwd / "state"), *probes], capture_output=True,
                          text=True, cwd=cwd, timeout=30, check=False)
    output = proc.stdout + proc.stderr + "".join(
        p.read_text(errors="replace") for p in cwd.iterdir() if p.is_file())
    marker = "No help topic for '"
    if marker not in output:
        return "" if any(r in output for r in REFUSED) else None
    word = output.split(marker, 1)[1].split("'", 1)[0]
    if word.startswith("w") and word[1:].isdigit():
        return args[int(word[1:])]
    return word


@pytest.mark.skipif(not Path(RUNC).exists(), reason="needs runc")
@settings(max_examples=250, deadline=None)
@given(args=TOKENS)
def test_both_parsers_find_runcs_command(args: list[str], tmp_path_factory:
                                         pytest.TempPathFactory) -> None:
    cwd = tmp_path_factory.mktemp("runc-argv")
    want = runc_command(args, cwd)
    inv = parse_runtime_argv(args)
    slow, cmd, bundle = sh_parse(args)
    if want:
        assert (inv.command, inv.help, inv.version) == (want, False, False)
        if inv.command not in ("create", "run"):  # a create's own flags may still fail
            assert inv.error == "", inv.error
        assert cmd == want, (slow, cmd)
    elif want == "" and not any(a.lstrip("-").split("=")[0] in CRUN_VALUE_FLAGS for a in args):
        assert not inv.creates  # Go's parser refuses it: neither acts on a create (the
        # launcher may ask Python); crun's own flags, which runc refuses, the wrapper accepts
    if inv.creates and not slow:
        assert bundle == (inv.bundle or "")


@settings(max_examples=300, deadline=None)
@given(args=TOKENS)
def test_launcher_and_wrapper_agree(args: list[str]) -> None:
    """Where the launcher decides alone, it decides what the wrapper would."""
    inv = parse_runtime_argv(args)
    slow, cmd, bundle = sh_parse(args)
    if not slow:
        assert cmd == inv.command and not inv.error
        if inv.creates:
            assert bundle == (inv.bundle or "")


CASES = [
    (["--root", "/run/containerd/runc/k8s.io", "--log", "/s/log.json", "--log-format", "json",
      "create", "--bundle", "/s/b", "--pid-file", "/s/b/init.pid", "id1"], "create", "/s/b"),
    (["--root", "create", "state", "x"], "state", ""),
    (["delete", "create"], "delete", ""),
    (["--", "run", "--bundle=/b", "x"], "run", "/b"),
    (["--systemd-cgroup", "--debug=false", "kill", "x", "9"], "kill", ""),
    (["-log", "--debug", "create", "x"], "create", ""),
]


@pytest.mark.parametrize(("args", "command", "bundle"), CASES,
                         ids=["containerd", "root-create", "named-create", "dashdash",
                              "bools", "log-value-looks-like-a-flag"])
def test_examples(args: list[str], command: str, bundle: str) -> None:
    inv = parse_runtime_argv(args)
    assert (inv.command, inv.bundle or "", inv.error) == (command, bundle, "")
    assert sh_parse(args) == (False, command, bundle)


@pytest.mark.parametrize("args", [["--bogus", "create"], ["---root", "x", "create"],
                                  ["--debug=yes", "create"], ["--log"], ["--help", "create"],
                                  ["--cgroup-manager", "systemd", "create"]],
                         ids=["unknown", "bad-syntax", "bad-bool", "no-value", "help",
                              "crun-flag"])
def test_lines_runc_refuses_go_to_the_wrapper(args: list[str]) -> None:
    assert sh_parse(args)[0]
