"""The arguments of `nvhook cdi hook apply`: every input the spec's one hook needs, written by
`nvhook cdi generate` and read back by the hook. Pure.

A generated spec is self-contained: the hook reads no config file, loads no NVML and
discovers nothing. What it needs is in its arguments (`--flag=value`, repeatable flags in
order):

    --driver-root=DIR          the driver root the spec was made from (messages)
    --proc=DIR                 the host's /proc/driver/nvidia (its params, version, registry
                               are copied into the procfs view); absent: no procfs view
    --sim-procfs               the simulated driver: a tmpfs on the container's /proc/driver
    --link=TEXT::PATH          a symlink PATH -> TEXT (NVIDIA's `--link` form)
    --folder=DIR               a directory of the driver's libraries (ldconfig's, in order)
    --lib=KEY::PATH, --lib32=KEY::PATH   an ld.so.cache entry (64-, 32-bit)
    --driver-version=V         for the CUDA forward-compat check against the image's libs
    --cuda-compat-mode=ldconfig|disabled
    --ldcache=write|ldconfig, --ldconfig=PATH, --ldconfig-required   how the cache is made
    --app-profile              graphics: the application profile of the granted GPUs
    --device=KEY=HOST:MAJ:MIN[,HOST:MAJ:MIN...]   the nodes of device KEY (the GPU's node
                               first); KEY is its index (`0`, MIG `0:1`)
    --device-proc=KEY=PATH     the GPU's /proc/driver/nvidia/gpus/<bus-id> dir (under --proc)
    --device-file=KEY=PATH     a MIG device's access file (under --proc)
    --device-link=KEY=TEXT::PATH   a link of the device (udev's DRM by-path link)
    --memory-limits            NVML's CUDA memory limits from the container's
                               NVIDIA_GPU_MEMORY_REQUEST(S)/LIMIT(S) (`[nvhook] cuda-memory-limits`)
    --device-uuid=KEY=UUID     a full GPU's UUID (with --memory-limits; NVML has no MIG limits)

The devices granted to a container are those the CDI resolution applied: each device's edits
set `NVHOOK_CDI_DEVICE_<KEY>=<KEY>` in the container's environment (`grant_env`); the hook
keeps those whose every node config.json allows (`nvhook.cdi.spec_hook`).
"""

from __future__ import annotations

from nvhook.errors import CdiError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterator

GRANT_PREFIX = "NVHOOK_CDI_DEVICE_"
MAX_ARGS = 65536
MAX_VALUE = 4096
_FLAGS = frozenset(("sim-procfs", "app-profile", "ldconfig-required", "memory-limits"))
_VALUES = frozenset(("driver-root", "proc", "link", "folder", "lib", "lib32", "driver-version",
                     "cuda-compat-mode", "ldcache", "ldconfig", "device", "device-proc",
                     "device-file", "device-link", "device-uuid"))
_KEY_CHARS = frozenset("0123456789:abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_.-")


class DeviceEntry:
    """What one device brings beyond the runtime's share: its nodes (to check), proc dirs and
    files (the procfs view), links."""

    __slots__ = ("files", "links", "nodes", "proc_dirs", "uuid")

    def __init__(self, nodes: tuple[tuple[str, int, int], ...]) -> None:
        self.nodes = nodes
        self.uuid = ""  # a full GPU's, for the memory limits
        self.proc_dirs: tuple[str, ...] = ()
        self.files: tuple[str, ...] = ()
        self.links: tuple[tuple[str, str], ...] = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceEntry) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None  # type: ignore[assignment]


