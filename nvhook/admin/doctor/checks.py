"""Doctor checks of nvhook's own side: the config file, the driver root, the driver and its
device nodes, the ldcache mode and the inventory cache. Effects: reads files, runs discovery
(NVML in a child, as a container start does).
"""

from __future__ import annotations

import os
import stat

from nvhook.admin.doctor.findings import Finding
from nvhook.errors import NvhookError
from nvmount.errors import NvmountError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Mapping

    from nvhook.config.model import HookConfig
    from nvmount.api import DriverInventory

# /proc/devices name -> the nodes of that major the doctor expects (control nodes only)
_CONTROL = (("nvidiactl", "nvidia-frontend", 255, True), ("nvidia-uvm", "nvidia-uvm", 0, True),
            ("nvidia-uvm-tools", "nvidia-uvm", 1, False))


def check_config(explicit: str | None, environ: Mapping[str, str],
                 cwd: str | None) -> tuple[HookConfig, list[Finding]]:
    """The configuration the hook would use (defaults when it cannot load) and its findings."""
    from nvhook.config.check import check_document
    from nvhook.config.load import _read_toml, find_config, load_config
    from nvhook.config.model import config_from_document

    fix = "run `nvhook config check` and correct the file"
    try:
        path, origin = find_config(explicit, environ, cwd)
        config = load_config(explicit, environ, cwd=cwd)
    except NvhookError as err:
        return config_from_document({}, None), [Finding("config", "fail", str(err), fix)]
    if path is None:
        return config, [Finding("config", "ok", "no config file: built-in defaults")]
    document = _read_toml(path, origin) or {}
    found = check_document(document, path)
    warnings = [m for level, _, m in found if level == "warning"]
    named = f" (named by {origin})" if origin else ""
    if warnings:
        return config, [Finding("config", "warn", f"{path}{named}: {'; '.join(warnings)}", fix)]
    return config, [Finding("config", "ok", f"{path}{named}: no problems")]


def check_root(config: HookConfig) -> Finding:
    origin = config.cli.root_origin
    why = {"config": "nvidia-container-cli.root",
           "detected": "a driver container's root (nvidia-container-cli.root is unset)"}
    root = config.cli.root or "/"
    from nvmount.api import missing_root

    missing = missing_root(root)
    if missing is not None:
        return Finding("driver root", "fail", f"{root} ({why.get(origin, 'default')}) does not "
                       "exist or is not a directory", "install the NVIDIA driver, or set "
                       "nvidia-container-cli.root to the directory it is installed in")
    return Finding("driver root", "ok", f"{root} ({why.get(origin, 'default')})")


def check_driver(config: HookConfig) -> tuple[DriverInventory | None, list[Finding]]:
    """Discovery as a container start runs it; the inventory cache's state."""
    from nvhook.hook.mount import engine_options
    from nvmount.api import Faults, discover_cached, missing_root

    if missing_root(config.cli.root or "/") is not None:
        return None, []  # the driver root finding says it
    try:
        inv, cache = discover_cached(engine_options(config), Faults(), fresh=True)
    except (NvmountError, NvhookError) as err:
        fix = ("load the NVIDIA kernel module (`modprobe nvidia`, or run `nvidia-smi` once) and "
               "check `nvidia-smi` on the host" if getattr(err, "code", None) == 9 else
               "install the NVIDIA driver (or point nvidia-container-cli.root at the driver "
               "root) and check `nvidia-smi` on the host")
        return None, [Finding("driver", "fail", str(err), fix)]
    names = sorted({g.model for g in inv.gpus})
    driver = Finding("driver", "ok" if inv.gpus else "warn",
                     f"{inv.driver_version} (CUDA {inv.cuda_version}), {len(inv.gpus)} GPU(s)"
                     + (f": {', '.join(names)}" if names else ""),
                     "" if inv.gpus else "no GPU is visible to NVML: check `nvidia-smi`")
    cache_text = {"current": "current (container starts use it without NVML)",
                  "refreshed": "refreshed (it was absent, or the driver changed since)",
                  "off": "off ([nvhook] cache-dir = \"\", or not root)"}.get(cache, cache)
    findings = [driver, Finding("inventory cache", "ok", cache_text)]
    if inv.warnings:
        shown = "; ".join(inv.warnings[:3]) + (" ..." if len(inv.warnings) > 3 else "")
        findings.append(Finding("driver files", "info",
                                f"{len(inv.warnings)} note(s) from discovery: {shown}"))
    return inv, findings


