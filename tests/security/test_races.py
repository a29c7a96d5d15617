"""F7 (CVE-2025-23359) and F12 (CVE-2026-24260) under the race harness: a separate attacker
process loops renameat2(RENAME_EXCHANGE) between a real entry and a symlink while
containers start, in a directory shared with the container.

Two levels:
- engine: nvmount's configure_container against a process in its own mount namespace over
  one rootfs the attacker works in (the bulk count; CI 60 starts, NVHOOK_LONG=1 2,100);
- runc: real `runc run` with nvhook's installed hook; the attacker works in a host directory
  bind-mounted into the container (a volume shared with a sibling) that the image's lib dir
  / compat dir point into (CI 2x8 starts, long 2x100).

Every start must end either started-and-contained (no mount from outside the rootfs and the
driver root, nothing under the compat dir) or failed closed with one line; after every
start the host must be unchanged (markers, watched files, driver-looking names in host
dirs, the host mount table). The figures (starts/s, succeeded vs failed closed, swaps) are
printed; run with `-s` to see them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from nvhook.dev.demo.rootfs import copy_rootfs
from nvhook.dev.sim import SimRoot
from nvmount.capabilities import DriverCapability as C
from nvmount.plan.types import CompatMode
from nvmount.requests import EngineOptions, EngineRequest
from tests.fixtures.containers import RootfsCache
from tests.fixtures.race import (
    RaceStats,
    Swapper,
    check_mounts,
    engine_start,
    reset_rootfs,
    rootfs_listing,
)
from tests.fixtures.security import (
    LIB,
    AttackRig,
    HostOracle,
    compile_tool,
    ns_container,
    symlinks,
    token,
)
from tests.security.conftest import LONG

pytestmark = [pytest.mark.root]

ENGINE_STARTS = {"F12": 1500 if LONG else 40, "F7": 600 if LONG else 20}
RUNC_STARTS = 100 if LONG else 8
COMPAT = "/usr/local/cuda/compat"


def _evil_targets(oracle: HostOracle) -> list[str]:
    mark = oracle.marker("/tmp", "HOST_RACE")
    return ["/", "/proc/1/root/etc", mark, "../../../../../../.." + mark, "/proc/self/cwd"]


def _repoint(link: Path, target: str) -> None:
    tmp = link.with_name(link.name + ".new")
    os.symlink(target, tmp)
    os.replace(tmp, link)


@pytest.fixture
def race_rootfs(rootfs_cache: RootfsCache, tmp_path: Path) -> Path:
    (tmp_path / "bundle").mkdir()
    rootfs = copy_rootfs(rootfs_cache.get(), tmp_path / "bundle" / "rootfs")
    compat = rootfs / COMPAT.lstrip("/")
    compat.mkdir(parents=True)
    (compat / "libcuda.so.999.1").write_bytes(b"\x7fELF not really")
    return rootfs


def _engine_options(sim: SimRoot) -> EngineOptions:
    return EngineOptions(root=sim.path, proc_root=sim.proc_root, compat_mode=CompatMode.MOUNT)


def _engine_race(stats: RaceStats, rootfs: Path, sim: SimRoot, swappers: list[Swapper],
                 links: list[Path], targets: list[str], oracle: HostOracle, starts: int) -> None:
    options = _engine_options(sim)
    request = EngineRequest(devices=("0",), capabilities=C.UTILITY | C.COMPUTE)
    original = rootfs_listing(rootfs)
    fds = len(os.listdir("/proc/self/fd"))
    began = time.monotonic()
    for i in range(starts):
        for link in links:
            _repoint(link, targets[i % len(targets)])
        for s in swappers:
            s.resume()
        with ns_container(rootfs) as pid:
            before = set(Path(f"/proc/{pid}/mountinfo").read_text().splitlines())
            ok, error = engine_start(pid, rootfs, options, request)
            mounts = [m for m in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                      if m not in before]  # what the engine added
        for s in swappers:
            s.pause()
        stats.starts += 1
        if ok:
            stats.ok += 1
        else:
            stats.record_refusal(error)
        bad = check_mounts(mounts, (str(rootfs), sim.path), (COMPAT, f"{rootfs}{COMPAT}"))
        stats.escapes += [f"start {i}: {b}" for b in bad + oracle.problems()]
        # (the container's ldconfig, racing the swaps, may delete entries of the container's
        # own lib dir - glibc ldconfig unlinks what looks like a dangling library link; that
        # is inside the container and not an escape, so what is missing is not checked)
        reset_rootfs(rootfs, original)
        if stats.escapes:
            break
    stats.seconds = time.monotonic() - began
    assert len(os.listdir("/proc/self/fd")) == fds, "the engine leaked fds"


def _report(stats: RaceStats, swappers: list[Swapper]) -> None:
    stats.swaps = sum(s.swaps for s in swappers)
    print("\n" + stats.summary())
    assert not stats.escapes, "\n".join(stats.escapes[:20])
    assert stats.swaps > stats.starts, "the attacker did not race"


def test_f12_engine_symlink_creation_race(sim_root: SimRoot, race_rootfs: Path, tools_dir: Path,
                                          oracle: HostOracle) -> None:
    """F12 / CVE-2026-24260: the lib dir and /etc/ld.so.conf.d swap with symlinks to /,
    /proc/1/root/etc, a host marker dir (absolute and dotdot) and a magic link while the
    engine creates mount points, files and SONAME links and runs ldconfig."""
    swapper = compile_tool("swapper", tools_dir)
    libparent, etc = race_rootfs / "usr/lib", race_rootfs / "etc"
    links = [libparent / "x86_64-linux-gnu.evil", etc / "ld.so.conf.d.evil"]
    for link in links:
        os.symlink("/", link)
    stats = RaceStats("F12 engine")
    swappers = [Swapper(swapper, libparent, [("x86_64-linux-gnu", "x86_64-linux-gnu.evil")]),
                Swapper(swapper, etc, [("ld.so.conf.d", "ld.so.conf.d.evil")])]
    with swappers[0], swappers[1]:
        for s in swappers:
            s.pause()
        _engine_race(stats, race_rootfs, sim_root, swappers, links, _evil_targets(oracle),
                     oracle, ENGINE_STARTS["F12"])
    _report(stats, swappers)
    oracle.assert_clean()


def test_f7_engine_compat_lib_race(sim_root: SimRoot, race_rootfs: Path, tools_dir: Path,
                                   oracle: HostOracle) -> None:
    """F7 / CVE-2025-23359: the compat lib (a regular file) swaps with a symlink to / (and
    the other targets), the compat dir with a symlink, compat mode `mount` with the opt-in:
    the engine never mounts compat libs, so nothing may ever appear under the compat dir."""
    swapper = compile_tool("swapper", tools_dir)
    compat = race_rootfs / COMPAT.lstrip("/")
    links = [compat / ".evil-lib", compat.parent / "compat.evil"]
    for link in links:
        os.symlink("/", link)
    stats = RaceStats("F7 engine")
    swappers = [Swapper(swapper, compat, [("libcuda.so.999.1", ".evil-lib")]),
                Swapper(swapper, compat.parent, [("compat", "compat.evil")])]
    with swappers[0], swappers[1]:
        for s in swappers:
            s.pause()
        _engine_race(stats, race_rootfs, sim_root, swappers, links, _evil_targets(oracle),
                     oracle, ENGINE_STARTS["F7"])
    _report(stats, swappers)
    oracle.assert_clean()


# ---- the same races through real runc starts ----------------------------------------------------

def _shared_dir(tmp_path: Path, inner: str) -> Path:
    shared = tmp_path / f"shared-{token()}"
    (shared / inner).mkdir(parents=True)
    os.symlink("/", shared / f"{inner}.evil")
    return shared


def _runc_race(rig: AttackRig, oracle: HostOracle, stats: RaceStats, shared: Path,
               inner: str, dest: str, mutate: object, swapper: Swapper,
               config: Path | None = None, forbid_in_volume: bool = False) -> None:
    """RUNC_STARTS starts with `shared` bind-mounted at `dest`; with `forbid_in_volume`
    nothing may be mounted there (the compat dir)."""
    original = rootfs_listing(shared)
    targets = _evil_targets(oracle)
    began = time.monotonic()
    for i in range(RUNC_STARTS):
        _repoint(shared / f"{inner}.evil", targets[i % len(targets)])
        bundle = rig.bundle(caps="all", mutate=mutate, config=config)  # type: ignore[arg-type]
        spec = json.loads((bundle / "config.json").read_text())
        spec["mounts"].append({"destination": dest, "type": "bind", "source": str(shared),
                               "options": ["rbind", "rprivate"]})
        (bundle / "config.json").write_text(json.dumps(spec))
        swapper.resume()
        out = rig.run(bundle)
        swapper.pause()
        stats.starts += 1
        if out.ok:
            stats.ok += 1
            bad = check_mounts(out.sections.get("mountinfo", []),
                               (str(bundle), rig.sim.path, str(shared)), ())
            bad += [m for m in out.sections.get("mountinfo", [])
                    if forbid_in_volume and m.split()[4].startswith(dest + "/")]
            stats.escapes += [f"start {i}: {b}" for b in bad]
        else:
            stats.record_refusal(out.assert_one_line_error(alone=False))
        stats.escapes += [f"start {i}: {p}" for p in oracle.problems()]
        reset_rootfs(shared, original)
        if stats.escapes:
            break
    stats.seconds = time.monotonic() - began


@pytest.mark.e2e
def test_f12_runc_symlink_creation_race(rig: AttackRig, oracle: HostOracle, tmp_path: Path,
                                        tools_dir: Path) -> None:
    """F12 through runc: the image's lib dir is a link into a shared volume whose `lib`
    directory the attacker swaps with a symlink while the hook works."""
    shared = _shared_dir(tmp_path, "lib")
    swapper = Swapper(compile_tool("swapper", tools_dir), shared, [("lib", "lib.evil")])
    stats = RaceStats("F12 runc")
    with swapper:
        swapper.pause()
        _runc_race(rig, oracle, stats, shared, "lib", "/shared",
                   symlinks((LIB, "/shared/lib")), swapper)
    _report(stats, [swapper])
    oracle.assert_clean()


@pytest.mark.e2e
def test_f7_runc_compat_lib_race(rig: AttackRig, oracle: HostOracle, tmp_path: Path,
                                 tools_dir: Path) -> None:
    """F7 through runc: the compat dir is a shared volume; the attacker swaps the compat lib
    (a regular file) with a symlink to / (and the other targets); compat mode `mount`."""
    shared = _shared_dir(tmp_path, "lib")
    (shared / "libcuda.so.999.1").write_bytes(b"\x7fELF not really")
    os.symlink("/", shared / "libcuda.so.999.1.evil")
    swapper = Swapper(compile_tool("swapper", tools_dir), shared,
                      [("libcuda.so.999.1", "libcuda.so.999.1.evil"), ("lib", "lib.evil")])
    config = rig.config('[features]\nallow-cuda-compat-libs-from-container = true\n'
                        '[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = "mount"\n')
    stats = RaceStats("F7 runc")
    with swapper:
        swapper.pause()
        _runc_race(rig, oracle, stats, shared, "lib", COMPAT, None, swapper, config,
                   forbid_in_volume=True)
    _report(stats, [swapper])
    oracle.assert_clean()


