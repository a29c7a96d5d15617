"""`nvidia-ctk runtime configure`: NVIDIA 1.20's flags, translated to `nvhook runtime
configure` (nvhook.admin.configure), which writes the file.

    --runtime docker|containerd|crio (default docker)   --config PATH (the engine's file)
    --drop-in-config PATH (1.20's defaults: /etc/containerd/conf.d/99-nvidia.toml,
        /etc/crio/crio.conf.d/99-nvidia.toml; none for docker)
    --nvidia-runtime-name NAME   --nvidia-runtime-path|--runtime-path PATH
    --nvidia-set-as-default|--set-as-default   --cdi.enabled|--cdi.enable|--enable-cdi
    --config-mode oci-hook [--oci-hook-path FILE] [--nvidia-runtime-hook-path PATH]
    --dry-run (the file on stdout)

Differences, each said once on stderr or in docs/nvidia-cli.md: the runtime path written is
the installed wrapper's absolute path unless one is given (1.20 writes the bare
`nvidia-container-runtime` for docker): the one installed beside this nvidia-ctk first (an
`nvhook install --prefix` directory need not be on PATH), else the one on PATH; containerd
and CRI-O are configured through a drop-in only (`--drop-in-config=""`, which makes 1.20
rewrite the main file, is refused); `--config-source=command` is refused (nvhook reads the
file).
"""

from __future__ import annotations

import os

from nvhook.compat.urfave import BOOL, CliError, Flag, parse_command

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.compat.nvctk.context import Context

RUNTIMES = ("containerd", "crio", "docker")
SPECIFIC_DEFAULT = "RUNTIME_SPECIFIC_DEFAULT"
HOOKS_FILE = "oci-nvidia-hook.json"
FLAGS = (
    Flag("dry-run", BOOL, help="update the runtime configuration as required but don't write "
         "changes to disk"),
    Flag("runtime", default="docker", help="the target runtime engine; one of [containerd, "
         "crio, docker]"),
    Flag("config", help="path to the config file for the target runtime"),
    Flag("drop-in-config", default=SPECIFIC_DEFAULT, help="path to the NVIDIA-specific config "
         "file to create"),
    Flag("executable-path", help="the runtime executable (only with --config-source=command)"),
    Flag("config-mode", help="config-file (default) or oci-hook"),
    Flag("config-source", default="file", help="file (nvhook reads the file)"),
    Flag("oci-hook-path", help="the OCI hook file to write with --config-mode=oci-hook"),
    Flag("nvidia-runtime-name", default="nvidia", help="the name of the NVIDIA runtime"),
    Flag("nvidia-runtime-path", aliases=("runtime-path",), default="nvidia-container-runtime",
         help="the NVIDIA runtime executable (default: the installed wrapper)"),
    Flag("nvidia-runtime-hook-path", default="/usr/bin/nvidia-container-runtime-hook",
         help="the hook executable (oci-hook mode)"),
    Flag("nvidia-set-as-default", BOOL, aliases=("set-as-default",),
         help="set the NVIDIA runtime as the default runtime"),
    Flag("cdi.enabled", BOOL, aliases=("cdi.enable", "enable-cdi"),
         help="Enable CDI in the configured runtime"),
)


def main(argv: list[str], ctx: Context) -> int:
    from nvhook.compat.nvctk.context import COMMANDS, PROG

    sub = [("configure", "Add a runtime to the specified container engine")]
    if not argv or argv[0] != "configure":
        if argv and not argv[0].startswith("-"):
            raise CliError(f"{PROG} runtime: no command {argv[0]!r} (one of: configure)")
        parse_command(argv, (), command=f"{PROG} runtime", summary=COMMANDS["runtime"],
                      environ=ctx.environ, subcommands=sub)
        return 0
    p = parse_command(argv[1:], FLAGS, command=f"{PROG} runtime configure",
                      summary=sub[0][1], environ=ctx.environ)
    if p is None:
        return 0
    from nvhook.admin.configure.runtime_configure import main as configure
    from nvhook.flags import GlobalOptions

    return configure(["configure", *translate(p.values, p.given, ctx)],
                     GlobalOptions(config_path=None, cwd=ctx.cwd))


