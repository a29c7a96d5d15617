"""`nvhook info` and `nvhook list`: the host driver as nvhook sees it (libnvc-spec §10).

Stage: commands, off the hook's path. Both read config.toml (`--config`): the driver root
(`nvidia-container-cli.root`), its `ldcache` and `[nvhook] proc-root`, then run the same
discovery a container start runs. Output goes to stdout; errors are raised for the CLI.

    info [--json | --csv] [--fresh]
                            driver and CUDA version, every GPU (and its MIG devices): the
                            inventory container starts use (the cache while the driver's
                            files and proc facts are unchanged); --fresh queries NVML now
    list [-d ID] [-l] [-b] [-i] [-f] [--compat32] [--mig-config ID] [--mig-monitor ID]
         [--imex-channel N] [--no-persistenced] [--no-fabricmanager] [--no-gsp-firmware]
                            every host path a container could get, one a line, relative to
                            the driver root as nvidia-container-cli prints them (firmware
                            under /lib/firmware, the kernel's path)
"""

from __future__ import annotations

import os
import sys

from nvhook.errors import UsageError
from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator
    from typing import Any

    from nvhook.flags import GlobalOptions
    from nvmount.api import DiscoveryOptions, DriverInventory, Gpu, Selection

log = get_logger(__name__)

_LABEL = 15  # libnvc prints "%-15s " labels


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argparse parser whose usage errors go through the CLI's exit code 2 (argparse is
    imported here: `info`'s plain forms never need it)."""
    import argparse

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:
            raise UsageError(f"{self.prog}: {message}")

    return _Parser(prog=prog, description=description)


def _discover(opts: GlobalOptions, discovery: DiscoveryOptions | None = None) -> DriverInventory:
    from nvhook.config.load import load_config
    from nvmount.api import DiscoveryOptions, discover_driver
    from nvmount.records import replace

    cfg = load_config(opts.config_path, os.environ)
    discovery = replace(discovery or DiscoveryOptions(), mps_pipe_dir=cfg.nvhook.mps_pipe_directory,
                        sys_root=cfg.nvhook.sys_root, nvml_timeout=cfg.nvhook.nvml_timeout)
    from nvmount.api import missing_root
    from nvmount.errors import DriverError

    missing = missing_root(cfg.cli.root or "/")
    if missing is not None:
        raise DriverError(missing)
    return discover_driver(cfg.cli.root or "/", cfg.cli.ldcache or "/etc/ld.so.cache",
                           cfg.nvhook.proc_root or "/proc", options=discovery)


def _discover_cached(opts: GlobalOptions, fresh: bool) -> tuple[DriverInventory, str, str]:
    """The inventory, the cache's state (`_CACHE`) and where the driver root came from: the
    cached inventory while its stamp holds, as a container start takes it; `fresh`: from
    NVML now, saying what the cache held (it is rewritten)."""
    from nvhook.config.load import load_config
    from nvhook.hook.mount import engine_options
    from nvmount.api import Faults, discover_cached

    config = load_config(opts.config_path, os.environ)
    inventory, cache = discover_cached(engine_options(config), Faults(), fresh=fresh)
    origin = {"config": "nvidia-container-cli.root",
              "detected": "a driver container (nvidia-container-cli.root is unset)"}
    return inventory, cache, origin.get(config.cli.root_origin, "default")


# -- info ---------------------------------------------------------------------------------------
def _info_args(argv: list[str]) -> tuple[bool, bool, bool]:
    """(--json, --csv, --fresh); argparse only for help and usage errors."""
    if set(argv) <= {"--json", "--csv", "--fresh"} and not {"--json", "--csv"} <= set(argv):
        return "--json" in argv, "--csv" in argv, "--fresh" in argv
    parser = _parser("nvhook info", "Show the driver and GPUs nvhook sees.")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON")
    fmt.add_argument("--csv", action="store_true", help="print CSV, as nvidia-container-cli")
    parser.add_argument("--fresh", action="store_true",
                        help="query NVML now instead of the validated inventory cache")
    args = parser.parse_args(argv)
    return args.json, args.csv, args.fresh


def main_info(argv: list[str], opts: GlobalOptions) -> int:
    as_json, as_csv, fresh = _info_args(argv)
    inventory, cache, origin = _discover_cached(opts, fresh)
    if as_json:
        import json

        backend = {} if inventory.proc_driver_dir else {"backend_report": list(inventory.warnings)}
        doc = {**info_json(inventory), "driver_root": {"path": inventory.root, "from": origin},
               **backend, "inventory_cache": cache}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif as_csv:
        sys.stdout.write(info_csv(inventory))
    else:
        report = "" if inventory.proc_driver_dir else "".join(  # CSV or WSL backend
            _field("Backend", line) for line in inventory.warnings)
        sys.stdout.write(info_text(inventory) + report + "\n" + _field("Driver root",
                                                             f"{inventory.root} ({origin})")
                         + _field("Inventory cache", _CACHE[cache]))
    return 0


