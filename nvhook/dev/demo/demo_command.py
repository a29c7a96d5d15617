"""`nvhook demo`: start a real GPU container under runc and print its `nvidia-smi`.

Stage: CLI command (off the hook's path). On a host with a loaded NVIDIA driver it uses the
real driver root "/"; otherwise (or with --sim) a simulated 8-GPU driver in a temp dir. It
builds a minimal glibc rootfs from the host, installs the hook launcher, writes an OCI bundle
whose prestart hooks are the sim's /proc/driver step (simulation only) and our hook, runs
`runc run` twice (`nvidia-smi` with --gpus, then `nvidia-smi -L` with GPU 0) and removes
everything again unless --keep.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from nvhook.errors import NvhookError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.dev.demo.bundle import Runc, RuncResult
    from nvhook.dev.demo.driver import DriverSetup
    from nvhook.flags import GlobalOptions

SIM_GPUS = 8


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="nvhook demo",
        description="start a GPU container under runc (simulated driver without a GPU) "
                    "and print nvidia-smi from inside it",
    )
    parser.add_argument("--gpus", default="all",
                        help="NVIDIA_VISIBLE_DEVICES of the container (default: all)")
    parser.add_argument("--sim", action="store_true",
                        help="use the simulated driver even when a real one is loaded")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (bundles, rootfs, simulated driver)")
    return parser.parse_args(argv)


def main(argv: list[str], opts: GlobalOptions) -> int:
    args = _parse(argv)
    if os.geteuid() != 0:
        raise NvhookError("demo: needs root to run containers (sudo .venv/bin/nvhook demo)")
    from nvhook.dev.demo.bundle import Runc

    runc = Runc()  # raises a clear error when runc is missing
    work = Path(tempfile.mkdtemp(prefix="nvhook-demo-"))
    try:
        _demo(work, runc, args, opts)
    finally:
        if args.keep:
            _out(f"\nkept: {work}\n")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _demo(work: Path, runc: Runc, args: argparse.Namespace, opts: GlobalOptions) -> None:
    from nvhook.dev.demo.driver import install_hook
    from nvhook.dev.demo.rootfs import build_rootfs

    launcher = install_hook(work / "bin")
    driver = _driver(work / "driver", launcher, force_sim=args.sim, config=opts.config_path)
    rootfs = build_rootfs(work / "rootfs")
    where = (f"simulated driver with {SIM_GPUS} GPUs at {driver.root}" if driver.simulated
             else "the host's NVIDIA driver")
    _out(f"nvhook demo: runc + prestart hook {launcher}, {where}\n\n")
    res = _run(work / "bundle-smi", rootfs, runc, driver, launcher, debug=opts.debug,
               script="nvidia-smi", gpus=args.gpus)
    _out(f"$ runc run (NVIDIA_VISIBLE_DEVICES={args.gpus}) -- nvidia-smi\n{res.stdout}\n")
    res = _run(work / "bundle-list", rootfs, runc, driver, launcher, debug=opts.debug,
               script="nvidia-smi -L", gpus="0")
    _out(f"$ runc run (NVIDIA_VISIBLE_DEVICES=0) -- nvidia-smi -L\n{res.stdout}")


def _driver(where: Path, launcher: Path, *, force_sim: bool, config: str | None) -> DriverSetup:
    from nvhook.dev.demo.driver import DriverSetup, create_sim_driver, has_real_driver, real_driver

    if not force_sim and has_real_driver():
        real = real_driver()
        return DriverSetup(real.root, Path(config) if config else None, (), simulated=False)
    return create_sim_driver(where, SIM_GPUS, launcher)


def _run(bundle: Path, rootfs: Path, runc: Runc, driver: DriverSetup, launcher: Path, *,
         debug: bool, script: str, gpus: str) -> RuncResult:
    from nvhook.dev.demo.bundle import container_spec, new_container_id, runc_run, write_bundle
    from nvhook.dev.demo.driver import nvhook_hook_entry

    hook = nvhook_hook_entry(launcher, driver.config, *(["--debug"] if debug else []))
    spec = container_spec(["/bin/sh", "-c", script], [f"NVIDIA_VISIBLE_DEVICES={gpus}"],
                          prestart=[*driver.prestart, hook], hostname="nvhook-demo")
    write_bundle(bundle, rootfs, spec)
    res = runc_run(bundle, new_container_id("demo"), runc=runc)
    if res.returncode != 0:
        raise NvhookError(
            f"demo container ({script!r}, NVIDIA_VISIBLE_DEVICES={gpus}): runc exited "
            f"{res.returncode}: {_last_lines(res.stderr or res.stdout)} "
            "(rerun with --debug --keep and look at the bundle's config.json)"
        )
    return res


def _last_lines(text: str, n: int = 6) -> str:
    return " | ".join(text.strip().splitlines()[-n:])


def _out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
