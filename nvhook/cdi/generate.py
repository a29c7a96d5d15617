"""Build the CDI spec of this host from the engine's inventory and legacy plans, and write it
atomically. Effects: discovery (the inventory cache, else NVML), reading the driver root's
layout and node modes, writing the spec file.

`generate_spec(config, GenerateOptions(...))` is the function other front ends call (the
`nvidia-ctk cdi generate` drop-in): device-name strategy, vendor/class, cdiVersion, hook path,
hook on/off, device ids, the `all` device.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from nvhook.cdi import spec as S
from nvhook.errors import CdiError, NvhookError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.cdi.spec_hook_args import HookInputs
    from nvhook.config.model import HookConfig
    from nvmount.api import ContainerLayout, DriverInventory, EngineOptions

DEFAULT_HOOK = "/usr/bin/nvhook"  # the package's launcher (hookpath.PACKAGE_LAUNCHER)
_MAJORS = ("nvidia-frontend", "nvidia-uvm", "nvidia-caps", "nvidia-caps-imex-channels")


@dataclass(frozen=True)
class GenerateOptions:
    """How to write the spec. `hook_path` "" = the running installation's launcher (checked);
    `hooks` False = no hook (links, ld.so.cache and the procfs view left undone);
    `device_ids` indexes (`0`, `0:1`) or UUIDs, or `all`."""

    strategy: str = "index"  # index (`0`, `0:1` and the UUIDs) | uuid | type-index
    vendor: str = "nvidia.com"
    device_class: str = "gpu"
    cdi_version: str = ""  # "" = the lowest that expresses the spec
    hook_path: str = ""
    hooks: bool = True
    device_ids: tuple[str, ...] = ("all",)
    all_device: bool = True

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.device_class}"


class _Layout:
    """What `nvmount.pipeline.make_plan` reads of a container: its layout."""

    def __init__(self, layout: object) -> None:
        self.layout = layout


def generate_spec(config: HookConfig, options: GenerateOptions | None = None) -> dict[str, Any]:
    """The spec for the GPUs and MIG devices of this host (see GenerateOptions)."""
    from nvhook.cdi.stamp import driver_state, make_stamp
    from nvhook.hook.mount import engine_options
    from nvmount.api import Faults, discover_cached, read_char_majors

    options = options or GenerateOptions()
    if options.strategy not in S.STRATEGIES:
        raise CdiError(f"cdi generate: device name strategy {options.strategy!r} (one of "
                       f"{', '.join(S.STRATEGIES)})")
    hook_path = _hook_path(options) if options.hooks else None
    eopts = engine_options(config)
    inventory, _ = discover_cached(eopts, Faults())
    plan = _planner(inventory, _Layout(host_layout(inventory)), config, eopts)
    devices = _devices(inventory, plan, options)
    common = plan(())
    inputs = S.hook_inputs(_base_inputs(inventory, eopts, config), common, devices)
    spec = S.build_spec(common, devices, hook_path=hook_path, inputs=inputs,
                        modes=_node_modes(common, devices), kind=options.kind,
                        all_device=options.all_device, version=options.cdi_version)
    majors = read_char_majors(eopts.proc_root)
    shown = {n: majors[n] for n in _MAJORS if n in majors}
    record = {"strategy": options.strategy, "kind": options.kind,
              "version": options.cdi_version, "ids": ",".join(options.device_ids),
              "alldev": "1" if options.all_device else "0", "hooks": "1" if options.hooks else "0"}
    if config.path:
        record["config"] = config.path
    stamp = make_stamp(inventory.driver_version, shown, S.named_paths(spec),
                       driver_state(eopts.proc_root), record)
    return S.with_stamp(spec, stamp)


def host_spec(config: HookConfig, *, hook_path: str = DEFAULT_HOOK,
              strategy: str = "index") -> dict[str, Any]:
    """The spec with the default options but `hook_path` and `strategy`."""
    return generate_spec(config, GenerateOptions(strategy=strategy, hook_path=hook_path))


def _hook_path(options: GenerateOptions) -> str:
    from nvhook.cdi import spec_hook_path as hookpath

    if not options.hook_path:
        return hookpath.default_hook_path()
    warning = hookpath.check_hook_path(options.hook_path)
    if warning:
        import sys

        sys.stderr.write(warning + "\n")
    return options.hook_path


def _devices(inventory: DriverInventory, plan: Any, options: GenerateOptions) -> list[S.Device]:
    ids = set(options.device_ids)
    every = "all" in ids

    def wanted(*names: str) -> bool:
        return every or bool(ids.intersection(names))

    devices = [S.Device(_names(str(g.index), g.uuid, "gpu", options.strategy),
                        plan((str(g.index),)), str(g.index))
               for g in inventory.gpus if wanted(str(g.index), g.uuid)]
    devices += [S.Device(_names(f"{g.index}:{m.index}", m.uuid, "mig", options.strategy),
                         plan((f"{g.index}:{m.index}",)), f"{g.index}:{m.index}")
                for g in inventory.gpus for m in g.mig_devices
                if wanted(f"{g.index}:{m.index}", m.uuid)]
    families = dict.fromkeys(f for f, _ in inventory.gated_nodes)  # NVIDIA_GDS=enabled ...
    devices += [S.Device((family,), plan((), (family,))) for family in families if every]
    known = {n for d in devices for n in (*d.names, d.key)} | {"all"}
    missing = sorted(ids - known - {g.uuid for g in inventory.gpus})
    if missing:
        raise CdiError(f"cdi generate: --device-id {missing[0][:80]}: no such GPU or MIG "
                       "device (see nvhook list -g)")
    return devices


def _base_inputs(inventory: DriverInventory, eopts: EngineOptions,
                 config: HookConfig) -> HookInputs:
    """The hook's host settings (the rest comes from the plans)."""
    from nvhook.cdi.spec_hook_args import HookInputs
    from nvmount.api import CompatMode
    from nvmount.api import DriverCapability as Cap

    inputs = HookInputs()
    inputs.driver_root = inventory.root
    inputs.proc_dir = inventory.proc_driver_dir.rstrip("/")
    inputs.sim_procfs = eopts.sim_procfs
    inputs.driver_version = inventory.driver_version
    compute = config.supported_driver_capabilities & (Cap.COMPUTE | Cap.VIDEO)
    inputs.compat_mode = "disabled" if eopts.compat_mode is CompatMode.DISABLED or \
        not compute else "ldconfig"
    inputs.ldcache_mode = eopts.ldcache_mode
    inputs.ldconfig = eopts.ldconfig
    inputs.ldconfig_required = eopts.ldconfig_required
    inputs.memory_limits = config.nvhook.cuda_memory_limits
    return inputs