def proc_majors(proc_root: str) -> dict[str, int]:
    """{name: major} of the character devices in <proc_root>/devices."""
    majors: dict[str, int] = {}
    try:
        with open(os.path.join(proc_root, "devices"), encoding="ascii", errors="replace") as f:
            text = f.read(1 << 16)
    except OSError:
        return majors
    for line in text.split("Block devices:")[0].splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(parts[1], int(parts[0]))
    return majors


def check_devices(inv: DriverInventory, proc_root: str) -> list[Finding]:
    """The control nodes and GPU nodes: present, and of the majors the kernel gives them."""
    majors = proc_majors(proc_root)
    if "nvidia" in majors:  # never a guessed major: only what the kernel lists
        majors.setdefault("nvidia-frontend", majors["nvidia"])
    ctl = next(n for n in inv.control_nodes if n.container_path == "/dev/nvidiactl")
    dev = os.path.dirname(ctl.host_path)
    findings = [_node_finding(os.path.join(dev, name), name, major_name, majors.get(major_name),
                              minor, needed) for name, major_name, minor, needed in _CONTROL]
    findings.append(_gpu_nodes(inv))
    extra = [f"{n} {majors[n]}" for n in ("nvidia-caps", "nvidia-caps-imex-channels")
             if n in majors]
    findings.append(Finding("capability majors", "ok" if extra else "info",
                            ", ".join(extra) or "no nvidia-caps devices (MIG and IMEX unused)"))
    return findings


def _node_finding(host: str, name: str, major_name: str, want: int | None, minor: int,
                  needed: bool) -> Finding:
    try:
        st = os.stat(host)
    except OSError:
        st = None
    if st is None or not stat.S_ISCHR(st.st_mode):
        fix = (f"load the module and create the node: `nvidia-modprobe -u -c=0`, or "
               f"`modprobe {major_name}` and `mknod -m 666 /dev/{name} c {want or 'MAJOR'} "
               f"{minor}`; with nvidia-container-cli.load-kmods = true (the default) the "
               "next GPU start creates it")
        what = "missing" if st is None else "not a character device"
        return Finding(f"/dev/{name}", "fail" if needed else "warn",
                       what + ("" if needed else " (profilers need it)"), fix)
    got = os.major(st.st_rdev)
    if want is not None and got != want:
        return Finding(f"/dev/{name}", "fail", f"major {got}, but the kernel's {major_name} "
                       f"is {want} (a node left from an older driver)",
                       f"remove /dev/{name} and recreate it: `mknod -m 666 /dev/{name} c "
                       f"{want} {minor}`")
    return Finding(f"/dev/{name}", "ok", f"c {got}:{os.minor(st.st_rdev)}")


def _gpu_nodes(inv: DriverInventory) -> Finding:
    missing = [g.node.container_path for g in inv.gpus
               if not os.path.exists(g.node.host_path)]
    if missing:
        return Finding("GPU nodes", "fail", f"missing: {', '.join(missing)}",
                       "run `nvidia-modprobe -c=N` for each GPU minor, or `nvidia-smi` once")
    shown = ", ".join(f"{g.node.container_path} (c {g.node.major}:{g.node.minor})"
                      for g in inv.gpus[:4])
    more = f" and {len(inv.gpus) - 4} more" if len(inv.gpus) > 4 else ""
    return Finding("GPU nodes", "ok", (shown + more) or "none")


def check_persistence(inv: DriverInventory, running: dict[str, int]) -> Finding:
    """Persistence mode through nvidia-persistenced (its socket in the inventory, or the
    process running)."""
    socket = any("nvidia-persistenced" in f.container_path for f in inv.ipc)
    if socket or "nvidia-persistenced" in running:
        return Finding("persistence", "ok", "nvidia-persistenced is running"
                       + (" (its socket is mounted into containers)" if socket else ""))
    return Finding("persistence", "warn", "nvidia-persistenced is not running: each container "
                   "start may re-initialise the GPUs (seconds)",
                   "systemctl enable --now nvidia-persistenced")


def check_ldcache(config: HookConfig) -> Finding:
    if config.nvhook.ldcache == "write":
        return Finding("ldconfig", "ok", "nvhook writes the container's ld.so.cache itself "
                       "([nvhook] ldcache = \"write\"; no ldconfig runs)")
    ldconfig = config.cli.ldconfig
    if ldconfig.startswith("@") and not os.path.isfile(ldconfig[1:]):
        return Finding("ldconfig", "fail", f"{ldconfig[1:]} does not exist on the host",
                       "set nvidia-container-cli.ldconfig to the host's ldconfig, or "
                       "[nvhook] ldcache = \"write\"")
    return Finding("ldconfig", "ok", f"{ldconfig.lstrip('@')} (sandboxed), [nvhook] ldcache = "
                   "\"ldconfig\"")
