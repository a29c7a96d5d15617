"""The create pack (nvhook.launch.pack): its module list is what a real GPU create imports, and
a pack that is stale, foreign or not the owner's changes nothing but the time."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvhook.admin.install import import_paths
from nvhook.dev.demo.bundle import CUDA_IMAGE_ENV, container_spec, write_bundle
from nvhook.dev.demo.driver import launcher_python
from nvhook.dev.sim import SimRoot
from nvhook.launch import pack
from tests.fixtures.containers import RootfsCache

REPO = Path(__file__).resolve().parents[2]
PY = launcher_python()  # the interpreter the tests' launchers run ($NVHOOK_LAUNCHER_PYTHON)
# a wrapper create in the launcher's interpreter, execve made a no-op; prints its modules
PROBE = f"""\
import sys, os
sys.path[:0] = {import_paths()!r}  # the launcher's (python-prctl for the NVML worker)
from nvhook.runtime.wrapper import main
os.execve = lambda *a: None
main(["nvidia-container-runtime", "create", "--bundle", sys.argv[2], "probe"],
     recorded=sys.argv[1])
print(" ".join(m for m in sys.modules if m.startswith(("nvhook", "nvmount"))))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="spec delivery writes root-owned entries")
def test_create_modules_are_a_warm_gpu_create(tmp_path: Path, sim_root: SimRoot,
                                              rootfs_cache: RootfsCache) -> None:
    cache = tmp_path / "cache"
    text = Path(sim_root.config_path).read_text().replace("sim-procfs = true",
                                                          "sim-procfs = false")
    text = text.replace("[nvhook]\n", f'[nvhook]\ncache-dir = "{cache}"\n'
                                      'runtime-mode = "auto"\n')
    config = tmp_path / "config.toml"
    config.write_text('nvidia-container-runtime.runtimes = ["/bin/true"]\n' + text)
    spec = container_spec(["/bin/true"], list(CUDA_IMAGE_ENV))
    seen = []
    for i in range(2):  # the first fills the inventory cache
        bundle = write_bundle(tmp_path / f"b{i}", rootfs_cache.get(), spec)
        proc = subprocess.run([PY, "-IS", "-c", PROBE, str(config), str(bundle)],
                              capture_output=True, text=True, check=True)
        seen = proc.stdout.split()
    assert "nvmount.discover.driver" not in seen
    wanted = set(seen) - {"nvhook.launch.pack"}  # imported before the pack is used
    assert wanted == set(pack.CREATE_MODULES), (
        f"CREATE_MODULES: add {sorted(wanted - set(pack.CREATE_MODULES))}, "
        f"drop {sorted(set(pack.CREATE_MODULES) - wanted)}")


def _tree(tmp_path: Path) -> Path:
    """A copy of two small modules as package `nvhook` under tmp_path/base."""
    base = tmp_path / "base"
    (base / "nvhook").mkdir(parents=True)
    (base / "nvhook/__init__.py").write_text("WHERE = 'source'\n")
    (base / "nvhook/leaf.py").write_text("VALUE = 1\n")
    return base


def _run(base: Path, code: str, preload: str = "") -> str:
    """`code` after use_pack(base, preload), pack.py loaded under another name: no nvhook
    module is loaded before the pack's."""
    prog = ("import sys, importlib.util\n"
            f"spec = importlib.util.spec_from_file_location('packmod', {pack.__file__!r})\n"
            "packmod = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(packmod)\n"
            f"ok = packmod.use_pack({str(base)!r}, {preload!r})\n"
            f"sys.path[:0] = [{str(base)!r}]\n" + code)
    return subprocess.run([sys.executable, "-IS", "-c", prog], capture_output=True, text=True,
                          check=True).stdout.strip()


def _write(base: Path, modules: tuple[str, ...],
           preload: dict[str, tuple[str, ...]] | None = None) -> Path:
    path = base / "nvhook" / pack.PACK_NAME
    path.write_bytes(pack.build(str(base), modules, preload or {}))
    path.chmod(0o644)
    return path


def test_pack_serves_current_sources_only(tmp_path: Path) -> None:
    base = _tree(tmp_path)
    _write(base, ("nvhook", "nvhook.leaf"))
    show = ("import nvhook.leaf\nprint(ok, type(nvhook.leaf.__spec__.loader).__name__, "
            "nvhook.leaf.VALUE, nvhook.leaf.__file__)")
    assert _run(base, show) == f"True PackFinder 1 {base}/nvhook/leaf.py"
    leaf = base / "nvhook/leaf.py"
    leaf.write_text("VALUE = 22\n")  # edited after the pack: the source wins
    assert _run(base, show).split()[1:3] == ["SourceFileLoader", "22"]


