"""Root-only caches (nvmount.cachefile), the driver inventory cache (nvmount.discover.cache)
and the config document cache (nvhook.config.load): a hit only while nothing changed; a
stale, foreign or tampered cache is a miss, never an error."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvhook.config import load as config_file
from nvhook.dev.sim import SimRoot
from nvmount import cachefile
from nvmount.discover.cache import cached_inventory, decode, encode
from nvmount.discover.driver import discover_driver
from nvmount.discover.inventory import DriverInventory
from tests.fixtures.sim import SimRootFactory

pytestmark = pytest.mark.root


@pytest.fixture
def cache_dir(tmp_path: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("the caches are root's")
    return str(tmp_path / "cache")


def test_store_then_load(cache_dir: str) -> None:
    assert cachefile.store(cache_dir, "x", ("stamp", 1), {"a": (1, 2)})
    assert cachefile.load(cache_dir, "x", ("stamp", 1)) == {"a": (1, 2)}
    assert cachefile.load(cache_dir, "x", ("stamp", 2)) is None  # stale
    assert oct(os.stat(cache_dir).st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("spoil", ["group-writable-dir", "foreign-file", "symlink", "garbage",
                                   "writable-file"])
def test_untrusted_cache_is_a_miss(cache_dir: str, tmp_path: Path, spoil: str) -> None:
    cachefile.store(cache_dir, "x", 1, "value")
    path = Path(cache_dir, "x")
    if spoil == "group-writable-dir":
        os.chmod(cache_dir, 0o770)
    elif spoil == "foreign-file":
        os.chown(path, 1000, 1000)
    elif spoil == "symlink":
        target = tmp_path / "elsewhere"
        path.rename(target)
        path.symlink_to(target)
    elif spoil == "garbage":
        path.write_bytes(b"\x00garbage")
    else:
        os.chmod(path, 0o666)
    assert cachefile.load(cache_dir, "x", 1) is None


def test_inventory_round_trips_through_the_encoding(sim_root: SimRoot) -> None:
    found = discover_driver(sim_root.path, "/etc/ld.so.cache", sim_root.proc_root)
    assert decode(encode(found)) == found


def _cached(sim: SimRoot, cache_dir: str, calls: list[int]) -> tuple[DriverInventory, bool]:
    def run() -> DriverInventory:
        calls.append(1)
        return discover_driver(sim.path, "/etc/ld.so.cache", sim.proc_root)

    return cached_inventory(cache_dir, (sim.path,), sim.proc_root, (), run)


def _touch_version(sim: SimRoot) -> None:
    path = Path(sim.proc_root, "driver/nvidia/version")
    path.write_bytes(path.read_bytes())  # same content, new mtime/ctime: a reloaded module


def _uvm_major(sim: SimRoot) -> None:
    path = Path(sim.proc_root, "devices")
    path.write_text(path.read_text().replace("nvidia-uvm", "nvidia-uvm\n999 other"))


def _new_library(sim: SimRoot) -> None:
    Path(sim.path, "etc/ld.so.cache").touch()


def _gpu_gone(sim: SimRoot) -> None:
    gpus = Path(sim.proc_root, "driver/nvidia/gpus")
    last = sorted(gpus.iterdir())[-1]
    last.rename(gpus.parent / "gone")


@pytest.mark.parametrize("change", [_touch_version, _uvm_major, _new_library, _gpu_gone],
                         ids=["driver-reloaded", "majors", "ld.so.cache", "gpu-removed"])
def test_a_driver_change_is_noticed(sim_root_factory: SimRootFactory, cache_dir: str,
                                    change: Callable[[SimRoot], None]) -> None:
    sim = sim_root_factory(private=True)
    calls: list[int] = []
    first, hit1 = _cached(sim, cache_dir, calls)
    again, hit2 = _cached(sim, cache_dir, calls)
    assert (hit1, hit2, len(calls)) == (False, True, 1) and again == first
    change(sim)
    _, hit3 = _cached(sim, cache_dir, calls)
    assert not hit3 and len(calls) == 2


def test_no_cache_dir_means_no_cache(sim_root: SimRoot) -> None:
    calls: list[int] = []
    assert not _cached(sim_root, "", calls)[1] and not _cached(sim_root, "", calls)[1]
    assert len(calls) == 2


def test_config_document_is_parsed_once_per_change(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("the caches are root's")
    monkeypatch.setattr(config_file, "DEFAULT_DIR", str(tmp_path / "cache"))
    path = tmp_path / "config.toml"
    path.write_text('swarm-resource = "A"\n')
    parsed: list[str] = []
    real = config_file._read_toml

    def counting(p: str, origin: str) -> object:
        parsed.append(p)
        return real(p, origin)

    monkeypatch.setattr(config_file, "_read_toml", counting)
    assert config_file.load_config(str(path), {}).swarm_resource == "A"
    assert config_file.load_config(str(path), {}).swarm_resource == "A"
    assert len(parsed) == 1
    path.write_text('swarm-resource = "B"\n')
    assert config_file.load_config(str(path), {}).swarm_resource == "B"
    assert len(parsed) == 2
