"""Shared fixtures. Each area keeps its fixtures in tests/fixtures/<area>.py (registered here)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

_RUN_BEFORE = pytest.StashKey[set[str]]()
_RUN_LEFT = pytest.StashKey[list[str]]()

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

_RUN = "/run"
_STATE_ROOTS = ("runc", "crun")


def pytest_sessionstart(session: pytest.Session) -> None:
    import contextlib
    import os

    with contextlib.suppress(OSError):
        session.config.stash[_RUN_BEFORE] = set(os.listdir(_RUN))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Note the entries of /run this session's start did not find there (a test that left a
    runtime's state root, a socket, a cache): the README's test command on a fresh machine
    leaves /run as it found it. runc's and crun's default state roots (/run/runc, /run/crun:
    a container run without --root) that this session made go again when empty. Other
    processes on a shared machine add entries too, so the rest is reported
    (`pytest_terminal_summary`); NVHOOK_RUN_STRICT=1 (a fresh CI machine) fails on it."""
    import os

    before = session.config.stash.get(_RUN_BEFORE, None)
    try:
        left = sorted(set(os.listdir(_RUN)) - before) if before is not None else []
    except OSError:
        left = []
    for name in [n for n in left if n in _STATE_ROOTS]:  # runc's and crun's default state
        try:  # roots (a test that runs them without --root): gone when this session made
            os.rmdir(os.path.join(_RUN, name))  # them and they are empty again
            left.remove(name)
        except OSError:
            pass
    session.config.stash[_RUN_LEFT] = left
    if left and os.environ.get("NVHOOK_RUN_STRICT") == "1":
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    left = config.stash.get(_RUN_LEFT, [])
    if left:
        terminalreporter.write_line(
            f"/run: this session left {', '.join(f'{_RUN}/{n}' for n in left)} (a test's state "
            "root or socket belongs under its tmp_path; other processes may add entries too)",
            yellow=True)

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
