"""The drop-in hooks' cost levers (nvhook.compat.cdihook): which hooks the first hook of a
group does for the rest (`batch.group_after`), the record the later ones find and the
launcher's sh front that reads it (`record`, `launcher`), and what the ld.so.cache writer
makes of what is mounted in a folder (`ldcache`). Pure, or /bin/sh on a temporary file; the
container side is tests/e2e/test_nvidia_hooks.py and tests/e2e/test_hot_path.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvhook.compat.cdihook import batch, ldcache
from nvhook.compat.cdihook.nvidia_cdi_hook import parse_hook
from nvhook.compat.cdihook.run import HookRun
from nvhook.compat.urfave import Log
from nvhook.launch.hook_records import call_lines, key_of
from nvmount.ldcache.write import Fallback

HOOK = "/usr/bin/nvidia-cdi-hook"
ENV = ["NVIDIA_CTK_DEBUG=false"]


def entry(*words: str, path: str = HOOK, env: list[str] | None = None, **extra: Any
          ) -> dict[str, Any]:
    return {"path": path, "args": ["nvidia-cdi-hook", *words],
            "env": ENV if env is None else env, **extra}


def later(entries: list[dict[str, Any]], *argv: str, start: int = 0) -> list[list[str]]:
    run = HookRun(Log(), cwd=None, stdin=None, environ={})
    found = batch.group_after(entries, HOOK, list(argv), start,
                              lambda words: parse_hook(words, run, "nvidia-cdi-hook"))
    return [argv for argv, _, _ in found]


SIX = [entry("create-symlinks", "--link", "a::/usr/lib/a"),
       entry("create-symlinks", "--link", "b::/usr/lib/b"),
       entry("enable-cuda-compat", "--host-driver-version=550.54.15"),
       entry("update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"),
       entry("disable-device-node-modification"), entry("update-application-profile")]


def test_the_first_hook_leads_the_others() -> None:
    assert later(SIX, *SIX[0]["args"][1:]) == [e["args"][1:] for e in SIX[1:]]
    for follower in SIX[1:]:  # the others lead nothing (the first did their work)
        assert later(SIX, *follower["args"][1:]) == []


@pytest.mark.parametrize(("entries", "want"), [
    ([*SIX[:2], {"path": "/usr/bin/other", "args": ["other"]}, *SIX[2:]], 1),
    ([*SIX[:2], entry("noop"), *SIX[2:]], 5),  # a noop is passed over (and not recorded)
    ([*SIX[:2], entry("chmod", "--bogus"), *SIX[2:]], 1),  # flags that do not parse
    ([*SIX[:2], entry("some-new-hook"), *SIX[2:]], 1),  # an unknown hook warns itself
    ([*SIX[:2], entry("update-ldcache", "--container-spec", "/s.json"), *SIX[2:]], 1),
    ([*SIX[:2], entry("noop", env=["NVIDIA_CTK_DEBUG=true"]), *SIX[2:]], 1),
    ([*SIX[:2], {**SIX[2], "timeout": 5}, *SIX[3:]], 1),
    ([*SIX[:2], entry("noop", path="/opt/other/nvidia-cdi-hook"), *SIX[2:]], 1),
    ([*SIX[:2], entry("--debug", "noop"), *SIX[2:]], 1),  # other global flags
], ids=["foreign-hook", "noop", "bad-flags", "unknown-hook", "state-file", "env", "timeout",
        "other-binary", "global-flags"])
def test_what_ends_a_group(entries: list[dict[str, Any]], want: int) -> None:
    assert len(later(entries, *SIX[0]["args"][1:])) == want


def test_no_group_without_a_sure_leader() -> None:
    first = SIX[0]["args"][1:]
    assert later([*SIX, SIX[0]], *first) == []  # listed twice: which one runs now?
    assert later([{**SIX[0], "timeout": 3}, *SIX[1:]], *first) == []  # its own bound
    assert later(SIX[:1], *first) == []  # nothing follows
    assert later([entry("noop"), *SIX], *first) == [e["args"][1:] for e in SIX[1:]]
    assert later("not a list", *first) == []  # type: ignore[arg-type]


def test_nvidia_ctk_hooks_group_after_their_hook_word() -> None:
    ctk = "/usr/bin/nvidia-ctk"
    entries = [{"path": ctk, "args": ["nvidia-ctk", "hook", *e["args"][1:]], "env": ENV}
               for e in SIX]
    run = HookRun(Log(), cwd=None, stdin=None, environ={})
    found = batch.group_after(entries, ctk, ["hook", *SIX[0]["args"][1:]], 1,
                              lambda words: parse_hook(words, run, "nvidia-ctk hook"))
    assert [f[1] for f in found] == ["create_symlinks", "enable_cuda_compat", "update_ldcache",
                                     "disable_device_node_modification",
                                     "update_application_profile"]


# -- the record and the launcher's sh front that reads it --------------------------------------
def front(kind: str = "cdihook") -> str:
    from nvhook.launch.write import render

    return render(kind, "/usr/bin/python3", ["/nonexistent"], version="0", loader=(),
                  xoption="x")


# /bin/sh is dash on Debian, bash on RHEL; busybox's in small images and tests
SHELLS = [s for s in (["/bin/sh"], ["/bin/bash", "--posix"], ["/bin/busybox", "sh"])
          if Path(s[0]).exists()]


def run_front(text: str, script: str, *args: str, shell: tuple[str, ...] = ("/bin/sh",)
              ) -> subprocess.CompletedProcess[str]:
    """`script` after the front's functions (its last lines, which act, cut off)."""
    functions = text[:text.index("if nvhook_done")]
    return subprocess.run([*shell, "-c", functions + script, "launcher", *args],
                          capture_output=True, text=True, timeout=30, check=False)


