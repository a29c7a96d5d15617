"""Fixtures of the security suite (helpers live in tests/fixtures/security.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvhook.dev.sim import SimRoot
from tests.fixtures.containers import ContainerFactory
from tests.fixtures.security import AttackRig, HostOracle

LONG = os.environ.get("NVHOOK_LONG") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow` tests run only with NVHOOK_LONG=1 (the documented long commands)."""
    if LONG:
        return
    skip = pytest.mark.skip(reason="long variant: set NVHOOK_LONG=1 (tests/security/README.md)")
    for item in items:
        if "slow" in item.keywords and str(item.fspath).startswith(str(Path(__file__).parent)):
            item.add_marker(skip)


@pytest.fixture
def rig(containers: ContainerFactory, sim_root: SimRoot, hook_launcher: Path,
        tmp_path: Path) -> AttackRig:
    containers.tag = "sec"
    return AttackRig(containers, sim_root, hook_launcher, tmp_path)


@pytest.fixture
def oracle() -> HostOracle:
    return HostOracle()


@pytest.fixture(scope="session")
def tools_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the C tools of tests/fixtures/tools are compiled (once per session)."""
    return tmp_path_factory.mktemp("sectools")
