"""`nvhook runtime configure --remove` for docker, CRI-O and the hooks.d file (containerd's is
`ctrd.remove`): the runtime entry leaves the file, a default naming it goes too, a drop-in or
hooks file that holds nothing else is deleted. Everything else in the files stays.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from typing import Any

from nvhook.admin.configure.files import (
    DEFAULTS,
    DROP_INS,
    HOOKS_DIRS,
    read_text,
    read_toml,
    write_atomic,
)
from nvhook.errors import ConfigureError


def without_runtime(doc: dict[str, Any], keys: tuple[str, ...], default_key: str,
                    name: str) -> dict[str, Any]:
    """`doc` without `keys...[name]`, and without `default_key` (next to the runtimes table's
    parent) when it names `name`. Pure."""
    out = copy.deepcopy(doc)
    parent: Any = out
    for k in keys[:-1]:
        parent = parent.get(k) if isinstance(parent, dict) else None
    runtimes = parent.get(keys[-1]) if isinstance(parent, dict) else None
    if isinstance(runtimes, dict):
        runtimes.pop(name, None)
        if not runtimes:
            del parent[keys[-1]]
    if isinstance(parent, dict) and parent.get(default_key) == name:
        del parent[default_key]
    return out


def is_empty(doc: Any) -> bool:
    """A document of nothing but empty tables."""
    return isinstance(doc, dict) and all(is_empty(v) for v in doc.values())


def remove(args: argparse.Namespace) -> int:
    if args.runtime == "podman" or args.config_mode == "oci-hook":
        from nvhook.admin.configure import hooksd

        directory = args.hooks_dir or HOOKS_DIRS.get(args.runtime, HOOKS_DIRS["podman"])
        path = os.path.join(directory, hooksd.FILE_NAME)
        return _finish(path, None, args.dry_run, missing=not os.path.lexists(path))
    if args.runtime == "docker":
        return _remove_docker(args.config or DEFAULTS["docker"], args.name, args.dry_run)
    return _remove_crio(args.drop_in or DROP_INS["crio"], args.name, args.dry_run)


def _remove_docker(path: str, name: str, dry_run: bool) -> int:
    from nvhook.admin.configure import docker

    current = read_text(path)
    if current is None:
        return _finish(path, None, dry_run, missing=True)
    doc = docker.decode(current, path)
    left = without_runtime(doc, ("runtimes",), "default-runtime", name)
    return _finish(path, current if left == doc else docker.render(left), dry_run,
                   current=current)


def _remove_crio(path: str, name: str, dry_run: bool) -> int:
    from nvhook.admin.configure.tomlw import render_checked

    current = read_text(path)
    doc = read_toml(path) if current is not None else None
    if doc is None:
        return _finish(path, None, dry_run, missing=True)
    left = without_runtime(doc, ("crio", "runtime", "runtimes"), "default_runtime", name)
    if left == doc:
        return _finish(path, current, dry_run, current=current)
    return _finish(path, None if is_empty(left) else render_checked(left, path), dry_run,
                   current=current)


def _finish(path: str, text: str | None, dry_run: bool, *, current: str | None = None,
            missing: bool = False) -> int:
    """Write `text` to `path` (None: delete the file)."""
    if missing:
        print(f"{path} does not exist (nothing to remove)")
        return 0
    if text is not None and text == current:
        print(f"{path} has no such runtime (nothing written)")
        return 0
    if dry_run:
        sys.stdout.write(f"would remove {path}\n" if text is None else text)
        return 0
    if text is None:
        try:
            os.unlink(path)
        except OSError as err:
            raise ConfigureError(f"remove {path}: {err.strerror}") from err
        print(f"Removed {path}")
    else:
        write_atomic(path, text)
        print(f"Wrote updated config to {path}")
    return 0
