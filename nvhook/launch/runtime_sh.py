"""The runtime wrapper's launcher: a POSIX sh front that starts Python only when it must. Pure.

The sh is `runtime.sh` beside this module; `values` gives its header (`nvhook.launch.shfile`).

`nvhook install` writes this for the `runtime` kind (`nvidia-container-runtime`,
`nvhook-runtime`). containerd's shim calls the runtime four times per container (create, start,
delete, delete --force), and with `nvidia` as the default runtime every container on the node
pays for each call. The launcher decides from its argv, a few file tests and, with a config
file, one `stat` (and `/bin/grep` on a create) whether the call can go straight to the
low-level runtime:

1. runc's global flags are parsed as runc parses them (Go's `flag` grammar, `nvhook.launch.argv`;
   a property test runs runc itself against both parsers); anything the grammar refuses,
   `--help`/`--version`, crun's extra flags or an unknown flag goes to the wrapper; a create
   or run's own flags are taken only where runc and crun read them alike (lists made from
   `nvhook.launch.runtime_flags`), else the wrapper reads the line (`command_line`);
2. the config file is found as the wrapper finds it (NVIDIA_CTK_CONFIG_FILE_PATH, the recorded
   `nvhook install --config`, $XDG_CONFIG_HOME, /etc); with none, the built-in defaults;
3. with a config file, the facts the wrapper derived from it (`nvhook.launch.facts`: the
   runtime candidates of `nvidia-container-runtime.runtimes` and the strings whose absence
   proves a config.json wants no GPU) are read from a root-owned file in /run/nvhook that must
   name the config file and its identity (device, inode, size, mtime, ctime: `stat -L`);
   otherwise the call goes to the wrapper, which rewrites the facts, so the next call is fast
   again;
4. a `create` or `run` whose bundle's config.json (a regular file, no symlink) contains none of
   those strings (`grep -F`, the wrapper's own `may_want_gpus` test) is not a GPU container:
   it goes to the runtime untouched; any other create goes to the wrapper;
5. the runtime is looked up as the wrapper looks it up (a path with a `/` as is, a name on
   PATH then the default directories, an executable regular file, never the launcher itself)
   and exec'd with the same arguments and environment; not found: the wrapper reports it.

The wrapper is `python3 -IS -c ...` (isolated, no site) with the launcher's path, the recorded
config and the facts path as its first arguments (`nvhook.runtime.wrapper.launched`). When the
interpreter or nvhook is gone, the launcher says so in one line on stderr and in runc's `--log`
file (JSON with `--log-format json`, where Docker and containerd read the error) and exits 127.
The environment is the daemon's, passed on unchanged (the launcher sets no variable; the shell
itself exports PWD, the working directory the runtime runs in anyway).
"""

from __future__ import annotations

import json

from nvhook.config.basics import DEFAULT_CONFIG_PATH, DEFAULT_RUNTIMES, XDG_RELATIVE
from nvhook.launch.facts import FACTS_DIR, FACTS_FORMAT, STAT_FORMAT, facts_path
from nvhook.launch.runtime_flags import front_lists
from nvhook.launch.settings import Settings
from nvhook.launch.shfile import render as render_file

GREP = "/bin/grep"
STATS = ("/usr/bin/stat", "/bin/stat")  # GNU coreutils' (merged /usr or not)
FILE = "runtime.sh"


def values(python: str, paths: list[str], *, version: str, config: str | None = None,
           facts_dir: str = FACTS_DIR) -> dict[str, str]:
    """The header of `runtime.sh` for `python` importing nvhook from `paths` (the first
    holds it)."""
    code = _PYTHON.format(paths=json.dumps(paths), shown=json.dumps(", ".join(paths)))
    module = f"{paths[0]}/nvhook/runtime/wrapper.py"
    gone = (f"cannot run the runtime wrapper: {python} or {module} is missing: the "
            "installation moved or is gone (re-run `nvhook install`, or reinstall the nvhook "
            "package)")
    return {
        "nvhook_python": python, "nvhook_module": module, "nvhook_config": config or "",
        "nvhook_facts": facts_path(config, facts_dir), "nvhook_version": version,
        "nvhook_format": FACTS_FORMAT, "nvhook_stat": _stat(), "nvhook_stat_format": STAT_FORMAT,
        "nvhook_code": code, "nvhook_gone": gone,
        "nvhook_gone_json": json.dumps(gone)[1:-1],
        "nvhook_runtimes": "\n".join(DEFAULT_RUNTIMES), "nvhook_grep": GREP,
        "nvhook_needles": "\n".join(Settings().needles()), **front_lists(),
        "nvhook_default_config": DEFAULT_CONFIG_PATH, "nvhook_xdg_relative": XDG_RELATIVE,
    }


def _stat() -> str:
    """The `stat` the launcher runs: the first of STATS present (none: the facts are never
    trusted, every call with a config file goes to the wrapper)."""
    import os

    return next((p for p in STATS if os.access(p, os.X_OK)), STATS[0])


def render(python: str, paths: list[str], *, version: str, marker: str,
           config: str | None = None, facts_dir: str = FACTS_DIR) -> str:
    """The launcher text for `python` importing nvhook from `paths` (the first holds it)."""
    return render_file(FILE, f"{marker} (runtime), written by `nvhook install` (nvhook "
                       f"{version}); re-run it after moving nvhook.",
                       values(python, paths, version=version, config=config,
                              facts_dir=facts_dir))


_PYTHON = """import gc
import sys
gc.disable()  # a short-lived process: no collection passes (the hook's launcher does the same)
sys.path.extend({paths})
try:
    from nvhook.runtime.wrapper import launched
except ImportError as err:
    sys.stderr.write("%s: cannot import nvhook (%s) from %s: the installation moved or is gone "
                     "(re-run `nvhook install`, or reinstall the nvhook package)\\n"
                     % (sys.argv[1], err, {shown}))
    raise SystemExit(127)
launched(sys.argv[1:])
"""
