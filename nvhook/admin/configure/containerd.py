"""containerd: the drop-in that registers the `nvidia` runtime with the CRI plugin. Pure.

The main config.toml's `version` picks the CRI plugin's key: absent or 1 `cri`, 2
`io.containerd.grpc.v1.cri`, 3 `io.containerd.cri.v1.runtime`; the drop-in has the same version
(containerd 1.6 merges `version` like any key: a version-2 drop-in under a version-1 main config
would turn the whole config into version 2 and lose its `plugins.cri`).

How containerd merges an imported file decides what the drop-in must hold:

- containerd 1.x (config versions 1 and 2) **replaces** a plugin's whole section with the
  imported file's, and the CRI plugin then fills in its defaults: a drop-in holding only
  `runtimes.nvidia` drops the main config's sandbox_image, CNI dirs, `runtimes.runc` ... and CRI
  fails to load (`no corresponding runtime configured in containerd.runtimes for containerd
  default_runtime_name = "runc"`). So the drop-in carries the CRI section in effect before it (the
  main config's, or the last imported file's that has one), with the runtime added and the
  default runtime (`runc`, the CRI default) kept. It is **re-derived on every run** from the files
  before it, so running configure again after changing the main config un-masks that change.
  Runtimes a previous run added (the header's `nvhook-runtimes` line) are kept.
- containerd 2.x (version 3) merges plugin sections key by key: the drop-in holds only the
  runtime (and `default_runtime_name`), so later changes to the main config stay visible.

The runtime's table is copied from the default runtime (unless an nvidia one), else `runc`, else
`crun` (so `SystemdCgroup`, `privileged_without_host_devices`, `Root` carry over); then
`runtime_type` (runc v2 when missing), `options.BinaryName` and `container_annotations` gain
`cdi.k8s.io/*` (containerd 1.6 passes a container's annotations to the runtime only when the
handler lists them; the device plugin's CDI annotations come from kubelet, never from the pod).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from nvhook.errors import ConfigureError

CRI_PLUGINS = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
DISABLED_NAMES = {1: ("cri", "io.containerd.grpc.v1.cri"),
                  2: ("io.containerd.grpc.v1.cri", "cri"),
                  3: ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri", "cri")}
RUNC_V2 = "io.containerd.runc.v2"
CDI_ANNOTATIONS = "cdi.k8s.io/*"
OWNED_MARK = "# nvhook-runtimes:"
DIR_MARK = "# nvhook-made-directory: yes"  # `remove` may take the directory away (when empty)


def config_version(main: dict[str, Any] | None, default: int) -> int:
    """The main file's `version` (absent: 1; no file: `default`), checked."""
    if main is None:
        return default
    version = main.get("version", 1)
    if isinstance(version, bool) or version not in (1, 2, 3):
        raise ConfigureError(
            f"containerd config version {version!r} is not supported (versions 1, 2 and 3 are)")
    return int(version)


def cri_disabled(main: dict[str, Any] | None, version: int) -> str | None:
    """The `disabled_plugins` entry that turns the CRI plugin off, if any."""
    disabled = (main or {}).get("disabled_plugins", [])
    for entry in disabled if isinstance(disabled, list) else ():
        if entry in DISABLED_NAMES[version]:
            return str(entry)
    return None


