"""`nvidia-container-cli` drop-in: libnvidia-container's CLI (`info`, `list`, `configure`),
running nvhook's engine. Installed by `nvhook install` as `nvidia-container-cli`.

    nvidia-container-cli [--root=PATH] [--ldcache=FILE] [--load-kmods] [--user[=UID:GID]]
        [--no-pivot] [--debug=FILE] [--no-create-imex-channels] COMMAND ...
    info [--csv]                          libnvc-spec 10, the same text
    list [-d ID] [-l] [-b] [-i] [-f] [--compat32] [--mig-config ID] [--mig-monitor ID]
         [--imex-channel N] [--no-persistenced] [--no-fabricmanager] [--no-gsp-firmware]
    configure [--pid=PID] [--device=ID] [--require=EXPR] [--ldconfig=PATH] [--compute]
         [--utility] [--video] [--graphics] [--display] [--ngx] [--compat32]
         [--mig-config=ID] [--mig-monitor=ID] [--imex-channel=N] [--no-cgroups] [--no-devbind]
         [--no-cntlibs] [--cuda-compat-mode=MODE] ROOTFS

Callers: containerd's `ctr run --gpus` (`containerd oci-hook -- nvidia-container-cli
--load-kmods configure --device=0 --compute --compat32 --graphics --utility --video --display
--pid=<pid> <rootfs>`, verified on containerd 1.6.20), nerdctl, enroot, Apptainer `--nvccli`.

NVIDIA's CLI reads no config file; the drop-in reads config.toml (the usual lookup; `nvhook
install --config` records one) for what its flags do not say: the driver root and ldcache
(`[nvidia-container-cli]`), and `[nvhook]` (proc-root, sim-procfs, timing-log, ...). Flags win.
`--load-kmods`, `--user` and `--no-pivot` are accepted and have no effect (nvhook loads no
kernel modules; NVML runs unprivileged; ldconfig runs sandboxed). Errors are libnvc's shape:
`nvidia-container-cli: <stage> error: <message>`, exit 1.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from nvhook.compat.nvcli.args import Parsed, parse_cli
from nvhook.errors import NvhookError, UsageError

if TYPE_CHECKING:
    from nvhook.config.model import HookConfig
    from nvmount.api import DriverInventory, EngineRequest

VERSION = "1.17.8"
CAPABILITY_FLAGS = ("compat32", "compute", "display", "graphics", "ngx", "utility", "video")
STAGES = (("RequirementError", "requirement"), ("SelectionError", "device"),
          ("LdcacheError", "ldcache"), ("MountError", "mount"), ("CgroupError", "mount"),
          ("PathError", "container"), ("ContainerError", "container"),
          ("DriverError", "initialization"), ("NvmountError", "initialization"))
USAGE = """Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]
Command line utility for manipulating NVIDIA GPU containers (nvhook drop-in).

  -d, --debug=FILE           Log debug information
  -k, --load-kmods           Load kernel modules (accepted; nvhook loads none)
  -l, --ldcache=FILE         Path to the system's DSO cache
  -n, --no-pivot             Do not use pivot_root (accepted)
  -r, --root=PATH            Path to the driver root directory
  -u, --user[=UID[:GID]]     User and group to use for privilege separation (accepted)
      --no-create-imex-channels  Do not create IMEX channel nodes (accepted)

Commands:
  info                       Report information about the driver and devices
  list                       List driver components
  configure                  Configure a container with GPU support
"""


def version_text() -> str:
    from nvhook import __version__

    return (f"cli-version: {VERSION}\nlib-version: {VERSION}\nbuild date: -\n"
            f"build revision: nvhook {__version__}\nbuild compiler: python "
            f"{sys.version_info[0]}.{sys.version_info[1]}\nbuild platform: {os.uname().machine}\n"
            "build flags: nvhook drop-in (no libnvidia-container)\n")


def main(argv: list[str], *, cwd: str | None = None) -> int:
    """The drop-in's entry point (the launcher passes argv[1:] and its original cwd)."""
    from nvhook.logs import configure_logging

    try:
        parsed = parse_cli(argv)
        debug = parsed.global_opts.get("debug")
        configure_logging(False)
        if isinstance(debug, str) and debug:
            from nvhook.logs import attach_log_file

            attach_log_file(debug)
        return _dispatch(parsed, cwd)
    except UsageError as err:
        sys.stderr.write(f"{err}\nTry `nvidia-container-cli --help' for more information.\n")
        return 1
    except Exception as err:
        sys.stderr.write(f"nvidia-container-cli: {error_text(err)}\n")
        return 1