def translate(v: dict[str, object], given: set[str], ctx: Context) -> list[str]:
    """NVIDIA's flags (values, which were given) -> `nvhook runtime configure` arguments."""
    runtime = str(v["runtime"])
    if runtime not in RUNTIMES:
        hint = " (podman: nvhook runtime configure --runtime=podman)" if runtime == "podman" \
            else ""
        raise CliError(f"unrecognized runtime '{runtime}'{hint}")
    out = [f"--runtime={runtime}", f"--runtime-name={v['nvidia-runtime-name']}"]
    if v["config"]:
        out.append(f"--config={v['config']}")
    if "nvidia-runtime-path" in given:
        path = str(v["nvidia-runtime-path"])
        if runtime != "docker" and not path.startswith("/"):
            raise CliError(f'the NVIDIA runtime path "{path}" is not an absolute path')
        out.append(f"--runtime-path={path}")
    else:
        out += _sibling(ctx)
    out += _source(v, runtime, ctx)
    out += _mode(v, given, runtime, ctx)
    if v["nvidia-set-as-default"]:
        out.append("--set-as-default")
    if v["cdi.enabled"]:
        if runtime == "crio":
            ctx.log.warning(f"Ignoring cdi.enabled flag for {runtime}")
        else:
            out.append("--enable-cdi")
    if v["dry-run"]:
        out.append("--dry-run")
    return out


def _sibling(ctx: Context) -> list[str]:
    """`--runtime-path` of the nvidia-container-runtime installed beside this nvidia-ctk
    (`nvhook install --prefix DIR` fills DIR with both; DIR need not be on PATH), when it is
    nvhook's and root may run it (`nvhook.programs`); else [] (the PATH lookup)."""
    if not ctx.program:
        return []
    from nvhook.launch.write import MARKER
    from nvhook.programs import untrusted

    where = os.path.dirname(os.path.join(ctx.cwd or "/", ctx.program))
    path = os.path.normpath(os.path.join(where, "nvidia-container-runtime"))
    try:
        with open(path, "rb") as f:
            ours = MARKER.encode() in f.read(4096)
    except OSError:
        return []
    if not ours or not os.access(path, os.X_OK) or untrusted(path) is not None:
        return []
    return [f"--runtime-path={path}"]


def _source(v: dict[str, object], runtime: str, ctx: Context) -> list[str]:
    source = str(v["config-source"])
    if source not in ("file", "command"):
        raise CliError(f"unrecognized Config Source: {source}")
    if source == "command" and runtime != "docker":
        raise CliError("--config-source=command is not supported by nvhook's drop-in: nvhook "
                       f"reads {runtime}'s config file (--config)")
    if source == "command":
        ctx.log.warning("A command Config Source is not supported for docker; using file")
    if v["executable-path"]:
        ctx.log.warning(f"Ignoring executable-path={v['executable-path']!r} flag for "
                        f"{runtime} (used only with --config-source=command)")
    return []


def _mode(v: dict[str, object], given: set[str], runtime: str, ctx: Context) -> list[str]:
    mode = str(v["config-mode"])
    if mode in ("oci-hook", "hook"):
        ctx.log.warning(f'The "{mode}" config-mode is deprecated')
        hook = str(v["nvidia-runtime-hook-path"])
        if not hook.startswith("/"):
            raise CliError(f'the NVIDIA runtime hook path "{hook}" is not an absolute path')
        out = ["--config-mode=oci-hook", f"--hook-path={hook}"]
        target = str(v["oci-hook-path"])
        if not target:
            return [*out, "--dry-run"]  # 1.20 prints the hook file on stdout
        if os.path.basename(target) != HOOKS_FILE:
            raise CliError(f"--oci-hook-path {target}: nvhook writes the hook file as "
                           f"{HOOKS_FILE} (use DIR/{HOOKS_FILE})")
        return [*out, f"--hooks-dir={os.path.dirname(ctx.path(target)) or '.'}"]
    if mode not in ("", "config-file", "config"):
        ctx.log.warning(f"Ignoring unsupported config mode for {runtime}: {mode!r}")
    return _drop_in(str(v["drop-in-config"]), runtime)


def _drop_in(drop_in: str, runtime: str) -> list[str]:
    if drop_in == SPECIFIC_DEFAULT:
        return []
    if runtime == "docker":
        if drop_in:
            raise CliError(f"runtime {runtime} does not support drop-in configs")
        return []
    if not drop_in:
        raise CliError(f"--drop-in-config=\"\" (write {runtime}'s main config file) is not "
                       "supported by nvhook's drop-in: nvhook writes a drop-in only "
                       "(use --drop-in-config=PATH)")
    if not drop_in.startswith("/"):
        raise CliError(f'the drop-in-config path "{drop_in}" is not an absolute path')
    return [f"--drop-in={drop_in}"]
