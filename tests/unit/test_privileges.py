"""nvmount.privileges: capability sets per stage, checked in /proc/self/status of forked
children (each test's changes die with its child), plus what each stage's set allows."""

from __future__ import annotations

import importlib
import os

import pytest

from nvmount import privileges
from nvmount._libc import CLONE_NEWNS, Libc
from nvmount.privileges import STAGE_CAPS, Cap, Stage, caps_for
from tests._compat import zip_strict
from tests.fixtures.privns import in_private_ns, sleeper

STAGES = tuple(STAGE_CAPS)

pytestmark = pytest.mark.root

STATUS_KEYS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")


def status() -> dict[str, int]:
    """Capability masks and no_new_privs of the calling process."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in STATUS_KEYS:
                out[key] = int(value.strip(), 16 if key.startswith("Cap") else 10)
    return out


def mask(caps: frozenset[Cap] | set[Cap]) -> int:
    m = 0
    for c in caps:
        m |= 1 << int(c)
    return m


@pytest.fixture(scope="module")
def root_status() -> dict[str, int]:
    if os.geteuid() != 0:
        pytest.skip("needs root (capability sets)")
    return status()


def test_caps_for_is_the_union_of_the_stages() -> None:
    assert caps_for([]) == frozenset()
    assert caps_for([Stage.CONTAINER, Stage.CGROUP]) == STAGE_CAPS[Stage.CONTAINER] | STAGE_CAPS[
        Stage.CGROUP]
    assert caps_for(STAGES) >= STAGE_CAPS[Stage.MOUNT] | STAGE_CAPS[Stage.LDCACHE]
    assert STAGE_CAPS[Stage.SHUTDOWN] == frozenset()


def _drop_to(which: Stage) -> dict[str, int]:
    privileges.drop_to(which)
    return status()


@pytest.mark.parametrize("which", list(STAGES), ids=[s.value for s in STAGES])
def test_drop_to_makes_exactly_the_stage_caps_effective(root_status: dict[str, int],
                                                        which: Stage) -> None:
    got = in_private_ns(_drop_to, which)
    assert got["CapEff"] == mask(STAGE_CAPS[which]) & root_status["CapPrm"]
    assert got["CapPrm"] == root_status["CapPrm"]  # permitted is not touched by a stage switch


def _nested() -> tuple[int, int, int]:
    privileges.drop_to(Stage.INIT)
    before = status()["CapEff"]
    with privileges.stage(Stage.MOUNT):
        inside = status()["CapEff"]
    return before, inside, status()["CapEff"]


def test_stage_context_restores_the_previous_effective_set(root_status: dict[str, int]) -> None:
    before, inside, after = in_private_ns(_nested)
    prm = root_status["CapPrm"]
    assert before == after == mask(STAGE_CAPS[Stage.INIT]) & prm
    assert inside == mask(STAGE_CAPS[Stage.MOUNT]) & prm


def _limit(caps: frozenset[Cap] | None) -> list[dict[str, int]]:
    privileges.limit_permitted(caps)
    seen = [status()]
    for s in STAGES:
        privileges.drop_to(s)
        seen.append(status())
    return seen


@pytest.mark.parametrize("without", [None, Stage.KMODS], ids=["all-stages", "no-kmods"])
def test_limit_permitted_cuts_permitted_bounding_and_inheritable(
        root_status: dict[str, int], without: Stage | None) -> None:
    caps = None if without is None else caps_for(s for s in STAGES if s is not without)
    keep = mask(caps_for(STAGES) if caps is None else caps)
    first, *per_stage = in_private_ns(_limit, caps)
    assert first["CapPrm"] == keep & root_status["CapPrm"]
    assert first["CapBnd"] == keep & root_status["CapBnd"]
    assert (first["CapInh"], first["CapAmb"]) == (0, 0)
    for s, got in zip_strict(STAGES, per_stage):
        assert got["CapEff"] == mask(STAGE_CAPS[s]) & keep & root_status["CapPrm"], s
    if without is Stage.KMODS:  # SYS_MODULE and MKNOD are gone for good
        assert not per_stage[list(STAGES).index(Stage.KMODS)]["CapEff"] & mask(
            {Cap.SYS_MODULE, Cap.MKNOD})


def _for_exec(uid: int, gid: int) -> tuple[dict[str, int], tuple[int, ...], list[int], int,
                                           tuple[str, ...]]:
    p = importlib.import_module("_prctl")
    warnings = privileges.drop_for_exec(uid, gid)
    return status(), os.getresuid(), os.getgroups(), p.prctl(p.PR_GET_SECUREBITS), warnings


@pytest.mark.parametrize("uid", [0, 1000], ids=["uid-0", "uid-1000"])
def test_drop_for_exec_leaves_nothing(root_status: dict[str, int], uid: int) -> None:
    got, resuid, groups, securebits, warnings = in_private_ns(_for_exec, uid, uid + 1)
    assert {k: got[k] for k in STATUS_KEYS} == {
        "CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": 0, "CapAmb": 0, "NoNewPrivs": 1}
    assert resuid == (uid, uid, uid)
    assert groups == [uid + 1]
    assert securebits == 0x23  # NOROOT, NOROOT_LOCKED, KEEP_CAPS_LOCKED
    assert warnings == ()


def _try_ns(pid: int, which: Stage, op: str) -> str:
    privileges.drop_to(which)
    try:
        fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
        if op == "setns":
            Libc().setns(fd, CLONE_NEWNS)
        os.close(fd)
    except OSError as err:
        return f"errno {err.errno}"
    return "ok"


@pytest.mark.parametrize(("which", "op", "want"), [
    (Stage.CONTAINER, "open", "ok"),
    (Stage.SHUTDOWN, "open", "errno 13"),
    (Stage.INIT, "open", "errno 13"),
    (Stage.MOUNT, "setns", "ok"),
    (Stage.CONTAINER, "setns", "errno 1"),
], ids=["container-opens-ns", "shutdown-cannot", "init-cannot", "mount-setns",
        "container-cannot-setns"])
def test_stage_caps_allow_what_the_stage_does(root_status: dict[str, int], which: Stage,
                                              op: str, want: str) -> None:
    """Opening another root process's /proc/<pid>/ns/mnt is a ptrace check (SYS_PTRACE);
    setns into a mount namespace needs SYS_ADMIN and SYS_CHROOT."""
    with sleeper("-m") as pid:
        assert in_private_ns(_try_ns, pid, which, op) == want


def _as_nobody() -> tuple[frozenset[int], tuple[str, ...], int]:
    # python-prctl's C module loaded while root, as a process that drops its ids has it: the
    # checkout's venv may be in a directory only root can enter (a `mktemp -d` clone)
    import _prctl  # type: ignore[import-not-found]  # noqa: F401

    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    privileges.limit_permitted()
    privileges.drop_to(Stage.MOUNT)
    with privileges.stage(Stage.CGROUP):
        pass
    warnings = privileges.drop_for_exec(65534, 65534)
    return privileges.effective(), warnings, status()["NoNewPrivs"]


def test_everything_is_a_noop_when_not_root(root_status: dict[str, int]) -> None:
    """No errors (a dry run by a normal user); a helper still cannot gain privileges."""
    eff, warnings, no_new_privs = in_private_ns(_as_nobody)
    assert eff == frozenset()
    assert warnings and "not root" in warnings[0]
    assert no_new_privs == 1


def test_last_cap_without_python_prctl_s_constant() -> None:
    """Debian 11's python3-prctl (1.7) has no CAP_LAST_CAP: the kernel's value is used."""
    from types import SimpleNamespace

    with open("/proc/sys/kernel/cap_last_cap") as f:
        kernel = int(f.read())
    old = SimpleNamespace()
    assert privileges._last_cap(old) == kernel  # type: ignore[arg-type]
    assert privileges._all_caps(SimpleNamespace(CAP_LAST_CAP=3)) == [0, 1, 2, 3]  # type: ignore[arg-type]
