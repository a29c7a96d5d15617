"""Shared fixtures. Each area keeps its fixtures in tests/fixtures/<area>.py (registered here)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest_plugins = [
    "tests.fixtures.hostguard",
    "tests.fixtures.sim",
    "tests.fixtures.containers",
    "tests.fixtures.realdriver",
    "tests.fixtures.clients",
    "tests.fixtures.gpu_clients",
    "tests.fixtures.cri_api",
    "tests.fixtures.cri",
    "tests.fixtures.cri_host",
]



@pytest.fixture(autouse=True)
def _engine_log_sink() -> Iterator[None]:
    """Every test starts and ends with the engine's records going to `logging` (caplog): a
    command run in-process (the runtime wrapper's create, the CDI hooks) installs its own sink
    for the rest of its process, which in a test run is the next tests' process."""
    from nvmount import log

    log.install(None)
    yield
    log.install(None)
