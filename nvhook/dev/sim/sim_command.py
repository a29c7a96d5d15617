"""`nvhook sim`: the simulated NVIDIA driver (tooling; off the hook's hot path).

    nvhook sim create DIR [--gpus N] [--mig SPEC] [--driver-version V] [--cuda-version V]
                          [--model NAME]... [--minors LIST] [--ipc] [--imex-channels N]
                          [--no-32bit] [--nvml-init-delay MS] [--build-cache CACHE]
                          [--force] [--json]
    nvhook sim prestart [--with-nvidia-dir]      (an OCI prestart hook: state on stdin)

`create` builds a driver root in DIR (see nvhook.dev.sim); `nvhook --config DIR/config.toml ...`
then uses it. `prestart` mounts a tmpfs on the container's /proc/driver (the kernel module
would provide /proc/driver/nvidia); run it before nvhook's own prestart hook.
"""

from __future__ import annotations

import argparse
import os
import sys

from nvhook.errors import UsageError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.dev.sim import SimRoot, SimSpec
    from nvhook.flags import GlobalOptions


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"nvhook sim: {message} (see nvhook sim --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nvhook sim", description="simulated NVIDIA driver")
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="build a simulated driver root in DIR")
    create.add_argument("dir", metavar="DIR")
    create.add_argument("--gpus", type=int, default=8, help="number of GPUs (0-64, default 8)")
    create.add_argument("--mig", default="", metavar="SPEC",
                        help="MIG devices: GPUS=PROFILES[;...], e.g. '0=3g.40gb+2x2g.20gb;"
                             "1-3=7x1g.10gb' (GPUS: all, 0, 0,2, 0-3)")
    create.add_argument("--driver-version", default="550.54.15")
    create.add_argument("--cuda-version", default="12.4")
    create.add_argument("--model", action="append", default=[], metavar="NAME",
                        help="GPU model (repeat to cycle models over the GPUs; default "
                             "NVIDIA A100-SXM4-80GB)")
    create.add_argument("--minors", default="", metavar="LIST",
                        help="device minors per GPU index, comma-separated (default 0..N-1)")
    create.add_argument("--ipc", action="store_true",
                        help="persistenced/fabricmanager sockets and /tmp/nvidia-mps")
    create.add_argument("--imex-channels", type=int, default=1, metavar="N")
    create.add_argument("--no-32bit", action="store_true", help="skip the 32-bit libraries")
    create.add_argument("--gated", action="store_true",
                        help="also GDS, MOFED, NVSwitch and GDRCopy devices (NVIDIA_GDS=...)")
    create.add_argument("--tegra", action="store_true",
                        help="a Jetson root: L4T mount specs for the CSV backend (mode csv)")
    create.add_argument("--wsl", action="store_true",
                        help="a WSL2 guest: /dev/dxg and a driver store under /usr/lib/wsl")
    create.add_argument("--nvml-init-delay", type=int, default=0, metavar="MS",
                        help="model GPUs without persistence mode: an nvmlInit that finds "
                             "NVML uninitialised (a process's first) waits MS per GPU (NVIDIA "
                             "documents 1-3 s per GPU)")
    create.add_argument("--build-cache", default=None, metavar="CACHE",
                        help="keep/reuse the compiled libraries and binaries in CACHE")
    create.add_argument("--force", action="store_true",
                        help="replace an earlier simulated root in DIR")
    create.add_argument("--json", action="store_true", help="print nvsim.json")
    create.add_argument("--cdi-spec", metavar="PATH",
                        help="also write the CDI spec of the simulated GPUs (nvhook cdi "
                             "generate with the sim's config)")
    create.add_argument("--cdi-hook-path", metavar="PATH",
                        help="the nvhook launcher the spec's hook runs (default: this "
                             "installation's, as nvhook cdi generate)")
    prestart = sub.add_parser("prestart", help="OCI prestart step: tmpfs on /proc/driver")
    prestart.add_argument("--with-nvidia-dir", action="store_true",
                          help="also create an empty /proc/driver/nvidia")
    return parser


