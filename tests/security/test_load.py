"""Load: many GPU container starts in a row and at once (issue 5, item 5).

Sequential: N `runc run`s of a GPU container, one after the other. Concurrent: M `runc run`
processes started at once, each with its own bundle (the hooks run concurrently: the sim's
/proc/driver step, nvhook's mounts, cgroup writes and ldconfig sandboxes). Every start must
succeed and see its GPU; afterwards the host mount table, the test process's open fds, the
watched host files and the cgroup hierarchy (no leftover container cgroups) are as before.

CI: 20 sequential and 8 concurrent starts. NVHOOK_LONG=1: the full 200 and 32. The figures
(starts/s, per-start wall time) are printed (`-s`).
"""

from __future__ import annotations

import subprocess
import time

import pytest

from nvhook.dev.demo.bundle import container_cgroup_dirs, delete_container, new_container_id
from tests._compat import zip_strict
from tests.fixtures.containers import open_fd_count
from tests.fixtures.security import AttackRig, HostOracle
from tests.security.conftest import LONG

pytestmark = [pytest.mark.root, pytest.mark.e2e]

SEQUENTIAL = 200 if LONG else 20
CONCURRENT = 32 if LONG else 8
SCRIPT = "nvidia-smi -L"


def _expect_gpu(stdout: str, what: str) -> None:
    assert stdout.startswith("GPU 0: NVIDIA A100-SXM4-80GB"), f"{what}: {stdout!r}"


def test_sequential_starts(rig: AttackRig, oracle: HostOracle) -> None:
    fds = open_fd_count()
    times = []
    began = time.monotonic()
    for i in range(SEQUENTIAL):
        out = rig.start(SCRIPT, gpus="0")
        assert out.ok, f"start {i}: {out.describe()}"
        _expect_gpu(out.result.stdout, f"start {i}")
        times.append(out.result.seconds)
    total = time.monotonic() - began
    times.sort()
    print(f"\n{SEQUENTIAL} sequential starts in {total:.1f}s ({SEQUENTIAL / total:.2f}/s incl. "
          f"bundle copies); runc run median {times[len(times) // 2]:.3f}s, "
          f"max {times[-1]:.3f}s")
    assert open_fd_count() == fds
    oracle.assert_clean()


def test_concurrent_starts(rig: AttackRig, oracle: HostOracle) -> None:
    fds = open_fd_count()
    bundles = [rig.bundle(SCRIPT, gpus="0") for _ in range(CONCURRENT)]
    ids = [new_container_id("load") for _ in bundles]
    began = time.monotonic()
    procs = [subprocess.Popen(rig.factory.runc.argv("run", "--bundle", str(b), cid), cwd=b,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for b, cid in zip_strict(bundles, ids)]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for cid in ids:
            delete_container(cid, runc=rig.factory.runc)
    total = time.monotonic() - began
    failures = [(i, rc, err.strip()[-300:]) for i, (rc, _, err) in enumerate(results) if rc]
    print(f"\n{CONCURRENT} concurrent starts finished in {total:.1f}s; failures: {failures}")
    assert not failures
    for i, (_, out, _) in enumerate(results):
        _expect_gpu(out, f"container {i}")
    assert all(container_cgroup_dirs(cid) == [] for cid in ids)
    assert open_fd_count() == fds
    oracle.assert_clean()


