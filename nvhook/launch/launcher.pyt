#!/usr/bin/python3 -IS
# BEGIN header: `nvhook install` replaces these lines by its marker line and the same
# names with the installation's values (nvhook.launch.shfile.render, .write.render).
_KIND = "hook"
_PATHS = ["/usr/lib/python3/dist-packages"]
_LOADER = (b"LD_PRELOAD",)
_XOPTION = "nvhook-reexec"
_CONFIG = (b"NVIDIA_CTK_CONFIG_FILE_PATH", b"")
# END header
# The Python launcher (nvhook/launch/launcher.pyt): _KIND is hook, cli, ctk or cdihook; ctk and
# cdihook run behind the sh front (hookfront.sh), which passes the launcher's path as argv[1].
# Isolated interpreter: no PYTHON* variables, no cwd or user site, no site module or .pth files.
# `posix`, not `os`: the os module alone costs a container start ~2.5 ms.
import posix as os
import sys

_FRONTED = _KIND in ("ctk", "cdihook")
if _XOPTION not in sys._xoptions and any(
    k.startswith(b"LD_") or k in _LOADER for k in os.environ
):
    if hasattr(sys, "orig_argv"):
        _ARGV = sys.orig_argv[1:]
    elif _FRONTED:  # Python 3.9 has no sys.orig_argv; `-c LOADER` is not in sys.argv
        _ARGV = open("/proc/self/cmdline", "rb").read().split(b"\0")[1:-1]
    else:
        _ARGV = ["-IS", *sys.argv]
    os.execve(
        sys.executable,
        [sys.executable, "-X", _XOPTION, *_ARGV],
        {k: v for k, v in os.environ.items() if not (k.startswith(b"LD_") or k in _LOADER)},
    )
try:
    _cwd = os.getcwd()
except OSError:
    _cwd = ""  # unknown: the directory is gone
os.chdir("/")
if _CONFIG[1]:  # `nvhook install --config`: as if NVIDIA_CTK_CONFIG_FILE_PATH named it
    os.environ.setdefault(*_CONFIG)  # posix.environ: bytes
sys.path.extend(_PATHS)
try:
    import nvhook
except ImportError as _err:
    sys.stderr.write("%s: cannot import nvhook (%s) from %s: the installation moved or is gone "
                     "(re-run `nvhook install`, or reinstall the nvhook package)\n"
                     % (sys.argv[1 if _FRONTED else 0], _err, ", ".join(_PATHS)))
    sys.stderr.flush()
    os._exit(127)
if _KIND == "cli":
    from nvhook.compat.nvcli.nvidia_container_cli import main

    sys.exit(main(sys.argv[1:], cwd=_cwd))
# A short-lived root process: no cyclic garbage collection (nothing it builds is worth a
# collection pass), and no interpreter teardown at the end (output flushed first).
import gc

gc.disable()
if _KIND == "hook":
    from nvhook.launch.screen import screen

    _declined, _stdin = screen(sys.argv[1:], _cwd)
    if _declined:  # a container that wants no GPU: nothing else to load
        os._exit(0)
    from nvhook.launch.pack import use_pack

    # a GPU prestart's modules from the pack `nvhook install` wrote, if it is current: loaded
    # at once, in an order where each finds its imports loaded (no import-system search)
    use_pack(nvhook.__file__.rsplit("/", 2)[0], "hook")
    from nvhook.cli import main

    _rc = main(cwd=_cwd, stdin=_stdin)
elif _KIND == "ctk":
    from nvhook.compat.nvctk.nvidia_ctk import main

    _rc = main(sys.argv[2:], cwd=_cwd, program=sys.argv[1])
else:
    from nvhook.compat.cdihook.nvidia_cdi_hook import main

    _rc = main(sys.argv[2:], cwd=_cwd, program=sys.argv[1])
sys.stdout.flush()
sys.stderr.flush()
os._exit(_rc)