class HookInputs:
    """The parsed arguments (see the module docstring)."""

    __slots__ = ("app_profile", "compat_mode", "devices", "driver_root", "driver_version",
                 "folders", "ldcache", "ldcache_mode", "ldconfig", "ldconfig_required",
                 "links", "memory_limits", "proc_dir", "sim_procfs")

    def __init__(self) -> None:
        self.driver_root = "/"
        self.proc_dir = ""
        self.sim_procfs = False
        self.links: tuple[tuple[str, str], ...] = ()  # (text, path)
        self.folders: tuple[str, ...] = ()
        self.ldcache: tuple[tuple[str, str, bool], ...] = ()  # (key, path, 32-bit)
        self.driver_version = ""
        self.compat_mode = "disabled"
        self.ldcache_mode = "write"
        self.ldconfig = "@/sbin/ldconfig"
        self.ldconfig_required = False
        self.app_profile = False
        self.memory_limits = False
        self.devices: dict[str, DeviceEntry] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HookInputs) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None  # type: ignore[assignment]


def grant_env(key: str) -> str:
    """The container env entry a device's edits set: `NVHOOK_CDI_DEVICE_0_1=0:1`."""
    return f"{GRANT_PREFIX}{key.replace(':', '_').replace('-', '_').replace('.', '_')}={key}"


def render(inputs: HookInputs) -> list[str]:
    """The arguments that `parse` reads back as `inputs`."""
    args = [f"--driver-root={inputs.driver_root}"]
    args += [f"--proc={inputs.proc_dir}"] if inputs.proc_dir else []
    args += ["--sim-procfs"] if inputs.sim_procfs else []
    args += [f"--link={text}::{path}" for text, path in inputs.links]
    args += [f"--folder={d}" for d in inputs.folders]
    args += [f"--lib{'32' if is32 else ''}={key}::{path}" for key, path, is32 in inputs.ldcache]
    args += [f"--driver-version={inputs.driver_version}"] if inputs.driver_version else []
    args += [f"--cuda-compat-mode={inputs.compat_mode}", f"--ldcache={inputs.ldcache_mode}"]
    args += [f"--ldconfig={inputs.ldconfig}"] if inputs.ldcache_mode == "ldconfig" else []
    args += ["--ldconfig-required"] if inputs.ldconfig_required else []
    args += ["--app-profile"] if inputs.app_profile else []
    args += ["--memory-limits"] if inputs.memory_limits else []
    for key, dev in inputs.devices.items():
        args.append(f"--device={key}=" + ",".join(f"{p}:{ma}:{mi}" for p, ma, mi in dev.nodes))
        args += [f"--device-proc={key}={p}" for p in dev.proc_dirs]
        args += [f"--device-file={key}={p}" for p in dev.files]
        args += [f"--device-link={key}={text}::{path}" for text, path in dev.links]
        args += [f"--device-uuid={key}={dev.uuid}"] if dev.uuid and inputs.memory_limits else []
    return args


def _pairs(args: list[str]) -> Iterator[tuple[str, str | None]]:
    """(flag name, value or None) in order; `--flag value` and `--flag=value` both."""
    it = iter(args)
    for arg in it:
        if not arg.startswith("--"):
            raise CdiError(f"nvhook cdi hook apply: unexpected argument {arg[:100]!r}")
        name, eq, value = arg[2:].partition("=")
        if name in _FLAGS and not eq:
            yield name, None
        elif name in _VALUES:
            given = value if eq else next(it, None)
            if not given or "\0" in given or len(given) > MAX_VALUE:
                raise CdiError(f"nvhook cdi hook apply: --{name} needs a value")
            yield name, given
        else:
            raise CdiError(f"nvhook cdi hook apply: unknown flag --{name[:60]}")


def parse(args: list[str]) -> HookInputs:
    """The inputs of `args`, or CdiError naming the flag."""
    if len(args) > MAX_ARGS:
        raise CdiError(f"nvhook cdi hook apply: more than {MAX_ARGS} arguments")
    inputs = HookInputs()
    lists: dict[str, list[object]] = {"link": [], "folder": [], "ldcache": []}
    for name, value in _pairs(args):
        if value is None:
            setattr(inputs, name.replace("-", "_"), True)
        elif name.startswith("device"):
            _device_flag(inputs, name, value)
        elif name == "link":
            lists["link"].append(_link(name, value))
        elif name in ("lib", "lib32"):
            key, path = _split(name, value)
            lists["ldcache"].append((key, _absolute(name, path), name == "lib32"))
        elif name == "folder":
            lists["folder"].append(_absolute(name, value))
        else:
            _scalar(inputs, name, value)
    inputs.links = tuple(lists["link"])  # type: ignore[arg-type]
    inputs.folders = tuple(lists["folder"])  # type: ignore[arg-type]
    inputs.ldcache = tuple(lists["ldcache"])  # type: ignore[arg-type]
    _check_proc_paths(inputs)
    return inputs