_CACHE = {"current": "current (container starts use it without NVML)",
          "hit": "current (unchanged driver files and proc facts; --fresh asks NVML)",
          "refreshed": "refreshed (it was absent, or the driver changed since)",
          "inconsistent": "refreshed (it did not match the driver: please report this)",
          "off": "off ([nvhook] cache-dir = \"\", or not root)"}


def info_json(inv: DriverInventory) -> dict[str, Any]:
    return {
        "driver_version": inv.driver_version,
        "cuda_version": inv.cuda_version,
        "gpus": [{
            "index": g.index, "minor": g.minor, "uuid": g.uuid, "bus_id": g.bus_id,
            "model": g.model, "brand": g.brand, "architecture": g.architecture,
            "mig_devices": [{"index": m.index, "uuid": m.uuid, "gi": m.gi, "ci": m.ci,
                             "profile": m.profile} for m in g.mig_devices],
            "dri_nodes": [n.container_path for n in g.dri_nodes],
        } for g in inv.gpus],
        "gated": {family: [n.container_path for f, n in inv.gated_nodes if f == family]
                  for family in dict.fromkeys(f for f, _ in inv.gated_nodes)},
    }


def _field(label: str, value: object) -> str:
    return f"{label + ':':<{_LABEL}} {value}\n"


def info_text(inv: DriverInventory) -> str:
    out = _field("NVRM version", inv.driver_version) + _field("CUDA version", inv.cuda_version)
    for g in inv.gpus:
        out += "\n" + "".join(_field(k, v) for k, v in (
            ("Device Index", g.index), ("Device Minor", g.minor), ("Model", g.model),
            ("Brand", g.brand), ("GPU UUID", g.uuid), ("Bus Location", g.bus_id),
            ("Architecture", g.architecture)))
        for m in g.mig_devices:  # nvhook addition: the id to select it is "<gpu>:<mig>"
            detail = ", ".join(x for x in (f"gi {m.gi}", f"ci {m.ci}", m.profile) if x)
            out += _field("MIG Device", f"{g.index}:{m.index} {m.uuid} ({detail})")
    return out


def info_csv(inv: DriverInventory) -> str:
    out = f"NVRM version,CUDA version\n{inv.driver_version},{inv.cuda_version}\n\n"
    out += "Device Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n"
    for g in inv.gpus:
        out += (f"{g.index},{g.minor},{g.model},{g.brand},{g.uuid},{g.bus_id},"
                f"{g.architecture}\n")
    return out


# -- list ---------------------------------------------------------------------------------------
def _list_parser() -> argparse.ArgumentParser:
    p = _parser("nvhook list", (
        "List every host path a container could get (all GPUs and capabilities without "
        "options), one a line, relative to the driver root."))
    p.add_argument("-d", "--device", action="append", default=[], metavar="ID",
                   help="GPU or MIG device(s) to list: all, index, UUID, PCI bus id, G:M")
    p.add_argument("-l", "--libraries", action="store_true", help="list driver libraries")
    p.add_argument("-b", "--binaries", action="store_true", help="list driver binaries")
    p.add_argument("-i", "--ipcs", action="store_true", help="list driver IPC paths")
    p.add_argument("-f", "--firmwares", action="store_true", help="list GSP firmware")
    p.add_argument("-g", "--graphics", action="store_true",
                   help="list graphics/display files (ICDs, Xorg modules) and DRM nodes")
    p.add_argument("--compat32", action="store_true", help="also list 32-bit libraries")
    p.add_argument("--mig-config", action="append", default=[], metavar="ID",
                   help="MIG devices to list config capabilities for (only 'all')")
    p.add_argument("--mig-monitor", action="append", default=[], metavar="ID",
                   help="MIG devices to list monitor capabilities for (only 'all')")
    p.add_argument("--imex-channel", action="append", default=[], metavar="N",
                   help="IMEX channel(s) to list")
    p.add_argument("--no-persistenced", action="store_true")
    p.add_argument("--no-fabricmanager", action="store_true")
    p.add_argument("--no-gsp-firmware", action="store_true")
    return p


