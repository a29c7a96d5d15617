"""`nvhook cdi check` and `nvhook cdi list`: is a spec on disk still true for this host, and
whose is it. Effects: reads spec files, stats the host paths they name, runs the generator.

- Every spec is read with the real parsers and type-checked (`nvhook.cdi.document`).
- A spec nvhook generated carries a stamp (`nvhook.cdi.stamp`): it is regenerated now with
  the options and config it records and compared (driver version, device majors, files,
  devices); `--refresh` rewrites it atomically when it differs.
- Any other spec (nvidia-ctk's, another tool's) is never called stale by nvhook's stamp and
  never rewritten: it is checked for validity and for devices and files that no longer
  exist on this host (`vanished`); `--refresh` refuses to touch it, in one line.
"""

from __future__ import annotations

import os
from typing import Any

from nvhook.cdi import spec as S
from nvhook.cdi.document import MAX_SPEC_BYTES, check_spec, parse_document
from nvhook.errors import CdiError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.config.model import HookConfig


def read_bytes(path: str) -> bytes:
    """A spec file's bytes: a regular file of at most 16 MiB that no user but root could have
    written (`nvmount.fs.trusted`: never blocks on a FIFO, follows only root's links)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import read_file

    try:
        return read_file(os.path.abspath(path), "read CDI spec", MAX_SPEC_BYTES)
    except TrustError as err:
        raise CdiError(str(err)) from err
    except OSError as err:
        raise CdiError(f"read CDI spec {path}: {err.strerror} (generate it: nvhook cdi "
                       "generate --output PATH)") from err


def read_spec(path: str) -> dict[str, Any]:
    """The spec at `path`, valid (CdiError of one line otherwise)."""
    return check_spec(parse_document(read_bytes(path), path), path)


CACHE_TAG = "cdi-spec-1"  # the format of a cached spec (nvmount.cachefile, /run/nvhook)


def read_spec_cached(path: str, cache_dir: str) -> dict[str, Any]:
    """`read_spec`, from the root-only cache while the file's dev/inode/size/mtime/ctime are
    those it was read with (the runtime wrapper: no YAML parsed at each container start)."""
    import zlib

    from nvmount import cachefile

    try:  # the file read (symlinks followed, as read_bytes does)
        st = os.stat(path)
    except OSError:
        return read_spec(path)  # its one-line error
    if not cache_dir:
        return read_spec(path)
    file = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    name = f"cdi-{zlib.crc32(path.encode('utf-8', 'surrogateescape')):08x}"  # the stamp has
    # the path: a name two paths share is a miss, never the other's spec
    stamp = (CACHE_TAG, path, file)
    hit = cachefile.load(cache_dir, name, stamp)
    if isinstance(hit, dict):
        return hit
    spec = read_spec(path)
    cachefile.store(cache_dir, name, stamp, spec)
    return spec


def spec_files(dirs: tuple[str, ...] | list[str], kind: str | None = S.KIND) -> list[str]:
    """The *.json and *.yaml files of the CDI spec dirs (those naming `kind`; every one with
    None), in the CDI library's order; a directory or file that a non-root user could have
    written is ignored with a warning (`nvmount.fs.trusted`)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import check_path, list_dir, read_file

    found = []
    for directory in dirs:
        try:
            names = list_dir(os.path.abspath(directory), "CDI spec directory")
        except TrustError as err:
            _ignore(err)
            continue
        except OSError:
            continue
        for path in (os.path.join(directory, n) for n in names):
            if not path.endswith((".json", ".yaml")) or not os.path.isfile(path):
                continue
            try:
                if kind is None:  # the trust walk alone: the reader reads the file
                    check_path(os.path.abspath(path), "CDI spec")
                elif kind.encode() not in read_file(os.path.abspath(path), "CDI spec", 1 << 16):
                    continue
            except TrustError as err:
                _ignore(err)
                continue
            except OSError:
                continue
            found.append(path)
    return found


def _ignore(err: Exception) -> None:
    from nvmount.log import get_logger

    get_logger(__name__).warning("ignoring %s", err)


def device_names(spec: dict[str, Any]) -> list[str]:
    return [f"{spec['kind']}={d['name']}" for d in spec["devices"]]


def author(spec: dict[str, Any]) -> str:
    """"nvhook" (a stamp), "nvidia-ctk" (NVIDIA's hooks) or "another tool"."""
    if S.spec_stamp(spec) is not None:
        return "nvhook"
    edits = [spec.get("containerEdits") or {}] + [d["containerEdits"] for d in spec["devices"]]
    paths = {os.path.basename(h["path"]) for e in edits for h in e.get("hooks") or ()}
    env = {v for e in edits for v in e.get("env") or ()}
    if paths & {"nvidia-cdi-hook", "nvidia-ctk"} or any(
            v.startswith("NVIDIA_CTK_") for v in env):
        return "nvidia-ctk"
    return "another tool"