def _check_proc_paths(inputs: HookInputs) -> None:
    """Every proc dir and file of a device lies under --proc (they are bound from there)."""
    top = inputs.proc_dir.rstrip("/") + "/"
    for key, dev in inputs.devices.items():
        for path in (*dev.proc_dirs, *dev.files):
            parts = path.split("/")
            if not inputs.proc_dir or not path.startswith(top) or ".." in parts:
                raise CdiError(f"nvhook cdi hook apply: device {key}: {path[:100]} is not "
                                 f"under --proc={inputs.proc_dir or '(none)'}")


def _scalar(inputs: HookInputs, name: str, value: str) -> None:
    choices = {"cuda-compat-mode": ("ldconfig", "disabled"), "ldcache": ("write", "ldconfig")}
    if name in choices and value not in choices[name]:
        raise CdiError(f"nvhook cdi hook apply: --{name}={value[:40]} (one of "
                         f"{', '.join(choices[name])})")
    if name in ("driver-root", "proc"):
        value = _absolute(name, value)
    attr = {"proc": "proc_dir", "ldcache": "ldcache_mode", "cuda-compat-mode": "compat_mode"}
    setattr(inputs, attr.get(name, name.replace("-", "_")), value)


def _device_flag(inputs: HookInputs, name: str, value: str) -> None:
    key, eq, rest = value.partition("=")
    if not eq or not key or len(key) > 64 or not set(key) <= _KEY_CHARS:
        raise CdiError(f"nvhook cdi hook apply: --{name}={value[:60]}: expected KEY=...")
    if name == "device":
        if key in inputs.devices:
            raise CdiError(f"nvhook cdi hook apply: --device={key} given twice")
        inputs.devices[key] = DeviceEntry(tuple(_node(n) for n in rest.split(",")))
        return
    entry = inputs.devices.get(key)
    if entry is None:
        raise CdiError(f"nvhook cdi hook apply: --{name}={key}: no --device={key} before it")
    if name == "device-uuid":
        if not rest or len(rest) > 96 or not set(rest) <= _KEY_CHARS:
            raise CdiError(f"nvhook cdi hook apply: --device-uuid={key}={rest[:60]!r}: not a "
                           "GPU UUID")
        entry.uuid = rest
    elif name == "device-link":
        entry.links += (_link(name, rest),)
    elif name == "device-proc":
        entry.proc_dirs += (_absolute(name, rest),)
    else:
        entry.files += (_absolute(name, rest),)


def _node(text: str) -> tuple[str, int, int]:
    rest, _, minor = text.rpartition(":")
    path, _, major = rest.rpartition(":")
    if not (major.isdigit() and minor.isdigit() and len(major) + len(minor) <= 20):
        raise CdiError(f"nvhook cdi hook apply: --device node {text[:100]!r}: expected "
                         "HOSTPATH:MAJOR:MINOR")
    return _absolute("device", path), int(major), int(minor)


def _split(name: str, value: str) -> tuple[str, str]:
    left, sep, right = value.partition("::")
    if not sep or not left or not right:
        raise CdiError(f"nvhook cdi hook apply: --{name}={value[:100]}: expected A::B")
    return left, right


def _link(name: str, value: str) -> tuple[str, str]:
    text, path = _split(name, value)
    return text, _absolute(name, path)


def _absolute(name: str, path: str) -> str:
    if not path.startswith("/") or "\0" in path:
        raise CdiError(f"nvhook cdi hook apply: --{name}: {path[:100]!r} is not an absolute "
                         "path")
    return path