def error_text(err: Exception) -> str:
    """`<stage> error: <message>` for an engine or hook error (libnvc's stages)."""
    from nvhook.logs import one_line

    stage = "initialization"
    for cls in type(err).__mro__:
        match = [s for name, s in STAGES if name == cls.__name__]
        if match:
            stage = match[0]
            break
    if not isinstance(err, NvhookError) and stage == "initialization" and \
            not any(c.__name__ == "NvmountError" for c in type(err).__mro__):
        return one_line(f"internal error: {type(err).__name__}: {err} (please report it)")
    text = str(err)
    return one_line(text if text.startswith(f"{stage} error: ") else f"{stage} error: {text}")


def _dispatch(parsed: Parsed, cwd: str | None) -> int:
    if parsed.global_opts.get("version"):
        sys.stdout.write(version_text())
        return 0
    if not parsed.command or parsed.global_opts.get("help") or parsed.opts.get("help"):
        sys.stdout.write(USAGE)
        return 0 if parsed.global_opts.get("help") or parsed.opts.get("help") else 1
    from nvhook.config.load import load_config

    config = load_config(None, os.environ)
    if parsed.command == "configure":
        return configure(parsed, config, cwd)
    inventory = _discover(parsed, config)
    if parsed.command == "info":
        sys.stdout.write(info_csv(inventory) if parsed.opts.get("csv") else info_text(inventory))
        return 0
    return list_files(parsed, inventory)


def _flags(parsed: Parsed) -> dict[str, str | bool]:
    g, o = parsed.global_opts, parsed.opts
    flags: dict[str, str | bool] = {k: v for k, v in (
        ("root", g.get("root")), ("ldcache", g.get("ldcache")), ("ldconfig", o.get("ldconfig")),
        ("no_cgroups", o.get("no-cgroups"))) if isinstance(v, (str, bool)) and v}
    mode = "disabled" if o.get("no-cntlibs") else o.get("cuda-compat-mode")
    if isinstance(mode, str):
        if mode not in ("ldconfig", "mount", "disabled"):
            raise UsageError(f"nvidia-container-cli: invalid cuda-compat-mode: {mode} "
                             "(ldconfig, mount or disabled)")
        flags["compat_mode"] = mode
    return flags


def _discover(parsed: Parsed, config: HookConfig) -> DriverInventory:
    from nvhook.hook.mount import engine_options
    from nvmount.api import DiscoveryOptions, discover_driver

    options = engine_options(config, cli_flags=_flags(parsed))
    o = parsed.opts
    return discover_driver(options.root, options.ldcache, options.proc_root, options=(
        DiscoveryOptions(no_persistenced=bool(o.get("no-persistenced")),
                         no_fabricmanager=bool(o.get("no-fabricmanager")),
                         no_gsp_firmware=bool(o.get("no-gsp-firmware")))))


def info_text(inv: DriverInventory) -> str:
    """libnvc's `info` (no MIG lines: those are `nvhook info`'s addition)."""
    from nvhook.admin.driver_info import info_text as nvhook_info

    return "".join(line + "\n" for line in nvhook_info(inv).splitlines()
                   if not line.startswith("MIG Device:"))


def info_csv(inv: DriverInventory) -> str:
    from nvhook.admin.driver_info import info_csv as nvhook_csv

    return nvhook_csv(inv)


