"""`nvhook runtime configure`: register nvhook with a container engine (hook-spec 4.1).

    nvhook runtime configure [--runtime=docker|containerd|crio|podman] [--config=PATH]
        [--drop-in=PATH] [--hooks-dir=DIR] [--runtime-name=NAME] [--runtime-path=PATH]
        [--hook-path=PATH] [--hook-config=PATH] [--config-mode=config-file|oci-hook]
        [--set-as-default] [--enable-cdi] [--dry-run] [--remove]

docker: daemon.json (`--config`, default /etc/docker/daemon.json) gets `runtimes.<name>`.
containerd: a drop-in (`--drop-in`, default /etc/containerd/conf.d/99-nvidia.toml) built from
the main config (`--config`, default /etc/containerd/config.toml) and what it imports; the main
file gets an `imports` entry only when it does not import the drop-in yet
(nvhook.admin.configure.ctrd).
crio: a drop-in (default /etc/crio/crio.conf.d/99-nvidia.toml) built from /etc/crio/crio.conf;
with `--config-mode=oci-hook` the hooks.d file instead (default dir
/usr/share/containers/oci/hooks.d, CRI-O's). podman: the hooks.d file `oci-nvidia-hook.json`
in `--hooks-dir` (default /etc/containers/oci/hooks.d), for rootful and rootless podman.

The runtime path defaults to the `nvidia-container-runtime` found on PATH or in the default
directories, the hook path to `nvidia-container-runtime-hook` likewise; both are written as
absolute paths (a daemon resolves a bare name on *its* PATH, at its start). Existing content is
kept; a file that does not parse is refused, as is output that would not read back as meant;
files are replaced atomically (same mode; new ones 0644); running it twice changes nothing the
second time. `--dry-run` prints the file instead. It ends by saying what to restart.
`--remove` takes the runtime out again (containerd: the main file as it was, byte for byte).
NVIDIA's flag names (`--nvidia-runtime-name`, `--nvidia-set-as-default`, ...) are accepted.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from nvhook.admin.configure.files import (
    DEFAULTS,
    DROP_INS,
    HOOKS_DIRS,
    read_text,
    read_toml,
    write_atomic,
)
from nvhook.errors import ConfigureError, UsageError

if TYPE_CHECKING:
    from nvhook.flags import GlobalOptions



class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> _Parser:
    p = _Parser(prog="nvhook runtime configure",
                description="register nvhook's runtime or hook with a container engine")
    p.add_argument("--runtime", default="docker", choices=("docker", "containerd", "crio",
                                                           "podman"))
    p.add_argument("--config", metavar="PATH", help="the engine's main config file")
    p.add_argument("--drop-in", "--drop-in-config", dest="drop_in", metavar="PATH")
    p.add_argument("--hooks-dir", "--oci-hook-dir", dest="hooks_dir", metavar="DIR")
    p.add_argument("--runtime-name", "--nvidia-runtime-name", dest="name", default="nvidia")
    p.add_argument("--runtime-path", "--nvidia-runtime-path", dest="runtime_path")
    p.add_argument("--hook-path", "--nvidia-runtime-hook-path", dest="hook_path")
    p.add_argument("--hook-config", metavar="PATH",
                   help="hooks.d: the config file the hook uses (NVIDIA_CTK_CONFIG_FILE_PATH)")
    p.add_argument("--config-mode", default="config-file", choices=("config-file", "oci-hook"))
    p.add_argument("--set-as-default", "--nvidia-set-as-default", dest="set_default",
                   action="store_true")
    p.add_argument("--enable-cdi", "--cdi.enabled", "--cdi.enable", dest="enable_cdi",
                   action="store_true",
                   help="docker: features.cdi; containerd 1.7+: the CRI plugin's enable_cdi")
    p.add_argument("--dry-run", action="store_true", help="print the result, write nothing")
    p.add_argument("--remove", action="store_true", help="remove the runtime again")
    return p


def main(argv: list[str], opts: GlobalOptions) -> int:
    """`nvhook runtime <action>`: only `configure` exists."""
    if not argv or argv[0] != "configure":
        raise UsageError("nvhook runtime: expected `configure` (nvhook runtime configure "
                         "--runtime=docker|containerd|crio|podman ...)")
    args = _parser().parse_args(argv[1:])
    args.config = args.config or opts.config_path  # `--config` is also nvhook's global flag
    if args.remove:
        return _remove(args)
    if args.runtime == "podman" or args.config_mode == "oci-hook":
        return _hooks_file(args)
    if args.runtime == "docker":
        return _docker(args)
    if args.runtime == "containerd":
        return _containerd(args)
    return _drop_in(args)


def find_installed(name: str) -> str:
    """The absolute path of an installed launcher `name` (PATH, then the default dirs)."""
    from nvhook.launch.lowlevel import search_dirs

    for directory in search_dirs(os.environ.get("PATH", "")):
        path = os.path.join(directory, name)
        if directory.startswith("/") and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ConfigureError(f"find {name}: not installed on PATH or in /usr/local/bin, /usr/bin "
                         "(run `nvhook install`, or pass its path)")


def _absolute(path: str | None, name: str, flag: str) -> str:
    path = path or find_installed(name)
    if not path.startswith("/"):
        raise ConfigureError(f"{flag} {path!r}: must be an absolute path")
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"warning: {path} is not an executable file (yet)\n")
    return path


def _docker(args: argparse.Namespace) -> int:
    from nvhook.admin.configure import docker

    path = args.config or DEFAULTS["docker"]
    runtime_path = args.runtime_path or find_installed("nvidia-container-runtime")
    current = read_text(path)
    doc = docker.configure(docker.decode(current or "", path), args.name, runtime_path,
                           set_default=args.set_default, where=path,
                           enable_cdi=args.enable_cdi)
    text = docker.render(doc)
    docker.decode(text, path)  # reads back
    return _finish(args, path, current, text, "docker")


def _drop_in(args: argparse.Namespace) -> int:
    from nvhook.admin.configure import crio
    from nvhook.admin.configure.tomlw import render_checked

    main_path = args.config or DEFAULTS[args.runtime]
    drop_path = args.drop_in or DROP_INS[args.runtime]
    runtime_path = _absolute(args.runtime_path, "nvidia-container-runtime", "--runtime-path")
    main_doc, current = read_toml(main_path), read_text(drop_path)
    drop_doc = read_toml(drop_path) if current is not None else None
    if args.enable_cdi:
        sys.stderr.write("warning: --enable-cdi ignored for crio (CRI-O reads CDI specs "
                         "without a setting)\n")
    doc = crio.configure(main_doc, drop_doc, args.name, runtime_path,
                         set_default=args.set_default, where=drop_path)
    return _finish(args, drop_path, current, render_checked(doc, drop_path), args.runtime)


def _containerd(args: argparse.Namespace) -> int:
    from nvhook.admin.configure import ctrd
    from nvhook.admin.configure.hints import restart_hint

    runtime_path = _absolute(args.runtime_path, "nvidia-container-runtime", "--runtime-path")
    rc = ctrd.configure(args.config or DEFAULTS["containerd"],
                        args.drop_in or DROP_INS["containerd"], runtime_path, name=args.name,
                        set_default=args.set_default, enable_cdi=args.enable_cdi,
                        dry_run=args.dry_run)
    if not args.dry_run:
        print(restart_hint("containerd", args.name))
    return rc


def _remove(args: argparse.Namespace) -> int:
    """`--remove`: the runtime (or the hooks file) out of the engine's configuration."""
    from nvhook.admin.configure import ctrd, removal

    if args.runtime == "containerd" and args.config_mode != "oci-hook":
        rc = ctrd.remove(args.config or DEFAULTS["containerd"],
                         args.drop_in or DROP_INS["containerd"], name=args.name,
                         dry_run=args.dry_run)
    else:
        rc = removal.remove(args)
    if not args.dry_run:
        from nvhook.admin.configure.hints import removal_hint

        print(removal_hint(args.runtime if args.config_mode != "oci-hook" else "podman"))
    return rc


