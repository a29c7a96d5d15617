"""Doctor checks of the host around nvhook: cgroups, running daemons (<proc>/*/comm), the
container runtimes' configuration and the launchers they run, found on the PATH of the daemon
that runs them (its <proc>/<pid>/environ) or else the caller's, CDI specs. Effects: reads files,
lists processes, runs launchers' `--version` (only where root may run them:
`nvhook.programs`).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
from typing import Any

from nvhook.admin.doctor.findings import Finding, HostPaths
from nvhook.launch.write import MARKER
from nvmount.bounds import shorten

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.config.model import HookConfig

DAEMONS = ("dockerd", "containerd", "crio", "kubelet", "nvidia-persistenced",
           "nv-fabricmanager")
_OURS = ("nvidia-container-runtime", "nvhook-runtime", "nvidia-container-runtime-hook",
         "nvhook-hook", "nvidia-container-cli")


def running_daemons(proc: str = "/proc") -> dict[str, int]:
    """{name: pid} of the processes in DAEMONS running now (the lowest pid of each), from
    <proc>/<pid>/comm (the kernel keeps 15 characters of a name)."""
    wanted = {name[:15]: name for name in DAEMONS}
    found: dict[str, int] = {}
    try:
        pids = sorted(int(e) for e in os.listdir(proc) if e.isdigit())
    except OSError:
        return found
    for pid in pids:
        name = wanted.get(_text(os.path.join(proc, str(pid), "comm"), 64).strip())
        if name is not None:
            found.setdefault(name, pid)
    return found


def engine_path(paths: HostPaths, running: dict[str, int],
                daemons: tuple[str, ...] = ("dockerd", "containerd")) -> tuple[str, str]:
    """(search path, whose) for a binary the container engine looks up: the PATH in the
    environment of the first of `daemons` that runs (<proc>/<pid>/environ; without PATH it
    finds nothing), else the caller's (`paths.path`)."""
    unreadable = ""
    for daemon in daemons:
        pid = running.get(daemon)
        if pid is None:
            continue
        try:
            with open(os.path.join(paths.proc, str(pid), "environ"), "rb") as f:
                environ = f.read(1 << 20).split(b"\0")
        except OSError:  # not root, or it exited: the caller's PATH is the best guess
            unreadable = unreadable or f" ({daemon}'s environment is unreadable: run as root)"
            continue
        value = next((e[5:] for e in environ if e.startswith(b"PATH=")), b"")
        return value.decode("utf-8", "replace"), f"{daemon}'s PATH (pid {pid})"
    return paths.path, "the caller's PATH" + unreadable


def cgroup_mode(mountinfo: str) -> str:
    """"v2", "hybrid" (v1 devices controller and a cgroup2 mount), "v1", or "unknown" when
    no cgroup file system is mounted (a chroot without /sys). Pure."""
    from nvmount.api import parse_mountinfo

    entries = parse_mountinfo(mountinfo)
    devices_v1 = any(m.fstype == "cgroup" and "devices" in m.super_options for m in entries)
    has_v2 = any(m.fstype == "cgroup2" for m in entries)
    if devices_v1:
        return "hybrid" if has_v2 else "v1"
    return "v2" if has_v2 else "unknown"


def systemd_cgroup_users(paths: HostPaths) -> list[str]:
    """The runtimes configured for systemd's cgroup driver."""
    users = []
    daemon = _json(os.path.join(paths.etc, "docker/daemon.json"))
    if any("native.cgroupdriver=systemd" in str(o) for o in daemon.get("exec-opts", [])):
        users.append("docker")
    for path in _containerd_files(paths):
        if "SystemdCgroup = true" in _text(path).replace("  ", " "):
            users.append("containerd")
            break
    if "cgroupDriver: systemd" in _text(os.path.join(paths.var_lib, "kubelet/config.yaml")):
        users.append("kubelet")
    return users


