"""Build the CDI spec of this host from the engine's inventory and plans, and write it
atomically. Effects: discovery (the inventory cache, else NVML), reading the driver root's
layout, writing the spec file.
"""

from __future__ import annotations

import json
import os
from typing import Any

from nvhook.cdi import spec as S
from nvhook.errors import NvhookError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.config.model import HookConfig
    from nvmount.discover.inventory import DriverInventory

DEFAULT_HOOK = "/usr/bin/nvhook"
_MAJORS = ("nvidia-frontend", "nvidia-uvm", "nvidia-caps", "nvidia-caps-imex-channels")


class _Layout:
    """What `nvmount.engine.make_plan` reads of a container: its layout."""

    def __init__(self, layout: object) -> None:
        self.layout = layout


def host_spec(config: HookConfig, *, hook_path: str = DEFAULT_HOOK,
              strategy: str = "index") -> dict[str, Any]:
    """The spec for every GPU and MIG device of this host (names by `strategy`)."""
    from nvhook.engine import engine_options
    from nvmount.discover.devices import read_char_majors
    from nvmount.engine import discover_cached
    from nvmount.faults import Faults

    options = engine_options(config)
    inventory, _ = discover_cached(options, Faults())
    plan = _planner(inventory, _Layout(host_layout(inventory)), config, options)
    devices = [S.Device(_names(str(g.index), g.uuid, "gpu", strategy), plan((str(g.index),)))
               for g in inventory.gpus]
    devices += [S.Device(_names(f"{g.index}:{m.index}", m.uuid, "mig", strategy),
                         plan((f"{g.index}:{m.index}",)))
                for g in inventory.gpus for m in g.mig_devices]
    families = dict.fromkeys(f for f, _ in inventory.gated_nodes)  # NVIDIA_GDS=enabled ...
    devices += [S.Device((family,), plan((), (family,))) for family in families]
    spec = S.build_spec(plan(()), devices, hook_path=hook_path, stamp="")
    majors = read_char_majors(options.proc_root)
    shown = {n: majors[n] for n in _MAJORS if n in majors}
    return S.with_stamp(spec, S.stamp(inventory.driver_version, shown, S.named_paths(spec)))


def host_layout(inventory: DriverInventory) -> object:
    """The driver root's own layout: in a CDI container, files land where they are on the
    host (as in NVIDIA's specs), whatever the image's layout."""
    import posixpath

    from nvmount.container.types import ContainerLayout

    def where(files: tuple[object, ...], default: str) -> str:
        paths = [getattr(f, "container_path", "") for f in files]
        return posixpath.dirname(paths[0]) if paths else default

    return ContainerLayout(bins_dir=where(inventory.binaries, "/usr/bin"),
                           libs_dir=where(inventory.libraries, "/usr/lib64"),
                           libs32_dir=where(inventory.libraries32, "/usr/lib"))


def _planner(inventory: DriverInventory, where: _Layout, config: HookConfig,
             options: Any) -> Any:
    from nvmount.engine import make_plan, select_and_check
    from nvmount.engine_types import EngineRequest

    def plan(devices: tuple[str, ...], features: tuple[str, ...] = ()) -> Any:
        request = EngineRequest(devices=devices, features=features,
                                capabilities=config.supported_driver_capabilities)
        selection = select_and_check(inventory, request)
        return make_plan(inventory, selection, request, where, options)  # type: ignore[arg-type]

    return plan


def _names(index: str, uuid: str, kind: str, strategy: str) -> tuple[str, ...]:
    if strategy == "uuid":
        return (uuid,)
    if strategy == "type-index":
        return (f"{kind}{index}",)
    return (index, uuid)


def render(spec: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(spec, indent=2) + "\n"
    from nvhook.cdi.yamlish import dump

    return "---\n# nvhook cdi generate: check with `nvhook cdi check`\n" + dump(spec)


def format_of(path: str | None, fmt: str | None) -> str:
    if fmt:
        return fmt
    return "json" if path and path.endswith(".json") else "yaml"


def write_atomically(path: str, text: str) -> None:
    """Write `text` to `path` (0644): a new file beside it, fsync, rename over; the
    directories on the way trusted (`nvmount.fs.trusted`; missing ones made 0755)."""
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import write_atomic

    try:
        write_atomic(os.path.abspath(path), text.encode("utf-8"), "write CDI spec",
                     mode=0o644, parents=True)
    except TrustError as err:
        raise NvhookError(str(err)) from err
    except OSError as err:
        raise NvhookError(f"write CDI spec {path}: {err.strerror} (check the directory, or "
                          "use --output)") from err