def _hooks_file(args: argparse.Namespace) -> int:
    from nvhook.admin.configure import hooksd

    directory = args.hooks_dir or HOOKS_DIRS.get(args.runtime, HOOKS_DIRS["podman"])
    hook = _absolute(args.hook_path, "nvidia-container-runtime-hook", "--hook-path")
    config = os.path.abspath(args.hook_config) if args.hook_config else None
    path = os.path.join(directory, hooksd.FILE_NAME)
    text = hooksd.render(hooksd.hook_document(hook, config))
    return _finish(args, path, read_text(path), text, "podman" if args.runtime != "crio"
                   else "crio")


def _finish(args: argparse.Namespace, path: str, current: str | None, text: str,
            engine: str) -> int:
    from nvhook.admin.configure.hints import restart_hint

    if args.dry_run:
        sys.stdout.write(text)
        return 0
    if current == text:
        print(f"{path} is already up to date (nothing written)")
    else:
        write_atomic(path, text)
        print(f"Wrote updated config to {path}")
    print(restart_hint(engine, args.name))
    if engine == "docker":
        from nvhook.admin.configure.hints import GPUS_FLAG

        try:
            found = find_installed("nvidia-container-runtime-hook")
        except ConfigureError:
            found = "not on this PATH"
        print(GPUS_FLAG.format(found=found))
    return 0
