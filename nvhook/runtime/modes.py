"""How the runtime wrapper delivers a GPU container: the runtime's mode, resolved. Pure but for
two host facts (Tegra's release file, the wrapper's user).

`nvidia-container-runtime.mode` as NVIDIA 1.20 reads it (`internal/info/auto.go`): a container
that names only fully qualified CDI devices is `cdi` (the wrapper's CDI resolution, before this
module is asked); otherwise `auto` is `csv` on Tegra and NVIDIA's `jit-cdi` everywhere else.
nvhook's counterpart of jit-cdi is its spec delivery:

    mode      delivery   what the wrapper does for a GPU container
    auto      spec       (legacy on Tegra, and when the wrapper is not root)
    jit-cdi   spec       plans it, writes devices, device rules and driver mounts into
                         config.json and links and ld.so.cache into the rootfs: no hook
    legacy    legacy     adds the prestart hook, which does everything
    csv       legacy     the hook, reading the Tegra CSV mount specs
    cdi       -          only CDI devices (`nvhook.cdi.resolve`); anything else is an error

Unlike jit-cdi, the spec delivery keeps legacy's semantics: NVIDIA_DRIVER_CAPABILITIES,
NVIDIA_REQUIRE_* and the MIG variables count (jit-cdi mounts every driver file whatever they
say and checks no requirement): a leaner container, and a refused start where legacy refuses
one (docs/runtimes.md, deviations). `[nvhook] runtime-mode = "legacy" | "spec"` forces one delivery
whatever `mode` says ("auto", the default, follows it). The hook alone (Docker's `--gpus`)
still resolves `auto` to legacy, as NVIDIA's does (`nvhook.hook.request.check_mode`).
"""

from __future__ import annotations

import os

from nvhook.errors import WrapperError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.config.model import HookConfig

LEGACY, SPEC = "legacy", "spec"
DELIVERY_ENV = "NVHOOK_RUNTIME_DELIVERY"  # in the hook entry the wrapper adds: what it chose


def delivery(config: HookConfig, *, root: bool | None = None) -> str:
    """LEGACY or SPEC for a GPU container that names no CDI device (module docstring)."""
    forced = config.nvhook.runtime_mode
    if forced in (LEGACY, SPEC):
        return forced
    mode = config.runtime.mode
    if mode == "cdi":
        raise WrapperError(
            "nvidia-container-runtime.mode = 'cdi': the container names no CDI device (request "
            "them as nvidia.com/gpu=N in NVIDIA_VISIBLE_DEVICES or a cdi.k8s.io/ annotation, "
            'or set nvidia-container-runtime.mode = "auto")')
    if mode in (LEGACY, "csv"):
        return LEGACY
    if mode == "auto":
        from nvhook.hook.request import csv_mode

        if csv_mode(config):
            return LEGACY
        if not (os.geteuid() == 0 if root is None else root):
            return LEGACY  # a rootless runtime would bind linux.devices from the host's /dev
    return SPEC  # auto, jit-cdi


def describe(config: HookConfig, chosen: str) -> str:
    """For the log: "mode 'auto' -> spec delivery"."""
    forced = config.nvhook.runtime_mode
    why = f"[nvhook] runtime-mode = {forced!r}" if forced in (LEGACY, SPEC) else (
        f"nvidia-container-runtime.mode = {config.runtime.mode!r}")
    return f"{why}: {chosen} delivery"
