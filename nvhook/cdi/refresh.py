"""`nvhook cdi refresh --output PATH`: what the refresh units run (boot, a driver install or
upgrade, a module load or unload, a GPU bound or unbound, and every minute for MIG changes).

1. Wait for the driver (at most `--wait` seconds): /proc/driver/nvidia exists and discovery
   (NVML) succeeds; a spec made before the driver is ready would name nothing.
2. No spec at PATH: generate one (the given options).
3. Our spec at PATH: when the driver's state (`nvhook.cdi.stamp.driver_state`: version,
   majors, GPUs, MIG instances) and the files it names are unchanged, nothing more is done
   (no NVML: the periodic run costs a few stats); otherwise it is regenerated with the
   options and config it records, and rewritten atomically when it differs. What it records
   (config, driver root, hook path) is policy: each must pass the trusted-path rule now
   (`nvhook.cdi.recorded`), else the spec is kept as it was and the run fails in one line.
4. Any other file at PATH (another tool's spec, or one that does not read): left alone, a
   one-line error.

Specs that heal (`nvhook.cdi.heal`): before generating, the modules are loaded and the missing
control and GPU nodes created (NVIDIA's refresh service, toolkit #1979); a spec is written
only when it is whole (every GPU the driver lists, every node and file it names present),
else the refresh waits and then refuses in one line, keeping the spec it had; a spec that is
no longer whole (written at boot before the driver was ready) is regenerated even when the
driver's state did not change. The spec's directory is locked for the whole refresh.

Effects: discovery, reads and writes PATH.
"""

from __future__ import annotations

import os
import time
from typing import Any

from nvhook.errors import CdiError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable

    from nvhook.config.model import HookConfig

RETRY_SECONDS = 2.0


def when_ready(make: Callable[[], Any], proc_root: str, wait: float,
               sleep: Callable[[float], None] = time.sleep,
               prepare: Callable[[int], object] | None = None) -> Any:
    """`make()` once the driver is ready: retried while /proc/driver/nvidia is missing or
    discovery fails, for at most `wait` seconds (then the last error, in one line);
    `prepare(attempt)` first at every try (`nvhook.cdi.heal.prepare_host`)."""
    from nvmount.errors import NvmountError

    tries = 1 + int(wait // RETRY_SECONDS)
    for attempt in range(tries):
        try:
            if prepare is not None:
                prepare(attempt)
            if not os.path.isdir(os.path.join(proc_root, "driver/nvidia")):
                raise CdiError(f"the NVIDIA driver is not loaded ({proc_root}/driver/nvidia "
                               "is missing)")
            return make()
        except (CdiError, NvmountError) as err:
            if attempt == tries - 1:
                raise CdiError(f"cdi refresh: {err} (waited {wait:g} s for the driver)") from err
        sleep(RETRY_SECONDS)
    raise AssertionError("unreachable")


def unchanged(spec: dict[str, Any], proc_root: str) -> bool:
    """Our spec's recorded driver state and file digest still hold (no NVML)."""
    from nvhook.cdi import spec as S
    from nvhook.cdi.stamp import driver_state, parse_stamp, paths_digest

    stamp = parse_stamp(S.spec_stamp(spec) or "")
    return (stamp.get("state") == driver_state(proc_root)
            and stamp.get("digest") == paths_digest(S.named_paths(spec)))


def refresh(output: str, config: HookConfig, generate: Callable[[HookConfig], dict[str, Any]],
            render: Callable[[dict[str, Any]], str], *, wait: float) -> str:
    """Bring the spec at `output` up to date; what was done, for the log."""
    from nvhook.cdi.heal import locked

    with locked(output):
        return _refresh(output, config, generate, render, wait=wait)


def whole(make: Callable[[], dict[str, Any]], config: HookConfig, output: str, wait: float,
          ) -> dict[str, Any]:
    """`make()` once the driver is ready and the host's modules and nodes are prepared (the
    modules at the first try only), its spec whole (`nvhook.cdi.heal`), within `wait`."""
    from nvhook.cdi.heal import checked, prepare_host

    proc_root = config.nvhook.proc_root or "/proc"

    def prepare(attempt: int) -> None:
        prepare_host(config.cli.root or "/", proc_root, modules=attempt == 0)

    spec: dict[str, Any] = when_ready(lambda: checked(make(), proc_root, output), proc_root,
                                      wait, prepare=prepare)
    return spec


def _refresh(output: str, config: HookConfig, generate: Callable[[HookConfig], dict[str, Any]],
             render: Callable[[dict[str, Any]], str], *, wait: float) -> str:
    from nvhook.cdi.check import author, differences, read_spec, regenerate
    from nvhook.cdi.generate import write_atomically
    from nvhook.cdi.heal import incomplete
    from nvhook.cdi.recorded import policy

    proc_root = config.nvhook.proc_root or "/proc"
    if not os.path.lexists(output):
        spec = whole(lambda: generate(config), config, output, wait)
        write_atomically(output, render(spec))
        return f"{output}: written ({len(spec['devices'])} devices)"
    old = read_spec(output)
    if author(old) != "nvhook":
        raise CdiError(f"cdi refresh: {output} was written by {author(old)}, not nvhook: left "
                       "as it is (regenerate it with that tool, or use another --output)")
    if unchanged(old, proc_root) and not incomplete(old, proc_root):
        return f"{output}: current (driver state unchanged)"
    config = policy(old, config, output, explicit=False, hook_path=None)
    new = whole(lambda: regenerate(old, config), config, output, wait)  # the recorded config's
    why = differences(old, new)
    if not why:
        return f"{output}: current"
    write_atomically(output, render(new))
    return f"{output}: refreshed ({'; '.join(why)})"
