"""A CDI spec as the projection of the engine's plans. Pure.

    common plan (no device selected, every supported capability)
        bind mounts of driver files      -> containerEdits.mounts (ro,nosuid,nodev,bind)
        control device nodes             -> containerEdits.deviceNodes
        symlinks                         -> hook `nvhook cdi hook create-symlinks --link L::P`
        ldconfig_dirs                    -> hook `nvhook cdi hook update-ldcache --folder D`
        the procfs view                  -> hook `nvhook cdi hook procfs`
    plan of one device (GPU index, MIG `G:I`)
        its device nodes beyond the common ones -> devices[name].containerEdits.deviceNodes
    device names: by index (`0`, `0:1`), by UUID, and `all` (every node of every device)

Runtimes create the nodes and allow them in the device cgroup themselves. The procfs view of
the legacy hook (only the selected GPUs under /proc/driver/nvidia) has no spec form: the
`procfs` hook mounts it (NVIDIA's CDI spec leaves every GPU visible there). Hooks run at
`createRuntime` (runc: in the runtime's namespaces, with the container's host pid in the
state, as a prestart hook). The stamp (driver version,
device majors, a digest of every file and node the spec names) is the hooks' environment
`NVHOOK_CDI_STAMP`: cdiVersion 0.5.0 (the newest Podman 4.3 reads) has no annotations.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from nvmount.plan.delivery import RUNTIME_MOUNTS
from nvmount.plan.types import Bind, MountFlag, MountPlan, SourceKind, Symlink

KIND = "nvidia.com/gpu"
STAMP_ENV = "NVHOOK_CDI_STAMP"
HOOK_STAGE = "createRuntime"
STRATEGIES = ("index", "uuid", "type-index")
GATED_NAMES = ("gds", "mofed", "nvswitch", "gdrcopy")  # devices of the gated families
_OPTIONS = ((MountFlag.RDONLY, "ro"), (MountFlag.NOSUID, "nosuid"), (MountFlag.NODEV, "nodev"),
            (MountFlag.NOEXEC, "noexec"))


class Device:
    """One CDI device: its names and the plan of its selection."""

    __slots__ = ("names", "plan")

    def __init__(self, names: tuple[str, ...], plan: MountPlan) -> None:
        self.names, self.plan = names, plan


def nodes(plan: MountPlan) -> list[Bind]:
    return [e for e in plan.entries if isinstance(e, Bind) and e.kind == SourceKind.DEVICE
            and e.rdev is not None]


def device_node(node: Bind) -> dict[str, Any]:
    assert node.rdev is not None
    entry: dict[str, Any] = {"path": node.target}
    if node.source != node.target:
        entry["hostPath"] = node.source
    entry.update(type="c", major=node.rdev[0], minor=node.rdev[1], permissions="rw")
    return entry


def mount(bind: Bind) -> dict[str, Any]:
    words = [w for flag, w in _OPTIONS if flag in bind.flags]
    return {"hostPath": bind.source, "containerPath": bind.target, "options": [*words, "bind"]}


def hook(path: str, args: list[str], stamp: str) -> dict[str, Any]:
    return {"hookName": HOOK_STAGE, "path": path,
            "args": [os.path.basename(path), "cdi", "hook", *args],
            "env": [f"{STAMP_ENV}={stamp}"]}


def common_edits(plan: MountPlan, hook_path: str, stamp: str) -> dict[str, Any]:
    mounts = [mount(e) for e in plan.entries
              if isinstance(e, Bind) and e.what in RUNTIME_MOUNTS and e.kind != SourceKind.DEVICE]
    links = [f"{e.link}::{e.target}" for e in plan.entries if isinstance(e, Symlink)]
    hooks = []
    if links:
        hooks.append(hook(hook_path, ["create-symlinks", *(a for link in links
                                                           for a in ("--link", link))], stamp))
    folders = [a for d in dict.fromkeys(plan.ldconfig_dirs) for a in ("--folder", d)]
    if folders:
        hooks.append(hook(hook_path, ["update-ldcache", *folders], stamp))
    hooks.append(hook(hook_path, ["procfs"], stamp))
    edits: dict[str, Any] = {"deviceNodes": [device_node(n) for n in nodes(plan)],
                             "mounts": mounts, "hooks": hooks}
    return {k: v for k, v in edits.items() if v}


def device_edits(device: Device, common: MountPlan) -> dict[str, Any]:
    """The device's nodes (and mounts: a gated family's files) beyond the common edits."""
    taken = {n.target for n in nodes(common)}
    edits: dict[str, Any] = {
        "deviceNodes": [device_node(n) for n in nodes(device.plan) if n.target not in taken]}
    shared = {e.target for e in common.entries if isinstance(e, Bind)}
    mounts = [mount(e) for e in device.plan.entries if isinstance(e, Bind)
              and e.what == "gated" and e.target not in shared]
    if mounts:
        edits["mounts"] = mounts
    return edits


def build_spec(common: MountPlan, devices: list[Device], *, hook_path: str,
               stamp: str) -> dict[str, Any]:
    """The spec: one entry per device name, `all` last; cdiVersion the lowest that fits."""
    entries = []
    everything: dict[str, dict[str, Any]] = {}
    for device in devices:
        edits = device_edits(device, common)
        for node in edits["deviceNodes"] if device.names[0] not in GATED_NAMES else ():
            everything.setdefault(node["path"], node)
        entries += [{"name": name, "containerEdits": edits} for name in device.names]
    shared = common_edits(common, hook_path, stamp)
    if not entries:  # no GPU to name (WSL2: /dev/dxg; Tegra CSV): one `all` device
        everything = {n["path"]: n for n in shared.pop("deviceNodes", [])}
    if everything:
        entries.append({"name": "all",
                        "containerEdits": {"deviceNodes": list(everything.values())}})
    spec: dict[str, Any] = {"cdiVersion": "", "kind": KIND, "devices": entries,
                            "containerEdits": shared}
    spec["cdiVersion"] = minimal_version(spec)
    return spec


def minimal_version(spec: dict[str, Any]) -> str:
    """The lowest cdiVersion with every feature the spec uses (the CDI library's rules)."""
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec.get("containerEdits", {})]
    if spec.get("annotations") or any(d.get("annotations") for d in spec["devices"]):
        return "0.6.0"
    digit_name = any(d["name"][:1].isdigit() for d in spec["devices"])
    host_path = any("hostPath" in n for e in edits for n in e.get("deviceNodes", ()))
    if digit_name or host_path:
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts", ())):
        return "0.4.0"
    return "0.3.0"