def _node_modes(common: Any, devices: list[S.Device]) -> dict[str, tuple[int, int, int]]:
    modes = {}
    for plan in [common, *(d.plan for d in devices)]:
        for node in S.nodes(plan):
            try:
                st = os.stat(node.source)
            except OSError:
                continue
            modes[node.source] = (st.st_mode, st.st_uid, st.st_gid)
    return modes


def spec_layout(root: str) -> ContainerLayout:
    """The layout of an image like the driver root (libnvc-spec §2.2 on its facts): Debian's
    multiarch directories when the root is of the Debian family (/etc/debian_version) or
    keeps its libraries there, else /usr/lib64; binaries in /usr/bin. A spec's container
    paths are those the legacy hook gives such an image."""
    from nvmount.api import DEBIAN_DIRS, choose_layout

    machine = os.uname().machine
    multiarch = DEBIAN_DIRS.get(machine, ("", ""))[0]

    def there(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    debian = os.path.exists(there("/etc/debian_version")) or (
        bool(multiarch) and os.path.isdir(there(multiarch)))
    lib, lib64 = there("/usr/lib"), there("/usr/lib64")
    same = os.path.isdir(lib) and os.path.isdir(lib64) and os.path.samefile(lib, lib64)
    return choose_layout(machine, debian=debian, has_usr_lib32=os.path.isdir(there("/usr/lib32")),
                         has_usr_lib=os.path.isdir(lib), usr_lib_is_lib64=same)


def host_layout(inventory: DriverInventory) -> object:
    """The layout a spec's container paths follow (`spec_layout` of the driver root)."""
    return spec_layout(inventory.root)


def _planner(inventory: DriverInventory, where: _Layout, config: HookConfig,
             options: Any) -> Any:
    from nvmount.api import EngineRequest, make_plan, select_and_check

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
    import yaml

    class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        def ignore_aliases(self, data: Any) -> bool:  # devices share their edits
            return True

    text = yaml.dump(spec, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=4096)
    return "---\n# nvhook cdi generate: check with `nvhook cdi check`\n" + text


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
