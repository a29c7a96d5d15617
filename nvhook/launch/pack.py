"""The GPU create's and the GPU prestart's modules in one file: fewer imports at every GPU
container start (issue 32).

A GPU create (the runtime wrapper) or a GPU prestart (the hook launcher, after its screen)
imports about 80 of nvhook's and nvmount's modules; each costs the path finder's
look-ups, a stat of its source, an open and read of its byte-code cache. `nvhook install`
writes `create.pack` into the nvhook package directory: one marshal file holding, per module of
`PACKED` (`CREATE_MODULES` and `HOOK_MODULES`), its source's size and mtime and its byte code
(compiled by the launchers' interpreter). The runtime wrapper and the hook launcher put a
finder for it first on `sys.meta_path` (`use_pack`);
the finder serves a module from the pack only while its source's size and mtime are those
recorded, else the normal import runs: a pack that is stale, missing, foreign (another
interpreter's byte code) or not the package owner's changes nothing but the time.

The pack is as trusted as the sources beside it: the same directory (checked by `nvhook
install`'s trusted-path walk), owned by the directory's owner, writable by no one else.
`CREATE_MODULES` is the one list of what a warm GPU create imports, `HOOK_MODULES` of what a
warm GPU prestart imports; tests check them against a real create's and a real prestart's
`sys.modules` (tests/unit/test_pack.py, tests/e2e/test_hot_path.py).

Run as a script (`python3 -IS pack.py DIRECTORY`) it writes DIRECTORY/nvhook/create.pack
(the name predates the hook's list) with that interpreter: `nvhook install` runs it with
`--python`'s interpreter.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from types import ModuleType

PACK_NAME = "create.pack"  # in the nvhook package directory
FORMAT = 1
MAX_BYTES = 8 << 20

# what a GPU create imports when the inventory cache is current (spec delivery, `auto`)
CREATE_MODULES = (
    "nvhook", "nvhook.cdi", "nvhook.cdi.resolve", "nvhook.config", "nvhook.config.basics",
    "nvhook.config.host", "nvhook.config.model", "nvhook.config.toml_read",
    "nvhook.config.toml_subset", "nvhook.errors", "nvhook.hook", "nvhook.hook.device_lists",
    "nvhook.hook.mount", "nvhook.hook.oci", "nvhook.hook.request", "nvhook.hook.request_env",
    "nvhook.hook.semver", "nvhook.hook.spec_kinds", "nvhook.launch", "nvhook.launch.argv",
    "nvhook.launch.command_line", "nvhook.launch.lowlevel", "nvhook.launch.runtime_flags",
    "nvhook.logrus", "nvhook.runtime",
    "nvhook.runtime.bundle", "nvhook.runtime.create", "nvhook.runtime.edit",
    "nvhook.launch.runtime_log", "nvhook.runtime.modes", "nvhook.runtime.rootfs",
    "nvhook.launch.settings", "nvhook.runtime.spec_delivery", "nvhook.runtime.spec_entries",
    "nvhook.runtime.wrapper",
    "nvmount", "nvmount._libc", "nvmount.api", "nvmount.apply", "nvmount.apply.journal",
    "nvmount.bounds", "nvmount.cachefile", "nvmount.capabilities", "nvmount.choices",
    "nvmount.container", "nvmount.container.dryrun", "nvmount.container.layout",
    "nvmount.discover", "nvmount.discover.cache", "nvmount.discover.driver_root",
    "nvmount.discover.inventory", "nvmount.discover.ldcache", "nvmount.discover.options",
    "nvmount.discover.presence", "nvmount.discover.procfiles", "nvmount.effects",
    "nvmount.errors", "nvmount.faults", "nvmount.fds", "nvmount.fs", "nvmount.fs.owner",
    "nvmount.fs.paths",
    "nvmount.fs.procfs", "nvmount.fs.root", "nvmount.fs.rootfs", "nvmount.fs.trusted",
    "nvmount.fs.walk", "nvmount.jsonio", "nvmount.ldcache", "nvmount.ldcache.image",
    "nvmount.ldcache.write", "nvmount.log", "nvmount.pipeline", "nvmount.plan",
    "nvmount.plan.app_profile", "nvmount.plan.devices", "nvmount.plan.graphics",
    "nvmount.plan.mounts",
    "nvmount.plan.procfs", "nvmount.plan.selection", "nvmount.plan.split",
    "nvmount.plan.types", "nvmount.privileges", "nvmount.records", "nvmount.requests",
    "nvmount.timing",
)
# what a GPU prestart of the legacy hook imports when the inventory cache is current
HOOK_MODULES = (
    "nvhook", "nvhook.cli", "nvhook.commands", "nvhook.config", "nvhook.config.basics",
    "nvhook.config.host", "nvhook.config.load", "nvhook.config.model", "nvhook.errors",
    "nvhook.flags", "nvhook.hook", "nvhook.hook.device_lists", "nvhook.hook.locate",
    "nvhook.hook.mount", "nvhook.hook.oci", "nvhook.hook.prestart", "nvhook.hook.request",
    "nvhook.hook.request_env", "nvhook.hook.semver", "nvhook.hook.spec_mode", "nvhook.launch",
    "nvhook.launch.isolation", "nvhook.launch.screen", "nvhook.logs", "nvmount",
    "nvmount._compat", "nvmount._libc", "nvmount.api", "nvmount.apply",
    "nvmount.apply.host_nodes", "nvmount.apply.journal", "nvmount.apply.mounts",
    "nvmount.apply.namespace", "nvmount.apply.simproc", "nvmount.apply.steps",
    "nvmount.bounds", "nvmount.cachefile", "nvmount.capabilities", "nvmount.cgroup",
    "nvmount.cgroup.allow", "nvmount.cgroup.common", "nvmount.cgroup.v1", "nvmount.choices",
    "nvmount.container", "nvmount.container.cgroup", "nvmount.container.layout",
    "nvmount.container.open", "nvmount.discover", "nvmount.discover.cache",
    "nvmount.discover.driver_root", "nvmount.discover.inventory", "nvmount.discover.ldcache",
    "nvmount.discover.options", "nvmount.discover.procfiles", "nvmount.effects",
    "nvmount.errors", "nvmount.faults", "nvmount.fds", "nvmount.fs", "nvmount.fs.owner",
    "nvmount.fs.paths", "nvmount.fs.procfs", "nvmount.fs.root", "nvmount.fs.rootfs",
    "nvmount.fs.trusted", "nvmount.fs.walk", "nvmount.jsonio", "nvmount.ldcache",
    "nvmount.ldcache.image", "nvmount.ldcache.setting", "nvmount.ldcache.write", "nvmount.log",
    "nvmount.pipeline", "nvmount.plan", "nvmount.plan.app_profile", "nvmount.plan.devices",
    "nvmount.plan.graphics", "nvmount.plan.mounts", "nvmount.plan.procfs",
    "nvmount.plan.selection", "nvmount.plan.split", "nvmount.plan.types", "nvmount.privileges",
    "nvmount.records", "nvmount.requests", "nvmount.timing",
)
# one pack for both paths: a module is served only to the process that imports it
PACKED = tuple(sorted(set(CREATE_MODULES) | set(HOOK_MODULES)))


def _magic() -> bytes:
    return sys.modules["_frozen_importlib_external"].MAGIC_NUMBER  # type: ignore[no-any-return]


def _source(base: str, name: str) -> tuple[str, bool]:
    """(source path, is a package) of module `name` under `base`."""
    path = os.path.join(base, *name.split("."))
    if os.path.isdir(path):
        return os.path.join(path, "__init__.py"), True
    return path + ".py", False


def build(base: str, modules: tuple[str, ...] = PACKED) -> bytes:
    """The pack of `modules` found under `base` (the directory holding nvhook and nvmount)."""
    table: dict[str, tuple[bool, str, int, int, bytes]] = {}
    for name in modules:
        path, package = _source(base, name)
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            code = compile(f.read(), path, "exec", dont_inherit=True)
        table[name] = (package, path, st.st_size, st.st_mtime_ns, marshal.dumps(code))
    return marshal.dumps((FORMAT, _magic(), table))


def write(base: str) -> str:
    """Write `base`/nvhook/create.pack atomically (0644); its path."""
    path = os.path.join(base, "nvhook", PACK_NAME)
    data = build(base)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


class PackFinder:
    """A meta-path finder and loader for the modules of a pack whose sources are unchanged."""

    def __init__(self, table: dict[str, tuple[bool, str, int, int, bytes]]) -> None:
        self.table = table

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        entry = self.table.get(name)
        if entry is None:
            return None
        package, source, size, mtime, _ = entry
        try:
            st = os.stat(source)
        except OSError:
            return None
        if st.st_size != size or st.st_mtime_ns != mtime:
            return None  # edited since install: the normal import reads the source
        spec = sys.modules["_frozen_importlib"].ModuleSpec(name, self, origin=source,
                                                           is_package=package)
        if package:
            spec.submodule_search_locations = [os.path.dirname(source)]
        return spec  # no has_location: __cached__ would cost a cache_from_source per module

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        entry = self.table[module.__name__]
        module.__file__ = entry[1]
        exec(marshal.loads(entry[4]), module.__dict__)


def use_pack(base: str) -> bool:
    """Put the pack of `base` first on sys.meta_path if it is there, ours and this
    interpreter's; whether it was."""
    path = os.path.join(base, "nvhook", PACK_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        home = os.stat(os.path.dirname(path))  # the package directory, checked at install
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != home.st_uid or home.st_mode & 0o022
                or st.st_mode & 0o022 or st.st_size > MAX_BYTES):
            return False
        data = os.read(fd, st.st_size + 1)
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        fmt, magic, table = marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return False
    if fmt != FORMAT or magic != _magic() or not isinstance(table, dict):
        return False
    sys.meta_path.insert(0, PackFinder(table))  # type: ignore[arg-type]
    return True


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python3 -IS pack.py DIRECTORY\n")
        raise SystemExit(2)
    try:
        print(write(sys.argv[1]))
    except (OSError, SyntaxError, ValueError) as err:
        sys.stderr.write(f"pack: write {sys.argv[1]}/nvhook/{PACK_NAME}: {err}\n")
        raise SystemExit(1) from None
