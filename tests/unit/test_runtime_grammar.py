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

With NVHOOK_GRAMMAR_ROOT naming a Debian root that holds other runc and crun builds (an
extracted sid root: runc 1.3.6, crun 1.28), the same check runs them there (chroot in a private
mount namespace with its own /proc and /sys).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvhook.launch.command_line import bundle_of, crun_parse, runc_parse
from nvhook.launch.runtime_flags import RUNC_REORDER, command_kinds
from tests.fixtures.required import missing
from tests.unit.test_runtime_argv import sh_parse

RUNC = shutil.which("runc") or "/usr/sbin/runc"
CRUN = shutil.which("crun") or "/usr/bin/crun"
VALUE_FLAGS = sorted(n for n, k in command_kinds("run").items()
                     if "value" in k and n not in ("program-name",))
FOLLOWERS = ["-b", "--bundle", "--bundle=b2", "--bundle=", "-b=b2", "--", "-d", "--no-pivot",
             "b1", "-f"]
CID = "cid"
SHELLS = [s for s in (("/bin/dash",), ("/bin/bash", "--posix"), ("/bin/busybox", "sh"))
          if Path(s[0]).exists()]
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

    def __init__(self, tmp: Path, root: Path | None = None) -> None:
        self.tmp = tmp
        self.root = root  # the runtimes' root (None: this host's)
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
        output = self.run([tool, "--root", self.inner(self.tmp / "state"), command, *args])
        found = re.search(r"ns-[0-9]+", output)
        if found:
            return self.tags[found.group(0)]
        return None if any(r in output for r in REFUSED) else UNKNOWN


    def inner(self, path: Path) -> str:
        return str(path) if self.root is None else f"/{path.relative_to(self.root)}"

    def run(self, argv: list[str]) -> str:
        """stdout and stderr of `argv` run in the working bundle directory."""
        if self.root is None:
            command = argv
        else:
            q = shlex.quote
            inside = f"cd {q(self.inner(self.cwd))} && exec {shlex.join(argv)}"
            command = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                       f"mount -t proc proc {q(str(self.root / 'proc'))} && mount -t sysfs "
                       f"sysfs {q(str(self.root / 'sys'))} && exec chroot {q(str(self.root))} "
                       f"sh -c {q(inside)}"]
        proc = subprocess.run(command, capture_output=True, text=True, cwd=self.cwd,
                              timeout=30, check=False, stdin=subprocess.DEVNULL)
        return proc.stdout + proc.stderr

    def runc_models(self, runc: str) -> list[tuple[str, str]]:
        """The runc models that may describe `runc` (its flags by version; the reordering
        of the urfave/cli it was built with is found by the test)."""
        flags = "1.1" if self.run([runc, "--version"]).startswith("runc version 1.1.") else "1.2"
        return [(flags, reorder) for reorder in RUNC_REORDER]

    def crun_model(self, crun: str) -> str:
        """The crun model of `crun` (1.19 made --preserve-fds a checked int)."""
        minor = re.match(r"crun version 1\.([0-9]+)", self.run([crun, "--version"]))
        return "1.19" if minor and int(minor.group(1)) >= 19 else "1.8"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Rig:
    return Rig(tmp_path_factory.mktemp("grammar"))


@pytest.fixture(scope="module")
def root_rig() -> Iterator[Rig]:
    """runc and crun of another root: NVHOOK_GRAMMAR_ROOT, else the sid test node's (today's
    runc 1.3 and crun 1.28: tests/fixtures/debroot.py, cached; extracted for this module)."""
    root = os.environ.get("NVHOOK_GRAMMAR_ROOT")
    extracted = None
    if not root:
        from tests.fixtures.debroot import NODE_KINDS, extract, node_tarball

        extracted = Path(tempfile.mkdtemp(prefix="nvhook-grammar-root."))
        root = str(extract(node_tarball(NODE_KINDS["sid"]), extracted / "root"))
    if not (Path(root) / "usr/sbin/runc").exists():
        missing(f"{root} has no usr/sbin/runc (NVHOOK_GRAMMAR_ROOT: a root with runc and crun)")
    (Path(root) / "tmp").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="nvhook-grammar.", dir=Path(root) / "tmp"))
    try:
        yield Rig(tmp, Path(root))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if extracted is not None:
            shutil.rmtree(extracted, ignore_errors=True)


def norm(bundle: str) -> str:
    return bundle.rstrip("/") if bundle not in ("", ".") else ""


@pytest.mark.root
@pytest.mark.parametrize("command", ["create", "run"])
def test_the_models_read_the_bundle_the_runtimes_read(rig: Rig, command: str) -> None:
    if not Path(RUNC).exists() or not Path(CRUN).exists():
        missing("needs runc and crun (packaging/setup.sh --clients installs crun)")
    check(rig, RUNC, CRUN, command)


@pytest.mark.root
@pytest.mark.parametrize("command", ["create", "run"])
def test_the_models_read_the_bundle_other_builds_read(root_rig: Rig, command: str) -> None:
    check(root_rig, "/usr/sbin/runc", "/usr/bin/crun", command)


def check(rig: Rig, runc_tool: str, crun_tool: str, command: str) -> None:
    """Every variant: each model against the binary, the wrapper's and the launcher's bundle
    against what the binaries read (module docstring)."""
    models: dict[tuple[str, str], list[tuple[object, ...]]] = {
        m: [] for m in rig.runc_models(runc_tool)}
    crun_version = rig.crun_model(crun_tool)
    wrong: list[tuple[object, ...]] = []
    for args in variants():
        runc = rig.bundle(runc_tool, command, args)
        for model, misses in models.items():
            ours = runc_parse(command, args, *model)
            if runc == UNKNOWN:
                continue
            if (runc is None) != bool(ours.error) or (runc is not None and norm(runc) != norm(
                    ours.bundle)):
                misses.append(("runc", args, runc, ours.bundle, ours.error))
        crun = rig.bundle(crun_tool, command, args)
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
    for shell in SHELLS:  # dash, bash --posix, busybox sh: the same reading
        got = sh_parse(["create", *args], shell)
        assert got[0] == slow and (slow or got[2] == bundle), (shell, got)