WORDS = ["create-symlinks", "--link", "a b::/x y", "", "back\\slash\\n", "*", "-", "$HOME",
         "-e", "-n"]


@pytest.mark.parametrize("shell", SHELLS, ids=[s[0] for s in SHELLS])
def test_the_front_compares_every_word_exactly(tmp_path: Path, shell: list[str]) -> None:
    record = tmp_path / "entry"
    record.write_bytes(call_lines("/usr/bin/nvidia-cdi-hook", WORDS) or b"")
    script = 'nvhook_same "$@" && echo same || echo other'
    text = front()
    assert run_front(text, script, str(record), "/usr/bin/nvidia-cdi-hook", *WORDS,
                     shell=tuple(shell)).stdout == "same\n"
    for other in (WORDS[:-1], [*WORDS, ""], [*WORDS[:2], "a  b::/x y", *WORDS[3:]],
                  [*WORDS[:4], "back\\slash\\m", *WORDS[5:]]):
        assert run_front(text, script, str(record), "/usr/bin/nvidia-cdi-hook", *other,
                         shell=tuple(shell)).stdout == "other\n", other
    assert call_lines("/p", ["a\nb"]) is None  # a word the front cannot compare: no entry


@pytest.mark.parametrize(("kind", "argv", "done"), [
    ("cdihook", ["noop"], True), ("cdihook", ["noop", "--x"], False),
    ("ctk", ["hook", "noop"], True), ("ctk", ["noop"], False),
    ("ctk", ["runtime", "configure"], False), ("cdihook", ["update-ldcache"], False),
])
def test_noop_needs_no_python(kind: str, argv: list[str], done: bool) -> None:
    proc = run_front(front(kind), 'nvhook_done "$@" && echo done || echo python', *argv)
    assert proc.stdout == ("done\n" if done else "python\n"), proc.stderr


def test_record_names() -> None:
    assert key_of("123-456.0001") == (123, 456) == key_of(".123-456.0002.tmp")
    assert key_of("stray") is None and key_of("1-x.0001") is None


# -- the ld.so.cache writer's view of a folder -------------------------------------------------
LIB = ("libcuda.so.1", False, (1, 2))


