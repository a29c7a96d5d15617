"""Shared fixtures. Each area keeps its fixtures in tests/fixtures/<area>.py (registered here)."""

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
