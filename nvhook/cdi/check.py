"""`nvhook cdi check` and `nvhook cdi list`: whether a spec on disk is still true for this host
(regenerated now and compared), what changed (driver version, device majors, files), and the
device names the specs provide. Effects: reads spec files, runs the generator."""

from __future__ import annotations

import os
from typing import Any

from nvhook.cdi import spec as S
from nvhook.errors import NvhookError

MAX_SPEC_BYTES = 16 * 1024 * 1024


def read_spec(path: str) -> dict[str, Any]:
    from nvhook.cdi.yamlish import YamlError, load
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import read_file

    try:
        data = read_file(path, "read CDI spec", MAX_SPEC_BYTES)
    except TrustError as err:
        raise NvhookError(str(err)) from err
    except OSError as err:
        raise NvhookError(f"read CDI spec {path}: {err.strerror} (generate it: nvhook cdi "
                          "generate --output PATH)") from err
    if len(data) > MAX_SPEC_BYTES:
        raise NvhookError(f"read CDI spec {path}: larger than 16 MiB")
    try:
        spec = load(data.decode("utf-8"))
    except (YamlError, UnicodeDecodeError) as err:
        raise NvhookError(f"read CDI spec {path}: {err} (regenerate it: nvhook cdi "
                          "generate)") from err
    if not isinstance(spec, dict) or not isinstance(spec.get("devices"), list):
        raise NvhookError(f"read CDI spec {path}: not a CDI spec (no devices list)")
    return spec


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Why `old` is no longer true, given the spec this host gives now (empty: still true)."""
    if old == new:
        return []
    was, now = S.parse_stamp(S.spec_stamp(old) or ""), S.parse_stamp(S.spec_stamp(new) or "")
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


def spec_files(dirs: tuple[str, ...] | list[str]) -> list[str]:
    """The *.json and *.yaml files of the CDI spec dirs that declare kind nvidia.com/gpu;
    a directory or file that a non-root user could have written is ignored with a warning
    (`nvmount.fs.trusted`)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import list_dir, read_file

    found = []
    for directory in dirs:
        try:  # a spec a non-root user could have written is ignored (nvmount.fs.trusted)
            names = list_dir(directory, "CDI spec directory")
        except TrustError as err:
            _ignore(err)
            continue
        except OSError:
            continue
        for path in (os.path.join(directory, n) for n in names):
            if path.endswith((".json", ".yaml")):
                try:
                    head = read_file(path, "CDI spec", 1 << 16)
                except TrustError as err:
                    _ignore(err)
                    continue
                except OSError:
                    continue
                if S.KIND.encode() in head:
                    found.append(path)
    return found


def _ignore(err: Exception) -> None:
    from nvmount.log import get_logger

    get_logger(__name__).warning("ignoring %s", err)


def device_names(spec: dict[str, Any]) -> list[str]:
    kind = spec.get("kind", S.KIND)
    return [f"{kind}={d['name']}" for d in spec["devices"] if isinstance(d, dict) and "name" in d]