def view(names: dict[str, bool], libs: dict[str, tuple[str, bool, tuple[int, int]]],
         links: dict[str, tuple[str, bool, str]], texts: dict[str, str]
         ) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str]]]:
    return ldcache.ldconfig_view("/usr/lib/x86_64-linux-gnu", names, libs, links, texts)


def test_mounted_libraries_and_their_links_as_ldconfig_keys_them() -> None:
    names = {"libcuda.so.550.54.15": False, "libcuda.so.1": True, "libcuda.so": True,
             "libGLX_indirect.so.0": True, "libnvidia-ml.so.550.54.15": False}
    libs = {"libcuda.so.550.54.15": LIB,
            "libnvidia-ml.so.550.54.15": ("libnvidia-ml.so.1", False, (1, 3))}
    texts = {"libcuda.so.1": "libcuda.so.550.54.15", "libcuda.so": "libcuda.so.1",
             "libGLX_indirect.so.0": "libcuda.so.550.54.15"}
    links = {"libcuda.so.1": ("libcuda.so.1", False, "libcuda.so.550.54.15"),
             "libcuda.so": ("libcuda.so.1", False, "libcuda.so.550.54.15"),
             "libGLX_indirect.so.0": ("libcuda.so.1", False, "libcuda.so.550.54.15")}
    entries, make = view(names, libs, links, texts)
    d = "/usr/lib/x86_64-linux-gnu"
    assert sorted(entries) == [("libcuda.so", f"{d}/libcuda.so", False),  # the .so dev link
                               ("libcuda.so.1", f"{d}/libcuda.so.1", False),
                               ("libnvidia-ml.so.1", f"{d}/libnvidia-ml.so.1", False)]
    assert make == [(f"{d}/libnvidia-ml.so.1", "libnvidia-ml.so.550.54.15")]  # as ldconfig


@pytest.mark.parametrize(("names", "libs", "texts", "links"), [
    ({"libcuda.so.550": False, "libcuda.so.1": False}, {"libcuda.so.550": LIB}, {}, {}),
    ({"libcuda.so.550": False, "libcuda.so.1": True}, {"libcuda.so.550": LIB},
     {"libcuda.so.1": "libcuda.so.470"}, {}),
    ({"a.so.1": False, "libb.so.2": False}, {"liba.so.1": LIB, "libb.so.2": LIB}, {}, {}),
    ({"libx.so.0": True}, {}, {"libx.so.0": "/elsewhere/libcuda.so.1"},
     {"libx.so.0": ("libcuda.so.1", False, "")}),
], ids=["soname-is-a-file", "soname-links-elsewhere", "two-libraries-one-soname",
        "renamed-link-to-a-library-elsewhere"])
def test_what_the_writer_leaves_to_ldconfig(names: dict[str, bool], libs: dict[str, Any],
                                            texts: dict[str, str], links: dict[str, Any]
                                            ) -> None:
    with pytest.raises(Fallback):
        view(names, libs, links, texts)


def test_mount_points_of_a_folder() -> None:
    root, d = "/run/c/rootfs", "/run/c/rootfs/usr/lib/x86_64-linux-gnu"
    mounts = {"/", root, f"{root}/proc", f"{d}/libcuda.so.550", f"{d}/vdpau/libvdpau_nvidia.so"}
    assert ldcache.new_files(d, root, mounts) == {"libcuda.so.550"}
    assert ldcache.new_files(d, root, {*mounts, f"{root}/usr/lib"}) is None  # mounted whole
    with pytest.raises(Fallback):  # ldconfig reads glibc-hwcaps too
        ldcache.new_files(d, root, {*mounts, f"{d}/glibc-hwcaps/x86-64-v3/libcuda.so.1"})
    assert ldcache.unescape(r"/a\040b\134c\011") == "/a b\\c\t"


def test_copies_kept_in_step() -> None:
    from nvmount.ldcache.ldconf import HWCAP_DIRS

    assert ldcache.HWCAP_DIRS == HWCAP_DIRS