@pytest.mark.parametrize("damage", ["group-writable", "foreign", "truncated", "magic"])
def test_pack_refused(tmp_path: Path, damage: str) -> None:
    base = _tree(tmp_path)
    path = _write(base, ("nvhook", "nvhook.leaf"))
    if damage == "group-writable":
        path.chmod(0o664)
    elif damage == "foreign":
        os.chown(path, 1000, 1000) if os.geteuid() == 0 else pytest.skip("needs root")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:40])
    else:
        data = path.read_bytes()
        length = int.from_bytes(data[:8], "little")
        fmt, _, orders, index = marshal.loads(data[8:8 + length])
        head = marshal.dumps((fmt, b"\0\0\r\n", orders, index))
        path.write_bytes(len(head).to_bytes(8, "little") + head + data[8 + length:])
    assert _run(base, "import nvhook.leaf\nprint(ok, nvhook.leaf.VALUE)") == "False 1"


def test_pack_script_writes_with_the_given_interpreter(tmp_path: Path) -> None:
    base = _tree(tmp_path)
    out = subprocess.run([PY, "-IS", pack.__file__, str(base)], capture_output=True, text=True,
                         check=False)
    # the script packs PACKED: this tree has not got them, so it fails in one line
    assert out.returncode == 1 and not (base / "nvhook" / pack.PACK_NAME).exists()
    assert len(out.stderr.splitlines()) == 1 and "No such file" in out.stderr


def _chain(tmp_path: Path) -> Path:
    """nvhook.a imports nvhook.b at module level, nvhook.b imports nvhook.c in a function."""
    base = _tree(tmp_path)
    (base / "nvhook/a.py").write_text("import sys\nfrom nvhook.b import B\n"
                                      "SEEN = 'nvhook.b' in sys.modules\nA = B + 1\n")
    (base / "nvhook/b.py").write_text("TYPE_CHECKING = False\nif TYPE_CHECKING:\n"
                                      "    import nvhook.a\nB = 1\n"
                                      "def later():\n    import nvhook.c\n")
    (base / "nvhook/c.py").write_text("C = 3\n")
    return base


def test_preload_order_puts_what_a_module_imports_first(tmp_path: Path) -> None:
    base = _chain(tmp_path)
    mods = ("nvhook", "nvhook.a", "nvhook.b", "nvhook.c", "nvhook.leaf")
    data = _write(base, mods, {"hook": mods}).read_bytes()
    _, _, orders, _ = marshal.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    order = orders["hook"]
    assert sorted(order) == sorted(mods)
    assert order.index("nvhook") < order.index("nvhook.b") < order.index("nvhook.a")


def test_preload_loads_the_list_at_once_from_the_pack(tmp_path: Path) -> None:
    base = _chain(tmp_path)
    mods = ("nvhook", "nvhook.a", "nvhook.b", "nvhook.leaf")
    _write(base, mods, {"hook": mods})
    show = ("print(ok, sorted(m for m in sys.modules if m.startswith('nvhook.')), "
            "type(sys.modules['nvhook.a'].__spec__.loader).__name__, "
            "sys.modules['nvhook'].a.A, sys.modules['nvhook.a'].__file__.endswith('a.py'))")
    out = _run(base, show, "hook")
    assert out == "True ['nvhook.a', 'nvhook.b', 'nvhook.leaf'] PackFinder 2 True"


def test_preload_stops_at_a_stale_module_and_the_rest_imports_normally(tmp_path: Path) -> None:
    base = _chain(tmp_path)
    mods = ("nvhook", "nvhook.a", "nvhook.b", "nvhook.leaf")
    _write(base, mods, {"hook": mods})
    (base / "nvhook/b.py").write_text("B = 41\n")  # edited after the pack
    show = ("import sys\nbefore = sorted(m for m in sys.modules if m.startswith('nvhook.'))\n"
            "import nvhook.a\nprint(ok, before, nvhook.a.A, "
            "type(nvhook.a.__spec__.loader).__name__)")
    assert _run(base, show, "hook") == "True [] 42 PackFinder"
