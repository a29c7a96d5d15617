"""runc's and crun's create/run grammar, checked against the real binaries (issue 27 item 3).

Every word a command line uses names a directory holding a config.json whose namespace type
is that directory's tag, and the working directory has its own: runc and crun refuse the
namespace (`namespace {"ns-3" ""} does not exist`, ``invalid namespace type: `ns-3` ``) before
they create anything, which tells which bundle they read. For every value flag of runc and
crun (long, short, `=`), followed by `-b`, `--bundle`, `--bundle=`, `--`, another flag or a
word, before or after the container id, the model of each runtime
(`nvhook.launch.command_line`) must name the bundle the binary read, or refuse where it
refuses; the wrapper's reading (`bundle_of`) must be that bundle or ambiguous where the two
runtimes differ; the sh launcher's fast path must name the same bundle or leave it to the
wrapper.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nvhook.launch.command_line import bundle_of, crun_parse, runc_parse
from nvhook.launch.runtime_flags import RUNC_REORDER, command_kinds
from tests.unit.test_runtime_argv import sh_parse

RUNC = shutil.which("runc") or "/usr/sbin/runc"
CRUN = shutil.which("crun") or "/usr/bin/crun"
VALUE_FLAGS = sorted(n for n, k in command_kinds("run").items()
                     if "value" in k and n not in ("program-name",))
FOLLOWERS = ["-b", "--bundle", "--bundle=b2", "--bundle=", "-b=b2", "--", "-d", "--no-pivot",
             "b1", "-f"]
CID = "cid"
UNKNOWN = "?"
REFUSED = ("Incorrect Usage", "flag provided but not defined", "flag needs an argument",
           "bad flag syntax", "invalid boolean value", "invalid value", "requires exactly",
           "requires a maximum", "requires at least", "unrecognized option", "invalid option",
           "doesn't allow", "is ambiguous", "requires an argument", "USAGE:", "Usage:",
           "please specify a ID")


def flag(name: str) -> str:
    return f"-{name}" if len(name) == 1 else f"--{name}"


def variants() -> list[list[str]]:
    out = []
    for name in VALUE_FLAGS:
        for follower in FOLLOWERS:
            out += [[flag(name), follower, "b1", CID], [flag(name), follower, CID],
                    [CID, flag(name), follower, "b1"], [flag(name), follower]]
        out += [[f"{flag(name)}=b1", CID], [f"-{name}", "b1", CID]]
    return [*out, ["-db1", CID], ["-bb1", CID], ["--bun", "b1", CID], ["--", "-b", "b1"],
            ["--no-pivot", CID, "-b", "b1"], ["--bundle", "b1", "--bundle", "b2", CID]]


class Rig:
    """Bundles named by every word of the variants, each tagged; `cwd` the working one."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cwd = tmp / "cwd"
        self.tags: dict[str, str] = {}
        words = {w for v in variants() for w in v} | {"=b2", "=b1", "b1", "b2", "un", "ndle"}
        for word in [".", *sorted(words)]:
            path = self.cwd / word if word != "." else self.cwd
            if "/" in word.strip("/") or word in ("", "..") or path.exists():
                continue
            path.mkdir(parents=True)
            tag = f"ns-{len(self.tags)}"
            (path / "config.json").write_text(json.dumps({
                "ociVersion": "1.0.2", "process": {"args": ["/bin/true"], "cwd": "/"},
                "root": {"path": "rootfs"}, "mounts": [],
                "linux": {"namespaces": [{"type": tag}]}}))
            self.tags[tag] = "" if word == "." else word

    def bundle(self, tool: str, command: str, args: list[str]) -> str | None:
        """The bundle `tool` read ("" for the working directory), None when its parser
        refused the line, UNKNOWN when it stopped before reading a bundle for another reason
        (crun connects to its --console-socket first)."""
        proc = subprocess.run([tool, "--root", str(self.tmp / "state"), command, *args],
                              capture_output=True, text=True, cwd=self.cwd, timeout=30,
                              check=False, stdin=subprocess.DEVNULL)
        output = proc.stdout + proc.stderr
        found = re.search(r"ns-[0-9]+", output)
        if found:
            return self.tags[found.group(0)]
        return None if any(r in output for r in REFUSED) else UNKNOWN


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Rig:
    return Rig(tmp_path_factory.mktemp("grammar"))