def stamp(driver_version: str, majors: dict[str, int], paths: list[str]) -> str:
    """`driver=V;majors=name:M,...;digest=sha256:...` of the driver and every host path the
    spec names (path, type, size, mtime, inode and device number of each)."""
    digest = hashlib.sha256()
    for path in sorted(set(paths)):
        try:
            st = os.stat(path)
            fact = f"{st.st_mode:o}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_rdev}"
        except OSError:
            fact = "missing"
        digest.update(f"{path}\0{fact}\n".encode("utf-8", "surrogateescape"))
    shown = ",".join(f"{name}:{major}" for name, major in sorted(majors.items()))
    return f"driver={driver_version};majors={shown};digest=sha256:{digest.hexdigest()[:32]}"


def parse_stamp(text: str) -> dict[str, str]:
    return dict(part.partition("=")[::2] for part in text.split(";") if "=" in part)


def named_paths(spec: dict[str, Any]) -> list[str]:
    """Every host path the spec names (mounts, device nodes, hooks)."""
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec.get("containerEdits", {})]
    paths = [m["hostPath"] for e in edits for m in e.get("mounts", ())]
    paths += [n.get("hostPath", n["path"]) for e in edits for n in e.get("deviceNodes", ())]
    return paths


def spec_stamp(spec: dict[str, Any]) -> str | None:
    """The stamp a spec carries (its hooks' NVHOOK_CDI_STAMP), None without one."""
    for h in spec.get("containerEdits", {}).get("hooks", ()):
        for entry in h.get("env", ()):
            if isinstance(entry, str) and entry.startswith(STAMP_ENV + "="):
                return entry[len(STAMP_ENV) + 1:]
    return None


def with_stamp(spec: dict[str, Any], value: str) -> dict[str, Any]:
    """`spec` with its hooks' stamp set to `value` (in place; returned for chaining)."""
    for h in spec.get("containerEdits", {}).get("hooks", ()):
        h["env"] = [e for e in h.get("env", ()) if not e.startswith(STAMP_ENV + "=")]
        h["env"].append(f"{STAMP_ENV}={value}")
    return spec
