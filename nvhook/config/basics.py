"""What every path needs of the configuration before it loads anything: where config.toml is
looked for, the low-level runtimes default, Go's TrimSpace and the swarm-resource names.
Pure, no imports (the hook's screen and the
runtime wrapper import it before anything else).

Lookup order (`candidates`; the first required one, else the first optional one that exists):

    --config PATH                           the hook's command line            required
    NVIDIA_CTK_CONFIG_FILE_PATH             the environment                    required
    the launcher's `nvhook install --config` (the runtime wrapper)             required
    $XDG_CONFIG_HOME/nvidia-container-runtime/config.toml                      optional
    /etc/nvidia-container-runtime/config.toml                                  optional

Each reader adds its own checks on top (the hook: absolute paths from the environment, the
trusted-path rule; `nvhook.config.load`). The runtime launcher's sh copy of the order reads
these values from its header (`nvhook.launch.runtime_sh`), and a test checks the variable
names it spells.

The runtimes default is NVIDIA 1.20's (`runc`, `crun`; 1.17.8 listed `docker-runc` first,
which 1.18 dropped): `nvidia-container-runtime.runtimes` in docs/configuration.md.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping

CONFIG_PATH_ENV = "NVIDIA_CTK_CONFIG_FILE_PATH"
XDG_ENV = "XDG_CONFIG_HOME"
XDG_RELATIVE = "nvidia-container-runtime/config.toml"
DEFAULT_CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
EXPLICIT = "--config"
RECORDED = "recorded"  # what named a file the launcher recorded
DEFAULT_RUNTIMES = ("runc", "crun")


def candidates(environ: Mapping[str, str], explicit: str | None = None,
               recorded: str | None = None, default: str = DEFAULT_CONFIG_PATH
               ) -> list[tuple[str, str, bool]]:
    """(path, what names it, required) in lookup order (module docstring)."""
    get = environ.get
    out: list[tuple[str, str, bool]] = []
    if explicit:
        out.append((explicit, EXPLICIT, True))
    named = get(CONFIG_PATH_ENV)
    if named:
        out.append((named, CONFIG_PATH_ENV, True))
    if recorded:
        out.append((recorded, RECORDED, True))
    xdg = get(XDG_ENV, "")
    if xdg:
        out.append((f"{xdg}/{XDG_RELATIVE}", XDG_ENV, False))
    out.append((default, "", False))
    return out


_GO_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)


def go_trim_space(value: str) -> str:
    """Go's `strings.TrimSpace` (Unicode White_Space; Python's strip() also removes \\x1c-\\x1f)."""
    start, end = 0, len(value)
    while start < end and value[start] in _GO_SPACE:
        start += 1
    while end > start and value[end - 1] in _GO_SPACE:
        end -= 1
    return value[start:end]


def swarm_names(swarm_resource: str) -> tuple[str, ...]:
    """`swarm-resource`'s variable names as NVIDIA splits them: on ",", Go-trimmed, no empties."""
    names = (go_trim_space(name) for name in swarm_resource.split(","))
    return tuple(name for name in names if name)
