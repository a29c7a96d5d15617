"""Shared fixtures. Each area keeps its fixtures in tests/fixtures/<area>.py (registered here)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest_plugins = [
    "tests.fixtures.hostguard",
    "tests.fixtures.nodes",
    "tests.fixtures.cgroup2_node",
    "tests.fixtures.sim",
    "tests.fixtures.containers",
    "tests.fixtures.realdriver",
    "tests.fixtures.clients",
    "tests.fixtures.gpu_clients",
    "tests.fixtures.cri_api",
    "tests.fixtures.cri",
    "tests.fixtures.cri_host",
]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    from tests.fixtures.nodes import parametrize_nodes

    parametrize_nodes(metafunc)



@pytest.fixture(autouse=True)
def _engine_log_sink() -> Iterator[None]:
    """Every test starts and ends with the engine's records going to `logging` (caplog): a
    command run in-process (the runtime wrapper's create, the CDI hooks) installs its own sink
    for the rest of its process, which in a test run is the next tests' process."""
    from nvmount import log

    log.install(None)
    yield
    log.install(None)


@pytest.fixture(scope="session", autouse=True)
def _run_nvhook_left_as_found() -> Iterator[None]:
    """The tests run nvhook as root with its default cache directory, /run/nvhook (the runtime
    launcher's facts, parsed CDI specs, the config and inventory caches): what this session
    added there is removed at its end, and the directory too if the session made it."""
    import contextlib
    import os
    import shutil

    top = "/run/nvhook"
    existed = os.path.isdir(top)
    before = set(os.listdir(top)) if existed else set()
    yield
    if os.geteuid() != 0 or not os.path.isdir(top) or os.path.islink(top):
        return
    if not existed:
        shutil.rmtree(top, ignore_errors=True)
        return
    for name in set(os.listdir(top)) - before:
        path = os.path.join(top, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