def _get(doc: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def cri_section(doc: dict[str, Any] | None, version: int) -> dict[str, Any] | None:
    section = _get(doc, "plugins", CRI_PLUGINS[version])
    return section if isinstance(section, dict) else None


def effective_section(docs: Sequence[dict[str, Any]], version: int) -> dict[str, Any]:
    """The CRI section containerd builds from `docs` (in load order): 1.x takes the last
    file's section whole, 2.x (version 3) merges them key by key."""
    result: dict[str, Any] = {}
    for doc in docs:
        section = cri_section(doc, version)
        if section is None:
            continue
        result = deep_merge(result, section) if version == 3 else copy.deepcopy(section)
    return result


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def base_runtime(section: dict[str, Any]) -> dict[str, Any]:
    """The runtime table to copy: the default runtime's (not nvidia*), else runc, else crun."""
    runtimes = _get(section, "containerd", "runtimes")
    runtimes = runtimes if isinstance(runtimes, dict) else {}
    default = _get(section, "containerd", "default_runtime_name") or "runc"
    for name in (default, "runc", "crun"):
        table = runtimes.get(name)
        if isinstance(name, str) and not name.startswith("nvidia") and isinstance(table, dict):
            return copy.deepcopy(table)
    return {"runtime_type": RUNC_V2}


def runtime_table(section: dict[str, Any], path: str) -> dict[str, Any]:
    """The runtime's table: the base runtime's, with our binary and the CDI annotations."""
    table = base_runtime(section)
    if not table.get("runtime_type"):
        table["runtime_type"] = RUNC_V2
    options = table.setdefault("options", {})
    if not isinstance(options, dict):
        raise ConfigureError("the copied runtime's `options` is not a table")
    options["BinaryName"] = path
    annotations = table.get("container_annotations", [])
    annotations = list(annotations) if isinstance(annotations, list) else []
    if CDI_ANNOTATIONS not in annotations:
        annotations.append(CDI_ANNOTATIONS)
    table["container_annotations"] = annotations
    return table


def _table(node: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    child = node.setdefault(key, {})
    if not isinstance(child, dict):
        raise ConfigureError(f"refuse to edit {where}: {key} is not a table")
    return child


def _start_from(drop_in: dict[str, Any] | None, version: int, where: str) -> dict[str, Any]:
    """The old drop-in to build on; one of another version is replaced only when it holds
    nothing but a CRI plugin section (as nvhook's before 0.2 could: version 2 under a version-1
    main config), else refused."""
    if not drop_in:
        return {}
    old = copy.deepcopy(drop_in)
    found = old.get("version", 1)
    if found == version:
        return old
    plugins = old.get("plugins")
    cri_only = set(old) <= {"version", "plugins"} and isinstance(plugins, dict) and \
        set(plugins) <= set(CRI_PLUGINS.values())
    if cri_only:
        return {}
    raise ConfigureError(f"refuse to edit {where}: it has version {found!r} but the main "
                         f"config is version {version} (move its other settings, then remove it)")


def _kept_runtimes(old_section: dict[str, Any], effective: dict[str, Any],
                   owned: Sequence[str] | None) -> dict[str, Any]:
    """Runtimes an earlier run put in the drop-in: those its header names (a drop-in without
    our header: every runtime the files before it do not have)."""
    old = _get(old_section, "containerd", "runtimes")
    before = _get(effective, "containerd", "runtimes") or {}
    if not isinstance(old, dict):
        return {}
    if owned is None:
        return {k: v for k, v in old.items() if k not in before}
    return {k: v for k, v in old.items() if k in owned}


def drop_in_document(effective: dict[str, Any], drop_in: dict[str, Any] | None,
                     owned: Sequence[str] | None, version: int, name: str, path: str, *,
                     set_default: bool, enable_cdi: bool = False,
                     where: str) -> tuple[dict[str, Any], list[str]]:
    """(the drop-in document, the runtimes nvhook has in it) for runtime `name` at `path`.

    `effective` is the CRI section in effect before the drop-in (`effective_section`), `drop_in`
    the file's current content and `owned` its header's runtime list (None: no header)."""
    out = _start_from(drop_in, version, where)
    plugins = _table(out, "plugins", where)
    old_section = plugins.get(CRI_PLUGINS[version])
    old_section = old_section if isinstance(old_section, dict) else {}
    kept = _kept_runtimes(old_section, effective, owned)
    # version 3 merges key by key (only what we add), 1 and 2 replace the section (all of it)
    section = copy.deepcopy(old_section if version == 3 else effective)
    containerd = _table(section, "containerd", where)
    runtimes = _table(containerd, "runtimes", where)
    if version != 3:
        if containerd.get("default_runtime_name", "runc") == "runc":
            runtimes.setdefault("runc", {"runtime_type": RUNC_V2})
        runtimes.update({k: copy.deepcopy(v) for k, v in kept.items() if k != name})
        old_default = _get(old_section, "containerd", "default_runtime_name")
        if old_default in kept and old_default != name:
            containerd["default_runtime_name"] = old_default
    runtimes.pop(name, None)  # always last: the same text on every run
    runtimes[name] = runtime_table(effective, path)
    if set_default:
        containerd["default_runtime_name"] = name
    elif version == 3 and containerd.get("default_runtime_name") == name:
        del containerd["default_runtime_name"]
    if enable_cdi:
        section["enable_cdi"] = True
    plugins[CRI_PLUGINS[version]] = section
    if version >= 2:
        out["version"] = version
    return out, [*[k for k in kept if k != name], name]


def remove_runtime(drop_in: dict[str, Any], version: int, name: str,
                   effective: dict[str, Any]) -> dict[str, Any]:
    """The drop-in without runtime `name` (the default runtime falls back to the files before
    it: version 1/2 copy theirs, version 3 drops the key)."""
    out = copy.deepcopy(drop_in)
    containerd = _get(out, "plugins", CRI_PLUGINS[version], "containerd")
    if not isinstance(containerd, dict):
        return out
    runtimes = containerd.get("runtimes")
    if isinstance(runtimes, dict):
        runtimes.pop(name, None)
    if containerd.get("default_runtime_name") == name:
        before = _get(effective, "containerd", "default_runtime_name")
        if version != 3 and isinstance(before, str):
            containerd["default_runtime_name"] = before
        else:
            del containerd["default_runtime_name"]
    return out


def header(version: int, main_path: str, owned: Sequence[str], *,
           made_directory: bool = False) -> str:
    """The drop-in's first lines: whose it is, why it is what it is, what it holds, and
    whether nvhook made its directory (only then does `remove` take that away)."""
    if version == 3:
        why = ("# containerd 2.x merges this file's CRI runtime section into the main config's\n"
               "# key by key: it holds only what nvhook adds.\n")
    else:
        why = ("# containerd 1.x replaces a plugin's whole section with an imported file's: this\n"
               "# file carries the CRI plugin section in effect before it (the main config's,\n"
               f"#   {main_path}\n"
               "# or that of a file it imports) with nvhook's runtimes added. Change CRI\n"
               "# settings there, then run nvhook runtime configure again (this copy masks\n"
               "# them until then).\n")
    return ("# Written by `nvhook runtime configure --runtime=containerd`.\n" + why
            + (f"{DIR_MARK}\n" if made_directory else "")
            + f"{OWNED_MARK} {', '.join(owned)}\n\n")


def made_directory(text: str | None) -> bool:
    """Whether our header says nvhook made the drop-in's directory."""
    for line in (text or "").splitlines():
        if not line.startswith("#"):
            break
        if line == DIR_MARK:
            return True
    return False


def owned_runtimes(text: str | None) -> list[str] | None:
    """The runtimes our header names; None when the file has no header of ours."""
    for line in (text or "").splitlines():
        if not line.startswith("#"):
            break
        if line.startswith(OWNED_MARK):
            return [n.strip() for n in line[len(OWNED_MARK):].split(",") if n.strip()]
    return None
