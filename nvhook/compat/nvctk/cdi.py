"""`nvidia-ctk cdi generate|list|transform root` with NVIDIA 1.20's flags and variables.

`generate` is nvhook's own spec (`nvhook.cdi.generate.host_spec`: the projection of the
engine's plans, nvhook's hooks); its flags select what NVIDIA's select: the output and its
format, the driver root (default `nvidia-container-cli.root`), the naming strategy, the kind
(`--vendor`/`--class`), the devices (`--device-id`, `--no-all-device`). Flags that would ask
nvhook for something it does not build (another discovery mode, NVIDIA's hook binary or
hook set, search paths) are refused by name. `list` names every device of every spec in the
spec dirs (`--spec-dir`, NVIDIA_CTK_CDI_SPEC_DIRS, else config.toml's
`nvidia-container-runtime.modes.cdi.spec-dirs`), sorted, as NVIDIA's does. `transform root`
rewrites host (or container) path prefixes of any spec, as NVIDIA's does.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from nvhook.compat.urfave import BOOL, SLICE, CliError, Flag, parse_command

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.compat.nvctk.context import Context

_G = "NVIDIA_CTK_CDI_GENERATE_"
_NO_HOOKS = ("nvhook's spec runs nvhook's own hooks (create-symlinks, update-ldcache, procfs), "
             "not NVIDIA's")
GENERATE_FLAGS = (
    Flag("config-search-path", SLICE, env=(_G + "CONFIG_SEARCH_PATHS",),
         refused="nvhook finds the driver's configuration files where the driver has them"),
    Flag("output", env=("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH",), help="the file (default stdout)"),
    Flag("format", env=(_G + "OUTPUT_FORMAT",), help="json | yaml (default: by extension)"),
    Flag("mode", aliases=("discovery-mode",), default="auto", env=(_G + "MODE",),
         help="auto | nvml | wsl | csv"),
    Flag("dev-root", env=("NVIDIA_CTK_DEV_ROOT",), help="must be the driver root"),
    Flag("device-name-strategy", SLICE, default=["index", "uuid"],
         env=(_G + "DEVICE_NAME_STRATEGIES",), help="index | uuid | type-index"),
    Flag("driver-root", env=("NVIDIA_CTK_DRIVER_ROOT",),
         help="the driver root (default: nvidia-container-cli.root)"),
    Flag("library-search-path", SLICE, env=(_G + "LIBRARY_SEARCH_PATHS",),
         refused="CSV mode reads nvidia-container-runtime.modes.csv.mount-spec-path"),
    Flag("nvidia-cdi-hook-path", aliases=("nvidia-ctk-path",), env=("NVIDIA_CTK_CDI_HOOK_PATH",),
         help="an nvhook launcher for the spec's hooks"),
    Flag("ldconfig-path", env=(_G + "LDCONFIG_PATH",),
         refused="the spec's hooks use nvidia-container-cli.ldconfig of config.toml"),
    Flag("vendor", aliases=("cdi-vendor",), default="nvidia.com", env=(_G + "VENDOR",)),
    Flag("class", aliases=("cdi-class",), default="gpu", env=(_G + "CLASS",)),
    Flag("csv.file", SLICE, env=(_G + "CSV_FILES",),
         refused="CSV mode reads nvidia-container-runtime.modes.csv.mount-spec-path"),
    Flag("csv.ignore-pattern", SLICE, env=(_G + "CSV_IGNORE_PATTERNS",),
         refused="CSV mode reads nvidia-container-runtime.modes.csv.mount-spec-path"),
    Flag("csv.compat-container-root", env=(_G + "CSV_CONTAINER_COMPAT_ROOT",),
         refused="CUDA compat in CSV mode is nvhook's own (config modes.csv.compat-container-root "
         "is read for the hook)"),
    Flag("disable-hook", SLICE, aliases=("disable-hooks",), env=(_G + "DISABLED_HOOKS",),
         refused=_NO_HOOKS),
    Flag("enable-hook", SLICE, aliases=("enable-hooks",), env=(_G + "ENABLED_HOOKS",),
         refused=_NO_HOOKS),
    Flag("feature-flag", SLICE, aliases=("feature-flags",), env=(_G + "FEATURE_FLAGS",),
         help="no-additional-gids-for-device-nodes, disable-nvsandboxutils"),
    Flag("no-all-device", BOOL, env=(_G + "NO_ALL_DEVICE",), help="no `all` device"),
    Flag("device-id", SLICE, aliases=("device-ids", "device", "devices"), default=["all"],
         env=(_G + "DEVICE_IDS",), help="restrict to these devices (index, UUID, G:I)"),
)
# feature flags whose meaning nvhook's spec already has (no additionalGids: cdiVersion 0.5.0
# for Podman 4.3; no nvsandboxutils: nvhook never uses it)
FEATURES_HELD = ("no-additional-gids-for-device-nodes", "disable-nvsandboxutils")
LIST_FLAGS = (Flag("spec-dir", SLICE, env=("NVIDIA_CTK_CDI_SPEC_DIRS",),
                   help="the directories to scan (default: config.toml's spec-dirs)"),)
TRANSFORM_FLAGS = (
    Flag("from", help="the root to be transformed"),
    Flag("input", default="-", help="the spec file ('-': stdin)"),
    Flag("output", help="the output file (default stdout)"),
    Flag("relative-to", default="host", help="host | container"),
    Flag("to", help="the replacement root"),
)
SUBCOMMANDS = [("generate", "Generate CDI specifications for use with CDI-enabled runtimes"),
               ("list", "List the available CDI devices"),
               ("transform", "Apply a transform to a CDI specification")]


def main(argv: list[str], ctx: Context) -> int:
    from nvhook.compat.nvctk.context import COMMANDS, PROG

    name = argv[0] if argv and not argv[0].startswith("-") else ""
    if name == "generate":
        return _generate(argv[1:], ctx)
    if name == "list":
        return _list(argv[1:], ctx)
    if name == "transform":
        return _transform(argv[1:], ctx)
    if name:
        raise CliError(f"{PROG} cdi: no command {name!r} (one of: generate, list, transform)")
    parse_command(argv, (), command=f"{PROG} cdi", summary=COMMANDS["cdi"],
                  environ=ctx.environ, subcommands=SUBCOMMANDS)
    return 0


# -- generate --------------------------------------------------------------------------------
def _generate(argv: list[str], ctx: Context) -> int:
    from nvhook.cdi.generate import DEFAULT_HOOK, format_of, host_spec, render
    from nvmount.records import replace

    p = parse_command(argv, GENERATE_FLAGS, command="nvidia-ctk cdi generate",
                      summary=SUBCOMMANDS[0][1], environ=ctx.environ)
    if p is None:
        return 0
    config = ctx.hook_config()
    root = p.string("driver-root") or config.cli.root or "/"
    mode = _mode(p.string("mode"), root)
    cli = replace(config.cli, root=root, root_origin="config")
    runtime = replace(config.runtime, mode="csv") if mode == "csv" else config.runtime
    config = replace(config, cli=cli, runtime=runtime)
    dev_root = p.string("dev-root")
    if dev_root and os.path.normpath(dev_root) != os.path.normpath(root):
        raise CliError(f"--dev-root {dev_root}: nvhook finds device nodes in the driver root "
                       f"({root}); a separate /dev root is not supported")
    _features(p.strings("feature-flag"), ctx)
    hook = p.string("nvidia-cdi-hook-path") or DEFAULT_HOOK
    if os.path.basename(hook) in ("nvidia-cdi-hook", "nvidia-ctk"):
        raise CliError(f"--nvidia-cdi-hook-path {hook}: {_NO_HOOKS}; name an nvhook launcher "
                       f"(default {DEFAULT_HOOK})")
    spec = host_spec(config, hook_path=hook, strategy=_strategy(p.strings("device-name-strategy")))
    spec = select_devices(spec, p.strings("device-id"), all_device=not p.boolean("no-all-device"))
    spec["kind"] = _kind(p.string("vendor"), p.string("class"))
    out = p.string("output")
    text = render(spec, format_of(out, p.string("format") or None))
    if out:
        from nvhook.cdi.generate import write_atomically

        write_atomically(out, text)
        ctx.log.info(f"Generated CDI spec with version {spec['cdiVersion']}")
    else:
        sys.stdout.write(text)
    return 0


def _mode(mode: str, root: str) -> str:
    if mode in ("auto", "nvml", "csv"):
        return mode
    if mode == "wsl":
        from nvmount.api import is_wsl

        if not is_wsl(root):
            raise CliError(f"--mode=wsl: {root} is not a WSL2 root (no dev/dxg)")
        return mode
    if mode in ("gds", "mofed", "gdrcopy", "nvswitch"):
        raise CliError(f"--mode={mode}: not supported by nvhook's drop-in: nvhook's spec has a "
                       f"`{mode}` device in nvidia.com/gpu (NVIDIA_{mode.upper()}=enabled)")
    if mode in ("imex", "management"):
        raise CliError(f"--mode={mode}: not supported by nvhook's drop-in (nvhook generates "
                       "the GPU spec only)")
    raise CliError(f"--mode={mode}: unknown mode (auto | nvml | wsl | csv)")


def _strategy(strategies: list[str]) -> str:
    wanted = set(strategies)
    if wanted - {"index", "uuid", "type-index"}:
        raise CliError(f"invalid device name strategy: {sorted(wanted)} (index, uuid, "
                       "type-index)")
    if wanted in ({"uuid"}, {"type-index"}):
        return wanted.pop()
    if "type-index" not in wanted:
        return "index"  # nvhook's `index` names every device by index and by UUID
    raise CliError(f"--device-name-strategy {','.join(strategies)}: type-index cannot be "
                   "combined with other strategies in nvhook's spec")


def _kind(vendor: str, cls: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\.[A-Za-z0-9._-]+", vendor):
        raise CliError(f"invalid vendor {vendor!r}: a domain name such as nvidia.com")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", cls):
        raise CliError(f"invalid class {cls!r}: letters, digits, '-' and '_'")
    return f"{vendor}/{cls}"


def _features(flags: list[str], ctx: Context) -> None:
    for flag in flags:
        if flag not in FEATURES_HELD:
            raise CliError(f"--feature-flag={flag}: not supported by nvhook's drop-in "
                           f"(supported: {', '.join(FEATURES_HELD)})")
        ctx.log.debug(f"feature flag {flag}: nvhook's spec already does this")


def select_devices(spec: dict[str, Any], ids: list[str], *, all_device: bool
                   ) -> dict[str, Any]:
    """`spec` restricted to the devices named by `ids` ("all": every one) and its `all`
    device rebuilt from them (or dropped). Pure: a projection of the spec."""
    devices = [d for d in spec["devices"] if d.get("name") != "all"]
    if set(ids) != {"all"}:
        by_name = {d["name"]: d for d in devices}
        missing = [i for i in ids if i not in by_name]
        if missing:
            raise CliError(f"unknown device id(s) {', '.join(missing)} (see nvidia-ctk cdi "
                           "list, or nvhook list -g)")
        chosen = [by_name[i]["containerEdits"] for i in ids]
        devices = [d for d in devices if d["containerEdits"] in chosen]
    nodes: dict[str, Any] = {}
    for device in devices:
        if device["name"] not in ("gds", "mofed", "nvswitch", "gdrcopy"):
            for node in device["containerEdits"].get("deviceNodes", ()):
                nodes.setdefault(node["path"], node)
    if all_device and nodes:
        devices.append({"name": "all", "containerEdits": {"deviceNodes": list(nodes.values())}})
    return {**spec, "devices": devices}


# -- list ------------------------------------------------------------------------------------
def _list(argv: list[str], ctx: Context) -> int:
    p = parse_command(argv, LIST_FLAGS, command="nvidia-ctk cdi list",
                      summary=SUBCOMMANDS[1][1], environ=ctx.environ)
    if p is None:
        return 0
    dirs = p.strings("spec-dir") or list(ctx.hook_config().runtime.modes_cdi_spec_dirs)
    from nvhook.cdi.check import spec_files

    names: set[str] = set()
    for path in spec_files(dirs, kind=None):  # root's specs only (nvmount.fs.trusted)
        try:
            spec = read_any_spec(path)
        except CliError as err:
            ctx.log.warning(str(err))
            continue
        names.update(f"{spec['kind']}={d['name']}" for d in spec["devices"])
    ctx.log.info(f"Found {len(names)} CDI devices")
    for name in sorted(names):
        print(name)
    return 0


def read_any_spec(path: str) -> dict[str, Any]:
    """A CDI spec file of any tool (YAML or JSON), read and checked as nvhook reads every spec
    (`nvhook.cdi.check.read_spec`: a trusted regular file, PyYAML, every field checked)."""
    from nvhook.cdi.check import read_spec
    from nvhook.errors import CdiError

    try:
        return read_spec(path)
    except CdiError as err:
        raise CliError(str(err)) from err


def _parse_spec(data: bytes, where: str) -> dict[str, Any]:
    """A CDI spec document from bytes (stdin), checked as `read_any_spec` checks a file."""
    from nvhook.cdi.document import check_spec, parse_document
    from nvhook.errors import CdiError

    try:
        return check_spec(parse_document(data, where), where)
    except CdiError as err:
        raise CliError(str(err)) from err


# -- transform root --------------------------------------------------------------------------
def _transform(argv: list[str], ctx: Context) -> int:
    if not argv or argv[0] != "root":
        if argv and not argv[0].startswith("-"):
            raise CliError(f"nvidia-ctk cdi transform: no command {argv[0]!r} (one of: root)")
        parse_command(argv, (), command="nvidia-ctk cdi transform", summary=SUBCOMMANDS[2][1],
                      environ=ctx.environ, subcommands=[("root", "Apply a root transform")])
        return 0
    p = parse_command(argv[1:], TRANSFORM_FLAGS, command="nvidia-ctk cdi transform root",
                      summary="Apply a root transform to a CDI specification", environ=ctx.environ)
    if p is None:
        return 0
    relative = p.string("relative-to")
    if relative not in ("host", "container"):
        raise CliError(f"invalid --relative-to value: {relative} (host | container)")
    source = p.string("input")
    if source in ("", "-"):
        spec = _parse_spec(sys.stdin.buffer.read(16 << 20) if ctx.stdin is None else ctx.stdin,
                           "stdin")
    else:
        spec = read_any_spec(source)
    transform_root(spec, p.string("from"), p.string("to"), relative)
    from nvhook.cdi.generate import format_of, render, write_atomically

    out = p.string("output")
    text = render(spec, format_of(out, None))
    if out:
        write_atomically(out, text)
    else:
        sys.stdout.write(text)
    return 0


def transform_root(spec: dict[str, Any], old: str, new: str, relative: str) -> None:
    """Replace the root `old` with `new` in the host paths (`relative` = "host") or the
    container paths ("container") of every edit of `spec`, in place (NVIDIA's rules). The root
    matches at a path component boundary only, with or without a trailing slash (NVIDIA's
    #1955: a root /run/nvidia/driver leaves /run/nvidia/driver-backup alone)."""
    root = old.rstrip("/")

    def path(value: str) -> str:
        if not old or old == new or not (value == root or value.startswith(root + "/")):
            return value
        return os.path.normpath(new + "/" + value[len(root):]) if new else value

    def arg(value: str) -> str:
        return "::".join(path(part) for part in value.split("::", 1))

    host = relative == "host"
    for edits in [d.get("containerEdits") or {} for d in spec.get("devices", ())] + [
            spec.get("containerEdits") or {}]:
        for node in edits.get("deviceNodes") or ():
            if host:
                node["hostPath"] = path(node.get("hostPath") or node["path"])
            else:
                node["path"] = path(node["path"])
        for mount in edits.get("mounts") or ():
            key = "hostPath" if host else "containerPath"
            mount[key] = path(mount[key])
        for hook in edits.get("hooks") or ():
            stage = hook.get("hookName")
            if (stage != "startContainer") == host:
                hook["path"] = path(hook["path"])
            if (stage in ("createContainer", "startContainer")) != host:
                hook["args"] = [arg(a) for a in hook.get("args") or ()]
