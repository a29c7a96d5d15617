"""`nvhook runtime configure`: register nvhook with a container engine (hook-spec 4.1).

    nvhook runtime configure [--runtime=docker|containerd|crio|podman] [--config=PATH]
        [--drop-in=PATH] [--hooks-dir=DIR] [--runtime-name=NAME] [--runtime-path=PATH]
        [--hook-path=PATH] [--hook-config=PATH] [--config-mode=config-file|oci-hook]
        [--set-as-default] [--dry-run]

docker: daemon.json (`--config`, default /etc/docker/daemon.json) gets `runtimes.<name>`.
containerd: a drop-in (`--drop-in`, default /etc/containerd/conf.d/99-nvidia.toml) built from
the main config (`--config`, default /etc/containerd/config.toml), which is never written.
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
NVIDIA's flag names (`--nvidia-runtime-name`, `--nvidia-set-as-default`, ...) are accepted.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from nvhook.errors import ConfigureError, UsageError

if TYPE_CHECKING:
    from nvhook.flags import GlobalOptions

DEFAULTS = {
    "docker": "/etc/docker/daemon.json",
    "containerd": "/etc/containerd/config.toml",
    "crio": "/etc/crio/crio.conf",
}
DROP_INS = {"containerd": "/etc/containerd/conf.d/99-nvidia.toml",
            "crio": "/etc/crio/crio.conf.d/99-nvidia.toml"}
HOOKS_DIRS = {"podman": "/etc/containers/oci/hooks.d", "crio": "/usr/share/containers/oci/hooks.d"}
MAX_BYTES = 4 * 1024 * 1024


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
    p.add_argument("--dry-run", action="store_true", help="print the result, write nothing")
    return p


def main(argv: list[str], opts: GlobalOptions) -> int:
    """`nvhook runtime <action>`: only `configure` exists."""
    if not argv or argv[0] != "configure":
        raise UsageError("nvhook runtime: expected `configure` (nvhook runtime configure "
                         "--runtime=docker|containerd|crio|podman ...)")
    args = _parser().parse_args(argv[1:])
    args.config = args.config or opts.config_path  # `--config` is also nvhook's global flag
    if args.runtime == "podman" or args.config_mode == "oci-hook":
        return _hooks_file(args)
    if args.runtime == "docker":
        return _docker(args)
    return _drop_in(args)


def find_installed(name: str) -> str:
    """The absolute path of an installed launcher `name` (PATH, then the default dirs)."""
    from nvhook.runtime.lowlevel import search_dirs

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


def read_text(path: str) -> str | None:
    """The file's text, None when it does not exist."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import read_file

    try:  # root edits only files root alone can change (nvmount.fs.trusted)
        data = read_file(os.path.abspath(path), "edit", MAX_BYTES)
    except FileNotFoundError:
        return None
    except TrustError as err:
        raise ConfigureError(f"refuse to {err}") from err
    except OSError as err:
        raise ConfigureError(f"read {path}: {err.strerror}") from err
    if len(data) > MAX_BYTES:
        raise ConfigureError(f"refuse to edit {path}: larger than 4 MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigureError(f"refuse to edit {path}: not UTF-8 ({err})") from err


def read_toml(path: str) -> dict[str, Any] | None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python < 3.11: tomli, a dependency there
        import tomli as tomllib

    text = read_text(path)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigureError(f"refuse to use {path}: not valid TOML: {err} (fix the file "
                             "first; nothing was written)") from err


def _docker(args: argparse.Namespace) -> int:
    from nvhook.configure import docker

    path = args.config or DEFAULTS["docker"]
    runtime_path = args.runtime_path or find_installed("nvidia-container-runtime")
    current = read_text(path)
    doc = docker.configure(docker.decode(current or "", path), args.name, runtime_path,
                           set_default=args.set_default, where=path)
    text = docker.render(doc)
    docker.decode(text, path)  # reads back
    return _finish(args, path, current, text, "docker")


def _drop_in(args: argparse.Namespace) -> int:
    from nvhook.configure import containerd, crio
    from nvhook.configure.tomlw import render_checked

    main_path = args.config or DEFAULTS[args.runtime]
    drop_path = args.drop_in or DROP_INS[args.runtime]
    runtime_path = _absolute(args.runtime_path, "nvidia-container-runtime", "--runtime-path")
    main_doc, current = read_toml(main_path), read_text(drop_path)
    drop_doc = read_toml(drop_path) if current is not None else None
    if args.runtime == "crio":
        doc = crio.configure(main_doc, drop_doc, args.name, runtime_path,
                             set_default=args.set_default, where=drop_path)
    else:
        version = containerd.config_version(main_doc, _containerd_default_version())
        doc = containerd.configure(main_doc, drop_doc, version, args.name, runtime_path,
                                   set_default=args.set_default, where=drop_path)
        _containerd_warnings(main_doc, main_path, drop_path, version)
    return _finish(args, drop_path, current, render_checked(doc, drop_path), args.runtime)


def _containerd_default_version() -> int:
    """No main config: version 3 for a containerd 2.x binary, else 2."""
    import subprocess

    try:
        out = subprocess.run(["containerd", "--version"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except OSError:
        return 2
    words = [w for w in out.split() if w.startswith(("v1.", "v2.", "1.", "2."))]
    return 3 if words and words[0].lstrip("v").startswith("2.") else 2


def _containerd_warnings(main: dict[str, Any] | None, main_path: str, drop_path: str,
                         version: int) -> None:
    from nvhook.configure import containerd

    if main is None or not containerd.imports_drop_in(main, main_path, drop_path):
        directory = os.path.dirname(drop_path)
        sys.stderr.write(
            f"note: containerd reads {drop_path} only if {main_path} imports it: add\n"
            f'  imports = ["{directory}/*.toml"]\n'
            f"at the top of {main_path} (nvhook never edits the main file)\n")
    if containerd.cri_disabled(main, version):
        sys.stderr.write(f"note: the CRI plugin is disabled in {main_path}: Kubernetes cannot "
                         "use the runtime (ctr --runc-binary still can)\n")


def _hooks_file(args: argparse.Namespace) -> int:
    from nvhook.configure import hooksd

    directory = args.hooks_dir or HOOKS_DIRS.get(args.runtime, HOOKS_DIRS["podman"])
    hook = _absolute(args.hook_path, "nvidia-container-runtime-hook", "--hook-path")
    config = os.path.abspath(args.hook_config) if args.hook_config else None
    path = os.path.join(directory, hooksd.FILE_NAME)
    text = hooksd.render(hooksd.hook_document(hook, config))
    return _finish(args, path, read_text(path), text, "podman" if args.runtime != "crio"
                   else "crio")


def _finish(args: argparse.Namespace, path: str, current: str | None, text: str,
            engine: str) -> int:
    from nvhook.configure.hints import restart_hint

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
        from nvhook.configure.hints import GPUS_FLAG

        try:
            found = find_installed("nvidia-container-runtime-hook")
        except ConfigureError:
            found = "not on this PATH"
        print(GPUS_FLAG.format(found=found))
    return 0


def write_atomic(path: str, text: str) -> None:
    """Replace `path` with `text` via a new file in its directory (mode kept without
    setuid/setgid bits, set with fchmod on the new file; new: 0644); every directory on the
    way trusted, missing ones made 0755 (`nvmount.fs.trusted`)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import write_atomic as write_trusted

    try:
        write_trusted(os.path.abspath(path), text.encode("utf-8"), "write", mode=0o644,
                      keep_mode=True, parents=True)
    except TrustError as err:
        raise ConfigureError(str(err)) from err
    except OSError as err:
        raise ConfigureError(f"write {path}: {err.strerror}") from err