def main(argv: list[str], opts: GlobalOptions) -> int:
    args = _parser().parse_args(argv)
    if args.action == "create":
        return _create(args, opts)
    return _prestart(args, opts)


def _spec(args: argparse.Namespace) -> SimSpec:
    from nvhook.dev.sim import SimSpec
    from nvhook.dev.sim.topology import parse_mig_spec

    minors: tuple[int, ...] = ()
    if args.minors:
        try:
            minors = tuple(int(m) for m in args.minors.split(","))
        except ValueError:
            raise UsageError(f"nvhook sim create --minors {args.minors!r}: not a list of "
                             "integers (e.g. 0,1,3,2)") from None
    models = tuple(args.model) or SimSpec().models
    return SimSpec(
        gpus=args.gpus, driver_version=args.driver_version, cuda_version=args.cuda_version,
        models=models, mig=parse_mig_spec(args.mig, args.gpus) if args.mig else (),
        minors=minors, ipc=args.ipc, compat32=not args.no_32bit,
        imex_channels=args.imex_channels, gated=args.gated, tegra=args.tegra, wsl=args.wsl,
        nvml_init_delay_ms=max(args.nvml_init_delay, 0),
    )


def _create(args: argparse.Namespace, opts: GlobalOptions) -> int:
    from nvhook.dev.sim import create_sim_root

    cwd = opts.cwd or os.getcwd()
    cache = os.path.join(cwd, args.build_cache) if args.build_cache else None
    sim = create_sim_root(os.path.join(cwd, args.dir), _spec(args), force=args.force,
                          cache_dir=cache)
    if args.cdi_spec:
        _write_cdi(sim, os.path.join(cwd, args.cdi_spec), args.cdi_hook_path)
    if args.json:
        with open(os.path.join(sim.path, "nvsim.json"), encoding="utf-8") as f:
            sys.stdout.write(f.read())
    else:
        sys.stdout.write(_summary(sim))
    return 0


def _write_cdi(sim: SimRoot, path: str, hook_path: str | None) -> None:
    from nvhook.cdi.generate import (
        GenerateOptions,
        format_of,
        generate_spec,
        render,
        write_atomically,
    )
    from nvhook.config.load import load_config

    spec = generate_spec(load_config(sim.config_path, {}),
                         GenerateOptions(hook_path=hook_path or ""))
    write_atomically(path, render(spec, format_of(path, None)))
    hook = spec["containerEdits"]["hooks"][0]["path"]
    sys.stderr.write(f"nvhook sim: wrote the CDI spec {path} (hook: {hook})\n")


def _summary(sim: SimRoot) -> str:
    mig = sum(len(g.mig_devices) for g in sim.gpus)
    lines = [
        f"simulated NVIDIA driver {sim.driver_version} (CUDA {sim.cuda_version}) with "
        f"{len(sim.gpus)} GPUs and {mig} MIG devices in {sim.path}",
        f"  config:     {sim.config_path}",
        f"  inventory:  {sim.path}/nvsim.json",
        f"  try:        nvhook --config {sim.config_path} info",
        f"              LD_LIBRARY_PATH={sim.env()['LD_LIBRARY_PATH']} {sim.nvidia_smi}",
    ]
    if not sim.real_device_nodes:
        lines.append("  note:       mknod was not permitted: /dev nodes are regular files")
    return "\n".join(lines) + "\n"


def _prestart(args: argparse.Namespace, opts: GlobalOptions) -> int:
    from nvhook.dev.sim.prestart import mount_proc_driver
    from nvhook.hook.oci import load_spec, load_state, resolve_rootfs

    state = load_state(sys.stdin.buffer)
    if state.pid <= 0:
        raise UsageError("nvhook sim prestart: the container state has no pid "
                         "(run it as an OCI prestart hook)")
    rootfs = resolve_rootfs(load_spec(state.bundle, cwd=opts.cwd), opts.cwd)
    mount_proc_driver(state.pid, rootfs, with_nvidia_dir=args.with_nvidia_dir)
    return 0
