"""The GPU create's and the GPU prestart's modules in one file: fewer imports at every GPU
container start (issue 32).

A GPU create (the runtime wrapper) or a GPU prestart (the hook launcher, after its screen)
imports about 80 of nvhook's and nvmount's modules; each costs the path finder's
look-ups, a stat of its source, an open and read of its byte-code cache. `nvhook install`
writes `create.pack` into the nvhook package directory: a small marshalled index (per module
of `PACKED` (`CREATE_MODULES` and `HOOK_MODULES`) its source's size and mtime and where its
byte code lies; per list a preload order) and the byte code of each module (compiled by the
launchers' interpreter). The runtime wrapper and the hook launcher read the index, put a
finder first on `sys.meta_path` (`use_pack`) and preload their list: each module in an order
where its module-level imports of the list come before it (computed from the sources' ASTs at
install: `preload_order`), so each is loaded without the import system's search and finds
its imports in sys.modules (about 1 ms per start; a module's code is read with one pread
when it is loaded). The finder serves a module only while its source's size and mtime are
those recorded, else the normal import runs (a preload stops at the first such module): a
pack that is stale, missing, foreign (another interpreter's byte code) or not the package
owner's changes nothing but the time.

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
FORMAT = 2
MAX_BYTES = 8 << 20

# what a GPU create of a CUDA image (nvhook.dev.demo.bundle.CUDA_IMAGE_ENV: its requirement
# checked) imports when the inventory cache is current (spec delivery, `auto`)
CREATE_MODULES = (
    "nvhook", "nvhook.config", "nvhook.config.basics",
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
    "nvmount.discover.presence", "nvmount.discover.procfiles",
    "nvmount.errors", "nvmount.faults", "nvmount.fds", "nvmount.fs", "nvmount.fs.owner",
    "nvmount.fs.paths",
    "nvmount.fs.procfs", "nvmount.fs.root", "nvmount.fs.rootfs", "nvmount.fs.trusted",
    "nvmount.fs.walk", "nvmount.jsonio", "nvmount.ldcache", "nvmount.ldcache.image",
    "nvmount.ldcache.write", "nvmount.log", "nvmount.pipeline", "nvmount.plan",
    "nvmount.plan.app_profile", "nvmount.plan.devices", "nvmount.plan.graphics",
    "nvmount.plan.mounts",
    "nvmount.plan.procfs", "nvmount.plan.requirements", "nvmount.plan.selection",
    "nvmount.plan.split",
    "nvmount.plan.types", "nvmount.privileges", "nvmount.records", "nvmount.requests",
    "nvmount.timing",
)
# what a GPU prestart of a CUDA image by the legacy hook imports when the inventory cache is
# current
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
    "nvmount.plan.requirements", "nvmount.plan.selection", "nvmount.plan.split",
    "nvmount.plan.types", "nvmount.privileges",
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


def _imported(tree: object) -> set[str]:
    """The modules `tree` (a module's AST) imports when it runs: its module-level imports,
    outside `if TYPE_CHECKING:` blocks and function bodies, with every candidate name
    (`from a import b` may import `a.b`)."""
    import ast

    found: set[str] = set()
    todo = list(tree.body)  # type: ignore[attr-defined]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)  # (nvhook and nvmount use no relative imports)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name)
                                               and node.test.id == "TYPE_CHECKING"):
            todo.extend([*node.body, *node.orelse])
        elif isinstance(node, (ast.Try, ast.With)):
            todo.extend(node.body)
            todo.extend(getattr(node, "orelse", []) + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)
    return found


def preload_order(imports: dict[str, set[str]], modules: tuple[str, ...]) -> tuple[str, ...]:
    """`modules` in an order where every module comes after its parent packages and the
    modules of the list it imports when it runs (`imports`: each module's `_imported`; depth
    first; an import cycle, which the normal import resolves at run time, keeps the first
    order found)."""
    wanted = set(modules)
    needs: dict[str, list[str]] = {}
    for name in modules:
        parents = {name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)}
        needs[name] = sorted((imports[name] | parents) & wanted - {name})
    order: list[str] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(name: str) -> None:
        if state.get(name):
            return
        state[name] = 1
        for dep in needs[name]:
            visit(dep)
        state[name] = 2
        order.append(name)

    for name in sorted(modules):
        visit(name)
    return tuple(order)


def build(base: str, modules: tuple[str, ...] = PACKED,
          preload: dict[str, tuple[str, ...]] | None = None) -> bytes:
    """The pack of `modules` found under `base` (the directory holding nvhook and nvmount):
    an 8-byte length, the marshalled index (format, magic, the preload orders, per module
    its package flag, source path, size, mtime and its code's offset and length), then the
    marshalled code of each module."""
    import ast

    if preload is None:
        preload = {"hook": HOOK_MODULES, "create": CREATE_MODULES}
    blobs: list[bytes] = []
    index: dict[str, tuple[bool, str, int, int, int, int]] = {}
    imports: dict[str, set[str]] = {}
    offset = 0
    for name in modules:
        path, package = _source(base, name)
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            tree = ast.parse(f.read(), path)  # one parse: compiled and read for its imports
        imports[name] = _imported(tree)
        blob = marshal.dumps(compile(tree, path, "exec", dont_inherit=True))
        index[name] = (package, path, st.st_size, st.st_mtime_ns, offset, len(blob))
        blobs.append(blob)
        offset += len(blob)
    orders = {k: preload_order(imports, tuple(m for m in v if m in index))
              for k, v in preload.items()}
    head = marshal.dumps((FORMAT, _magic(), orders, index))
    return b"".join([len(head).to_bytes(8, "little"), head, *blobs])


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
    """A meta-path finder and loader for the modules of a pack whose sources are unchanged;
    it reads a module's code from the pack's fd when the module is loaded."""

    def __init__(self, fd: int, start: int, size: int,
                 index: dict[str, tuple[bool, str, int, int, int, int]]) -> None:
        self.fd, self.start, self.size, self.index = fd, start, size, index

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        entry = self.index.get(name)
        if entry is None:
            return None
        package, source, size, mtime, _, _ = entry
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
        _, source, _, _, offset, length = self.index[module.__name__]
        module.__file__ = source
        if self.start + offset + length > self.size:
            raise ImportError(f"{module.__name__}: the pack is truncated", name=module.__name__)
        data = os.pread(self.fd, length, self.start + offset)
        exec(marshal.loads(data), module.__dict__)

    def preload(self, order: tuple[str, ...]) -> None:
        """Load the modules of `order` now, in that order, without the import system's
        search (each module's imports, loaded before it, are found in sys.modules); the
        first one that is stale or fails ends the preload: what is left imports normally."""
        bootstrap = sys.modules["_frozen_importlib"]
        for name in order:
            if name in sys.modules:
                continue
            spec = self.find_spec(name)
            if spec is None:
                return
            module = bootstrap.module_from_spec(spec)
            sys.modules[name] = module
            spec._initializing = True  # type: ignore[attr-defined]  # as the import system
            try:
                self.exec_module(module)
            except BaseException:
                del sys.modules[name]  # the normal import will run it again, and raise there
                return
            finally:
                spec._initializing = False  # type: ignore[attr-defined]
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)


def use_pack(base: str, preload: str = "") -> bool:
    """Put the pack of `base` first on sys.meta_path if it is there, ours and this
    interpreter's, and load its `preload` list ("hook", "create") at once; whether it was."""
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
            raise OSError("not the package owner's")
        length = int.from_bytes(os.pread(fd, 8, 0), "little")
        head = os.pread(fd, length, 8) if 8 + length <= st.st_size else b""
        fmt, magic, orders, index = marshal.loads(head)
        if fmt != FORMAT or magic != _magic() or not isinstance(index, dict):
            raise ValueError("another format or interpreter")
    except (OSError, EOFError, ValueError, TypeError):
        os.close(fd)
        return False
    finder = PackFinder(fd, 8 + length, st.st_size, index)  # the fd lives as long as we do
    sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
    if preload:
        finder.preload(orders.get(preload, ()))
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