def node_problem(node: dict[str, Any]) -> str | None:
    import stat

    host = node.get("hostPath") or node["path"]
    try:
        st = os.stat(host)
    except OSError as err:
        return f"{host}: {(err.strerror or 'gone').lower()}"
    if (node.get("type") or "c") in ("c", "b") and node.get("major") is not None:
        want = (node["major"], node.get("minor") or 0)
        have = (os.major(st.st_rdev), os.minor(st.st_rdev))
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) or want != have:
            return f"{host}: was {want[0]}:{want[1]}, is {have[0]}:{have[1]}"
    return None


def vanished(spec: dict[str, Any]) -> list[str]:
    """What the spec names that this host no longer has: devices whose nodes are gone or
    renumbered, mounted files that are gone (empty: none)."""
    problems = []
    common = spec.get("containerEdits") or {}
    for node in common.get("deviceNodes") or ():
        why = node_problem(node)
        if why:
            problems.append(f"common node {why}")
    for device in spec["devices"]:
        for node in device["containerEdits"].get("deviceNodes") or ():
            why = node_problem(node)
            if why:
                problems.append(f"device {spec['kind']}={device['name']}: {why}")
                break
    mounts = [m["hostPath"] for e in [common, *(d["containerEdits"] for d in spec["devices"])]
              for m in e.get("mounts") or ()]
    gone = [m for m in dict.fromkeys(mounts) if not os.path.lexists(m)]
    if gone:
        problems.append(f"{len(gone)} mounted file{'s' if len(gone) > 1 else ''} gone "
                        f"({gone[0]}{', ...' if len(gone) > 1 else ''})")
    return problems


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Why our `old` spec is no longer true, given the one this host gives now."""
    from nvhook.cdi.stamp import parse_stamp

    if old == new:
        return []
    was, now = parse_stamp(S.spec_stamp(old) or ""), parse_stamp(S.spec_stamp(new) or "")
    why = [f"{label} changed: {was.get(key) or '?'} -> {now.get(key)}"
           for key, label in (("driver", "driver version"), ("majors", "device majors"))
           if was.get(key) != now.get(key)]
    if was.get("digest") != now.get("digest") and not why:
        why.append("driver files or device nodes changed")
    names_old = [d.get("name") for d in old["devices"]]
    names_new = [d.get("name") for d in new["devices"]]
    if names_old != names_new:
        gone = [n for n in names_old if n not in names_new]
        added = [n for n in names_new if n not in names_old]
        why.append(f"devices changed (gone: {', '.join(map(str, gone)) or '-'}; new: "
                   f"{', '.join(map(str, added)) or '-'})")
    return why or ["the spec differs from what this host gives now"]


def regenerate(old: dict[str, Any], config: HookConfig, *,
               hook_path: str | None = None) -> dict[str, Any]:
    """Our spec `old` made again with the options its stamp records (its hook path unless
    `hook_path`)."""
    from nvhook.cdi.generate import GenerateOptions, generate_spec
    from nvhook.cdi.stamp import parse_stamp

    stamp = parse_stamp(S.spec_stamp(old) or "")
    vendor, _, cls = stamp.get("kind", old["kind"]).partition("/")
    hooks = (old.get("containerEdits") or {}).get("hooks") or [{}]
    options = GenerateOptions(
        strategy=stamp.get("strategy") or _strategy(old), vendor=vendor, device_class=cls,
        cdi_version=stamp.get("version", ""),
        hook_path=hook_path or hooks[0].get("path") or "", hooks=stamp.get("hooks") != "0",
        device_ids=tuple(stamp.get("ids", "all").split(",")),
        all_device=stamp.get("alldev") != "0")
    return generate_spec(config, options)


def _strategy(spec: dict[str, Any]) -> str:
    """The naming of a spec without a recorded strategy (an older nvhook's)."""
    names = [str(d["name"]) for d in spec["devices"]]
    if all(n.startswith(("GPU-", "MIG-")) or n == "all" for n in names):
        return "uuid"
    return "type-index" if any(n.startswith(("gpu", "mig")) for n in names) else "index"


def recorded_config(spec: dict[str, Any]) -> str | None:
    """The config file our spec was generated with, when it still exists."""
    from nvhook.cdi.stamp import parse_stamp

    path = parse_stamp(S.spec_stamp(spec) or "").get("config")
    return path if path and path.startswith("/") and os.path.isfile(path) else None