def main_list(argv: list[str], opts: GlobalOptions) -> int:
    from nvmount.api import DiscoveryOptions, select_devices

    args = _list_parser().parse_args(argv)
    if not (args.device or args.libraries or args.binaries or args.ipcs or args.firmwares
            or args.compat32 or args.mig_config or args.mig_monitor or args.graphics):
        args.device, args.compat32 = ["all"], True
        args.libraries = args.binaries = args.ipcs = args.firmwares = args.graphics = True
    channels = parse_imex_channels(",".join(args.imex_channel))
    inventory = _discover(opts, DiscoveryOptions(
        no_persistenced=args.no_persistenced, no_fabricmanager=args.no_fabricmanager,
        no_gsp_firmware=args.no_gsp_firmware))
    selection = select_devices(inventory.gpus, ",".join(args.device),
                               mig_config=",".join(args.mig_config) or None,
                               mig_monitor=",".join(args.mig_monitor) or None)
    prefix = "" if inventory.root == "/" else inventory.root
    paths = [p[len(prefix):] if prefix and p.startswith(prefix + "/") else p
             for p in list_paths(inventory, selection, args, channels)]  # all or nothing
    sys.stdout.write("".join(p + "\n" for p in paths))
    return 0


def parse_imex_channels(value: str) -> tuple[int, ...]:
    from nvhook.hook.mount import imex_channel

    return tuple(imex_channel(token) for token in filter(None, value.split(",")))


def _proc(inv: DriverInventory, path: str) -> str:
    """Host path of a /proc/driver/nvidia path of the driver root."""
    prefix = "/proc/driver/nvidia"
    return inv.proc_driver_dir + path[len(prefix):] if path.startswith(prefix) else path


def list_paths(inv: DriverInventory, sel: Selection, args: argparse.Namespace,
               channels: tuple[int, ...]) -> Iterator[str]:
    """libnvc's `list` order: devices, MIG access files, IMEX, MIG config/monitor, binaries,
    libraries, 32-bit libraries, IPC, firmware."""
    if args.device:
        yield from (n.host_path for n in inv.control_nodes)
        yield from (g.node.host_path for g in sel.gpus)
        if getattr(args, "graphics", False):  # (not the nvidia-container-cli drop-in's)
            yield from (n.host_path for g in sel.gpus for n in g.dri_nodes)
        if not (sel.mig_config or sel.mig_monitor):
            for m in sel.mig_devices:
                for access, cap in ((m.gi_access, m.gi_cap), (m.ci_access, m.ci_cap)):
                    yield _proc(inv, access)
                    if cap is not None:
                        yield cap.host_path
    yield from _imex_paths(inv, channels)
    for wanted, name, cap, gpus in (
            (sel.mig_config, "config", inv.mig_config_cap, sel.mig_config_gpus),
            (sel.mig_monitor, "monitor", inv.mig_monitor_cap, sel.mig_monitor_gpus)):
        if wanted:
            yield from _mig_all_paths(inv, name, cap, gpus)
    if args.binaries:
        yield from (f.host_path for f in inv.binaries)
    if args.libraries:
        yield from (f.host_path for f in inv.libraries)
        if args.compat32:
            yield from (f.host_path for f in inv.libraries32)
    if getattr(args, "graphics", False):
        yield from (f.host_path for f in inv.graphics)
        yield from (n.host_path for _, n in inv.gated_nodes)  # NVIDIA_GDS=enabled, ...
        yield from (f.host_path for _, f in inv.gated_files)
    if args.ipcs:
        yield from (f.host_path for f in inv.ipc)
    if args.firmwares and not args.no_gsp_firmware:
        yield from (f.container_path for f in inv.firmware)  # as libnvc: /lib/firmware/...


def _imex_paths(inv: DriverInventory, channels: tuple[int, ...]) -> Iterator[str]:
    from nvmount.errors import SelectionError

    present = {n.minor: n for n in inv.imex_channels}
    for channel in channels:
        if channel not in present:
            raise SelectionError(f"missing IMEX channel {channel}: "
                                 f"/dev/nvidia-caps-imex-channels/channel{channel} does not "
                                 f"exist in the driver root {inv.root}")
        yield present[channel].host_path


def _mig_all_paths(inv: DriverInventory, name: str, cap: Any,
                   gpus: tuple[Gpu, ...]) -> Iterator[str]:
    yield _proc(inv, f"/proc/driver/nvidia/capabilities/mig/{name}")
    if cap is None:
        return
    yield cap.host_path
    caps_dir = os.path.dirname(cap.host_path)
    yield caps_dir
    for g in gpus:
        yield _proc(inv, f"/proc/driver/nvidia/capabilities/gpu{g.minor}")
        prefix = f"gpu{g.minor}/"
        yield from (f"{caps_dir}/nvidia-cap{minor}" for cap_name, minor in inv.mig_minors
                    if cap_name.startswith(prefix))
