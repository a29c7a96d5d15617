"""The launcher scripts `nvhook install` writes: one per kind of program. Pure (text only).

The Python launcher is `launcher.pyt` beside this module, its header filled by
`nvhook.launch.shfile.render` (`python_values`). Every launcher runs the system interpreter
isolated and without the site module
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

_FRONTED = ("ctk", "cdihook")  # Python behind a POSIX sh front
PYTHON_FILE = "launcher.pyt"  # the Python launcher; its header: `python_values`


def python_values(kind: str, paths: list[str], *, loader: tuple[str, ...], xoption: str,
                  config: str | None = None) -> dict[str, object]:
    """The header of `launcher.pyt` for `kind` importing nvhook from `paths`."""
    return {"_KIND": kind, "_PATHS": list(paths),
            "_LOADER": tuple(n.encode() for n in loader), "_XOPTION": xoption,
            "_CONFIG": (CONFIG_ENV.encode(), (config or "").encode())}


def recorded_paths(text: str) -> list[str] | None:
    """The import paths a Python launcher's header records (`_PATHS`), None when none."""
    import ast

    for line in text.splitlines():
        if line.startswith("_PATHS = "):
            try:
                paths = ast.literal_eval(line[len("_PATHS = "):])
            except (ValueError, SyntaxError):
                return None
            return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else None
    return None


def render(kind: str, python: str, paths: list[str], *, version: str,
           loader: tuple[str, ...], xoption: str, config: str | None = None) -> str:
    """The launcher text of `kind` for interpreter `python` importing from `paths`."""
    if kind == "runtime":  # a POSIX sh front that starts Python only when it must
        from nvhook.launch.runtime_sh import render as render_runtime

        return render_runtime(python, paths, version=version, marker=MARKER, config=config)
    from nvhook.launch.shfile import render as render_file

    marker = (f"{MARKER} ({kind}), written by `nvhook install` (nvhook {version}); re-run it "
              "after moving nvhook.")
    text = render_file(PYTHON_FILE, marker, python_values(
        kind, paths, loader=loader, xoption=xoption, config=config), interpreter=python)
    if kind not in _FRONTED:
        return text
    from nvhook.launch.cdihook_sh import render as render_front

    return render_front(kind, python, text, f"{paths[0]}/nvhook/__init__.py", marker=MARKER,
                        version=version)
