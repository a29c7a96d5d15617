"""The launcher scripts `nvhook install` writes: one per kind of program. Pure (text only).

Every launcher runs the system interpreter isolated and without the site module
(`#!/usr/bin/python3 -IS`: PYTHON* variables, the user site, `.pth` files and the working
directory have no say in what it imports) and appends the exact directories nvhook and its
dependencies were found in at install time to `sys.path`, after the standard library.

    kind     names (default)                               calls
    hook     nvidia-container-runtime-hook, nvhook-hook    nvhook.cli.main
    cli      nvidia-container-cli                          nvhook.compat.nvcli.nvidia_container_cli
    runtime  nvidia-container-runtime, nvhook-runtime      nvhook.runtime.wrapper.main
    ctk      nvidia-ctk                                    nvhook.compat.nvctk.nvidia_ctk.main
    cdihook  nvidia-cdi-hook                               nvhook.compat.cdihook.nvidia_cdi_hook

`runtime` is a POSIX sh script instead (`nvhook.launch.runtime_sh`): it execs the low-level
runtime itself for every call that cannot concern GPUs and starts the Python wrapper, as above,
only for the rest. `ctk` and `cdihook` are POSIX sh fronts (`nvhook.launch.cdihook_sh`)
that answer `noop` and the hooks whose work the first hook of their group did without starting
Python; the Python launcher, as below, is kept at the end of the same file and run by them.

`hook`, `cli`, `ctk` and `cdihook` run as host root, the last two often on behalf of a
container (a CDI spec's createContainer hooks, which runc < 1.3 hands the container's
environment when the spec gives none; containerd's `oci-hook` runs the CLI with ctr's
environment): they re-execute themselves once
without dynamic-loader variables (LD_*, GCONV_PATH, ...), record the working directory and
change to "/". `runtime` is what containerd or dockerd run instead of runc: it keeps its
environment and working directory, which the low-level runtime must get unchanged (runc's
default bundle is the working directory), and which come from the daemon, not a container.

With a recorded config path (`nvhook install --config PATH`), a launcher behaves as if
NVIDIA_CTK_CONFIG_FILE_PATH=PATH were set, unless that variable is set: Docker's `--gpus`
and containerd's `--gpus` run the hook or the CLI with no way to pass `--config`.
"""

from __future__ import annotations

from nvhook.config.basics import CONFIG_PATH_ENV as CONFIG_ENV

KINDS = ("hook", "cli", "runtime", "ctk", "cdihook")
DEFAULT_NAMES = {
    "hook": ("nvidia-container-runtime-hook", "nvhook-hook"),
    "cli": ("nvidia-container-cli",),
    "runtime": ("nvidia-container-runtime", "nvhook-runtime"),
    "ctk": ("nvidia-ctk",),
    "cdihook": ("nvidia-cdi-hook",),
}
MARKER = "# nvhook hook launcher"  # every kind carries it (install replaces only its own files)

_HEAD = '''#!{python} -IS
{marker} ({kind}), written by `nvhook install` (nvhook {version}); re-run it after moving nvhook.
# Isolated interpreter: no PYTHON* variables, no cwd or user site, no site module or .pth files.
# `posix`, not `os`: the os module alone costs a container start ~2.5 ms.
import posix as os
import sys
'''

_HYGIENE = '''
_LOADER = {loader!r}
if "{xoption}" not in sys._xoptions and any(
    k.startswith(b"LD_") or k in _LOADER for k in os.environ
):
    os.execve(
        sys.executable,
        [sys.executable, "-X", "{xoption}",
         *(sys.orig_argv[1:] if hasattr(sys, "orig_argv") else {argv})],
        {{k: v for k, v in os.environ.items() if not (k.startswith(b"LD_") or k in _LOADER)}},
    )
try:
    _cwd = os.getcwd()
except OSError:
    _cwd = ""  # unknown: the directory is gone
os.chdir("/")
'''

_CONFIG = '''os.environ.setdefault({env!r}, {config!r})  # posix.environ: bytes
'''

# A moved or removed installation: one line that says so, not a traceback (exit 127, as a
# shell says for a missing command).
_GUARD = '''try:
    import nvhook
except ImportError as _err:
    sys.stderr.write("%s: cannot import nvhook (%s) from %s: the installation moved or is gone "
                     "(re-run `nvhook install`, or reinstall the nvhook package)\\n"
                     % ({prog}, _err, {paths!r}))
    sys.stderr.flush()
    os._exit(127)
'''

# A short-lived root process: no cyclic garbage collection (nothing it builds is worth a
# collection pass), and no interpreter teardown at the end (output flushed first).
_FAST_EXIT = """_rc = main({args})
sys.stdout.flush()
sys.stderr.flush()
os._exit(_rc)
"""
_ENTRY = {
    "hook": "import gc\n\ngc.disable()\nfrom nvhook.launch.screen import screen\n\n"
            "_declined, _stdin = screen(sys.argv[1:], _cwd)\n"
            "if _declined:  # a container that wants no GPU: nothing else to load\n"
            "    os._exit(0)\nfrom nvhook.cli import main\n\n"
            + _FAST_EXIT.format(args="cwd=_cwd, stdin=_stdin"),
    "cli": "from nvhook.compat.nvcli.nvidia_container_cli import main\n\n"
           "sys.exit(main(sys.argv[1:], cwd=_cwd))\n",
    # run by the sh front (nvhook.launch.cdihook_sh): argv[1] is the launcher's path
    "ctk": "import gc\n\ngc.disable()\nfrom nvhook.compat.nvctk.nvidia_ctk import main\n\n"
           + _FAST_EXIT.format(args="sys.argv[2:], cwd=_cwd, program=sys.argv[1]"),
    "cdihook": "import gc\n\ngc.disable()\n"
               "from nvhook.compat.cdihook.nvidia_cdi_hook import main\n\n"
               + _FAST_EXIT.format(args="sys.argv[2:], cwd=_cwd, program=sys.argv[1]"),
}
_FRONTED = ("ctk", "cdihook")  # Python behind a POSIX sh front
_ARGV = {False: '["-IS", *sys.argv]',  # Python 3.9 has no sys.orig_argv
         True: 'open("/proc/self/cmdline", "rb").read().split(b"\\0")[1:-1]'}


def render(kind: str, python: str, paths: list[str], *, version: str,
           loader: tuple[str, ...], xoption: str, config: str | None = None) -> str:
    """The launcher text of `kind` for interpreter `python` importing from `paths`."""
    if kind == "runtime":  # a POSIX sh front that starts Python only when it must
        from nvhook.launch.runtime_sh import render as render_runtime

        return render_runtime(python, paths, version=version, marker=MARKER, config=config)
    fronted = kind in _FRONTED
    text = _HEAD.format(python=python, marker=MARKER, kind=kind, version=version)
    text += _HYGIENE.format(loader=tuple(n.encode() for n in loader), xoption=xoption,
                            argv=_ARGV[fronted])
    if config:
        text += _CONFIG.format(env=CONFIG_ENV.encode(), config=config.encode())
    text += f"sys.path.extend({paths!r})\n" + _GUARD.format(
        paths=", ".join(paths), prog=f"sys.argv[{int(fronted)}]")
    text += _ENTRY[kind]
    if not fronted:
        return text
    from nvhook.launch.cdihook_sh import render as render_front

    return render_front(kind, python, text, f"{paths[0]}/nvhook/__init__.py", marker=MARKER,
                        version=version)