def runc_models() -> list[tuple[str, str]]:
    """The runc models that may describe the installed runc (its flags by version; the
    reordering of the urfave/cli it was built with is found by the test)."""
    out = subprocess.run([RUNC, "--version"], capture_output=True, text=True, check=False)
    flags = "1.1" if out.stdout.startswith("runc version 1.1.") else "1.2"
    return [(flags, reorder) for reorder in RUNC_REORDER]


def crun_model() -> str:
    """The crun model of the installed crun (1.19 made --preserve-fds a checked int)."""
    out = subprocess.run([CRUN, "--version"], capture_output=True, text=True, check=False)
    minor = re.match(r"crun version 1\.([0-9]+)", out.stdout)
    return "1.19" if minor and int(minor.group(1)) >= 19 else "1.8"


def norm(bundle: str) -> str:
    return bundle.rstrip("/") if bundle not in ("", ".") else ""


@pytest.mark.root
@pytest.mark.parametrize("command", ["create", "run"])
def test_the_models_read_the_bundle_the_runtimes_read(rig: Rig, command: str) -> None:
    if not Path(RUNC).exists() or not Path(CRUN).exists():
        pytest.skip("needs runc and crun")
    models: dict[tuple[str, str], list[tuple[object, ...]]] = {m: [] for m in runc_models()}
    crun_version = crun_model()
    wrong: list[tuple[object, ...]] = []
    for args in variants():
        runc = rig.bundle(RUNC, command, args)
        for model, misses in models.items():
            ours = runc_parse(command, args, *model)
            if runc == UNKNOWN:
                continue
            if (runc is None) != bool(ours.error) or (runc is not None and norm(runc) != norm(
                    ours.bundle)):
                misses.append(("runc", args, runc, ours.bundle, ours.error))
        crun = rig.bundle(CRUN, command, args)
        theirs = crun_parse(command, args, crun_version)
        if crun != UNKNOWN and not theirs.config and ((crun is None) != bool(theirs.error) or (
                crun is not None and norm(crun) != norm(theirs.bundle))):
            wrong.append(("crun", args, crun, theirs.bundle, theirs.error))
        bundle, _, ambiguous = bundle_of(command, args)
        for read in (runc, None if theirs.config else crun):
            if read not in (None, UNKNOWN) and not ambiguous:
                assert norm(bundle or "") == norm(read), (args, read, bundle)
        slow, _, sh_bundle = sh_parse([command, *args])
        if not slow:
            assert not ambiguous and norm(sh_bundle) == norm(bundle or ""), args
            assert runc in (None, UNKNOWN) or norm(runc) == norm(sh_bundle), (args, runc)
    best = min(models.values(), key=len)  # the installed runc's urfave/cli
    assert not wrong and not best, "\n".join(map(str, wrong + best))


@pytest.mark.parametrize(("args", "bundle", "slow"), [
    (["--bundle", "/s/b", "--pid-file", "/s/p", "--console-socket", "/s/c", "id"], "/s/b",
     False),
    (["--pid-file", "-b", "id"], "", True),  # pid-file "-b": the bundle is the working one
    (["--pid-file", "--bundle", "id"], "", True),
    (["--preserve-fds", "3", "--no-pivot", "--no-new-keyring", "-b", "/b", "id"], "/b", False),
    (["id", "--bundle", "/b"], "/b", True),  # urfave moves flags before the id; crun refuses
])
def test_examples(args: list[str], bundle: str, slow: bool) -> None:
    assert (bundle_of("create", args)[0] or "") == bundle
    got = sh_parse(["create", *args])
    assert got[0] == slow and (slow or got[2] == bundle), got