def list_files(parsed: Parsed, inv: DriverInventory) -> int:
    """libnvc's `list`: root-relative paths, in its order (nvhook.admin.driver_info.list_paths)."""
    import argparse

    from nvhook.admin.driver_info import list_paths, parse_imex_channels
    from nvmount.api import select_devices

    o = parsed.opts
    args = argparse.Namespace(
        device=_list(o, "device"), libraries=bool(o.get("libraries")),
        binaries=bool(o.get("binaries")), ipcs=bool(o.get("ipcs")),
        firmwares=bool(o.get("firmwares")), compat32=bool(o.get("compat32")),
        no_gsp_firmware=bool(o.get("no-gsp-firmware")))
    mig_config, mig_monitor = _list(o, "mig-config"), _list(o, "mig-monitor")
    if not (args.device or args.libraries or args.binaries or args.ipcs or args.firmwares
            or args.compat32 or mig_config or mig_monitor):
        args.device, args.compat32 = ["all"], True
        args.libraries = args.binaries = args.ipcs = args.firmwares = True
    selection = select_devices(inv.gpus, ",".join(args.device),
                               mig_config=",".join(mig_config) or None,
                               mig_monitor=",".join(mig_monitor) or None)
    channels = parse_imex_channels(",".join(_list(o, "imex-channel")))
    root = inv.root.rstrip("/")
    paths = [p[len(root):] if root and p.startswith(root + "/") else p
             for p in list_paths(inv, selection, args, channels)]
    sys.stdout.write("".join(p + "\n" for p in paths))
    return 0


def _list(values: dict[str, Any], name: str) -> list[str]:
    value = values.get(name)
    return list(value) if isinstance(value, list) else []


def configure(parsed: Parsed, config: HookConfig, cwd: str | None) -> int:
    """Configure the container whose init is --pid (else our parent) and rootfs ROOTFS."""
    from nvhook.hook.mount import engine_options
    from nvmount.api import Delivered, Faults, Libc, configure_container

    if len(parsed.args) != 1:
        raise UsageError("nvidia-container-cli: configure: expected one ROOTFS argument")
    rootfs = parsed.args[0]
    if not rootfs.startswith("/") or os.path.normpath(rootfs) == "/":
        raise UsageError("nvidia-container-cli: input error: invalid rootfs directory")
    pid_text = parsed.opts.get("pid")
    pid = _pid(pid_text) if isinstance(pid_text, str) else os.getppid()
    delivered = Delivered(all_devices=True) if parsed.opts.get("no-devbind") else None
    options = engine_options(config, None, limit_privileges=True, delivered=delivered,
                             cli_flags=_flags(parsed))
    debug = bool(parsed.global_opts.get("debug"))
    configure_container(engine_request(parsed), pid, rootfs, options, Libc(),
                        faults=Faults.from_env(os.environ, debug=debug,
                                               enabled=config.nvhook.test_faults))
    return 0


def _pid(text: str) -> int:
    from nvmount.bounds import parse_decimal, shorten

    pid = parse_decimal(text)
    if pid is None or not 0 < pid < 2**31:
        raise UsageError(f"nvidia-container-cli: invalid pid: {shorten(text)}")
    return pid


def engine_request(parsed: Parsed) -> EngineRequest:
    """The flags of `configure` as the engine's request."""
    from nvhook.hook.mount import imex_channel
    from nvmount.api import DriverCapability, EngineRequest

    o = parsed.opts
    from nvhook.errors import RequestError
    from nvhook.hook.device_lists import cli_devices
    from nvmount.errors import SelectionError

    try:  # the request's id rules (nvhook.hook.device_lists)
        devices = cli_devices(_list(o, "device"))
    except RequestError as err:
        raise SelectionError(str(err)) from err
    channels = tuple(imex_channel(c) for c in ",".join(_list(o, "imex-channel")).split(",") if c)
    return EngineRequest(
        devices=devices,
        capabilities=DriverCapability.from_names([c for c in CAPABILITY_FLAGS if o.get(c)]),
        requirements=tuple(_list(o, "require")),
        mig_config=",".join(_list(o, "mig-config")) or None,
        mig_monitor=",".join(_list(o, "mig-monitor")) or None,
        imex_channels=channels)


def entry() -> None:  # pragma: no cover - console script
    sys.exit(main(sys.argv[1:], cwd=os.getcwd()))