def check_cgroups(paths: HostPaths) -> Finding:
    mode = cgroup_mode(_text(os.path.join(paths.proc, "self/mountinfo")))
    if mode == "unknown":
        return Finding("cgroups", "info", "cgroup unknown: no cgroup file system is mounted "
                       "here (a chroot or container without /sys/fs/cgroup?)",
                       "run nvhook doctor on the host itself to check cgroups")
    init = _text(os.path.join(paths.proc, "1/comm")).strip()
    users = systemd_cgroup_users(paths) if init == "systemd" else []
    text = f"cgroup {mode}, init {init or '?'}" + (
        f", systemd cgroup driver: {', '.join(users)} (the hook registers its device rules "
        "with each container's scope, DeviceAllow=, so `systemctl daemon-reload` keeps "
        "them: docs/systemd-reload.md)" if users else "")
    return Finding("cgroups", "ok", text)


def _text(path: str, limit: int = 1 << 20) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            return stream.read(limit)
    except OSError:
        return ""


def _json(path: str) -> dict[str, Any]:
    try:
        value = json.loads(_text(path) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _containerd_files(paths: HostPaths) -> list[str]:
    return [os.path.join(paths.etc, "containerd/config.toml"),
            *sorted(glob.glob(os.path.join(paths.etc, "containerd/conf.d/*.toml")))]


def which(name: str, search: str) -> str | None:
    from nvhook.programs import which as find

    return find(name, search)


def is_nvhook_launcher(path: str) -> bool:
    return MARKER in _text(path, 4096)


def runtime_targets(paths: HostPaths,
                    unreadable: list[str] | None = None) -> dict[str, list[str]]:
    """{runtime: [binary or hook paths its configuration names for NVIDIA GPUs]}; a runtime
    whose configuration directory is absent is left out. TOML files that cannot be read are
    added to `unreadable` ("path: why")."""
    found: dict[str, list[str]] = {}
    if os.path.isdir(os.path.join(paths.etc, "docker")):
        runtimes = _json(os.path.join(paths.etc, "docker/daemon.json")).get("runtimes", {})
        found["docker"] = [str(r.get("path", "")) for r in runtimes.values()
                           if isinstance(r, dict) and _nvidia_name(str(r.get("path", "")))]
    if os.path.isdir(os.path.join(paths.etc, "containerd")):
        found["containerd"] = _toml_values(_containerd_files(paths), "BinaryName", unreadable)
    if os.path.isdir(os.path.join(paths.etc, "crio")):
        found["crio"] = _toml_values(
            sorted(glob.glob(os.path.join(paths.etc, "crio/crio.conf.d/*"))), "runtime_path",
            unreadable)
    hooks = [os.path.join(paths.etc, "containers/oci/hooks.d"),
             os.path.join(paths.usr_share, "containers/oci/hooks.d")]
    if any(os.path.isdir(d) for d in hooks):
        found["podman (hooks.d)"] = [
            str(_json(f).get("hook", {}).get("path", "")) for d in hooks
            for f in sorted(glob.glob(os.path.join(d, "*.json")))
            if _nvidia_name(str(_json(f).get("hook", {}).get("path", "")))]
    return found


def _nvidia_name(path: str) -> bool:
    return os.path.basename(path) in _OURS


def _toml_values(files: list[str], key: str, unreadable: list[str] | None) -> list[str]:
    """Every string value of `key` at any depth of the TOML files that name an NVIDIA binary."""
    from nvhook.config.toml_read import loads

    values: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == key and isinstance(v, str) and _nvidia_name(v):
                    values.append(v)
                walk(v)

    for path in files:
        try:
            walk(loads(_text(path)))
        except ValueError as err:
            if unreadable is not None and os.path.exists(path):
                unreadable.append(f"{path}: {shorten(str(err), 200)}")
    return values


def check_runtimes(paths: HostPaths, running: dict[str, int]) -> list[Finding]:
    unreadable: list[str] = []
    targets = runtime_targets(paths, unreadable)
    findings = [Finding("runtime config", "warn", f"cannot read {why}",
                        "fix the file's TOML (the runtime cannot read it either)")
                for why in unreadable]
    if not targets:
        return [*findings, Finding("runtimes", "warn", "no docker, containerd, crio or podman "
                                   "configuration found",
                                   "nvhook runtime configure --runtime=RUNTIME")]
    for runtime, binaries in targets.items():
        daemon = {"docker": "dockerd", "crio": "crio"}.get(runtime, runtime)
        state = " (running)" if daemon in running else ""
        if not binaries:
            findings.append(Finding(f"runtime {runtime}", "info", f"not configured for GPUs"
                                    f"{state}", "nvhook runtime configure --runtime="
                                    + runtime.split()[0]))
            continue
        search = engine_path(paths, running, (daemon,))
        findings.extend(_target_finding(runtime, state, b, search) for b in binaries)
    return findings


def _target_finding(runtime: str, state: str, binary: str,
                    search: tuple[str, str]) -> Finding:
    path = which(binary, search[0])
    if path is None:
        return Finding(f"runtime {runtime}", "fail", f"{binary}{state}: not found (looked up "
                       f"on {search[1]}: {search[0] or 'empty'})",
                       "nvhook install (or install the nvhook package), then restart it")
    if not is_nvhook_launcher(path):
        return Finding(f"runtime {runtime}", "warn", f"{path}{state} is not nvhook's "
                       "(NVIDIA's toolkit?)", "nvhook runtime configure --runtime="
                       + runtime.split()[0])
    return check_launcher(path, f"runtime {runtime}", state)


def check_launcher(path: str, check: str, state: str = "") -> Finding:
    """An nvhook launcher starts (`--version`): a moved installation fails here. Run only
    when root may run it (`nvhook.programs`): it was found on a PATH or in a config."""
    from nvhook.programs import untrusted

    why = untrusted(path)
    if why is not None:
        return Finding(check, "fail", f"{path}{state}: not run: {why}",
                       "install nvhook into a root-owned directory (nvhook install), and take "
                       "user-writable directories off the engine's PATH")
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                              check=False, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as err:
        return Finding(check, "fail", f"{path}{state}: cannot run it: {err}",
                       "nvhook install (re-run after moving nvhook)")
    if proc.returncode != 0 and "no runtime binary" not in proc.stderr:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Finding(check, "fail", f"{path}{state}: does not start: {last}",
                       "nvhook install (re-run after moving nvhook)")
    return Finding(check, "ok", f"{path}{state} (nvhook)")


def check_hook_on_path(paths: HostPaths, running: dict[str, int]) -> Finding:
    """Docker's `--gpus` runs `nvidia-container-runtime-hook` from dockerd's PATH (the
    running engine's environment, else the caller's PATH)."""
    search, whose = engine_path(paths, running)
    path = which("nvidia-container-runtime-hook", search)
    if path is None:
        return Finding("hook", "warn", f"nvidia-container-runtime-hook is not on {whose} "
                       f"({search or 'empty'}; docker --gpus and the runtime wrapper look "
                       "it up there)",
                       "install the nvhook package, or `nvhook install --prefix DIR` into a "
                       "directory of that PATH")
    if not is_nvhook_launcher(path):
        return Finding("hook", "warn", f"{path} (on {whose}) is not nvhook's (NVIDIA's "
                       "toolkit?)", "remove NVIDIA's toolkit, or nvhook install --force")
    found = check_launcher(path, "hook")
    return Finding(found.check, found.level, f"{found.message}, on {whose}", found.fix)


def check_cdi(config: HookConfig, path_env: str | None = None) -> list[Finding]:
    """The CDI specs of the spec dirs: nvhook's still true for this host, another tool's
    valid and naming only what this host has, each readable by the installed engines
    (`nvhook.cdi.health`)."""
    from nvhook.cdi.health import findings

    return [Finding("CDI", level, message, fix) for level, message, fix in
            findings(config, HostPaths().path if path_env is None else path_env)]
