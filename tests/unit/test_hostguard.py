"""The suite's host guard (tests/fixtures/hostguard.py) and the rootless rig's user bookkeeping
(tests/fixtures/clientrig/users.py): what the guard sees, and that a session removes exactly the
user and ranges it added (issue 19 class 7)."""

from __future__ import annotations

import fcntl
import os
import pwd
import secrets
import shutil
from pathlib import Path

import pytest

from tests.fixtures import hostguard
from tests.fixtures.clientrig import users


def _fake_host(root: Path) -> None:
    for d in ("dev/pts", "etc/cdi", "usr/local/bin", "run/nvhook", "usr/bin"):
        (root / d).mkdir(parents=True)
    (root / "dev/null").write_text("")
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "etc/subuid").write_text(f"{users.ROOTLESS_USER}:100000:65536\n")


@pytest.mark.parametrize(("change", "seen"), [
    (lambda r: (r / "dev/nvidiactl").write_text(""), "added {r}/dev/nvidiactl"),
    (lambda r: (r / "dev/nvidia-caps").mkdir(), "added {r}/dev/nvidia-caps"),
    (lambda r: (r / "etc/cdi/nvidia.yaml").write_text("x"), "added {r}/etc/cdi/nvidia.yaml"),
    (lambda r: (r / "usr/local/bin/nvidia-container-runtime-hook").write_text("#!"),
     "added {r}/usr/local/bin/nvidia-container-runtime-hook"),
    (lambda r: (r / "etc/passwd").write_text("root:x:0:0::/root:/bin/bash\n"),
     "removed {r}/etc/passwd: root:x:0:0::/root:/bin/sh"),
    (lambda r: (r / "dev/null").unlink(), "removed {r}/dev/null"),
], ids=["ctl-node", "caps-dir", "cdi-spec", "launcher", "passwd-line", "dev-null"])
def test_the_guard_sees_what_a_test_could_leave(tmp_path: Path, change: object, seen: str) -> None:
    _fake_host(tmp_path)
    before = hostguard.take(str(tmp_path))
    change(tmp_path)  # type: ignore[operator]
    found = hostguard.differences(before, hostguard.take(str(tmp_path)))
    assert any(line.startswith(seen.format(r=tmp_path)) for line in found), found


@pytest.mark.parametrize("change", [
    lambda r: (r / "dev/pts/7").write_text(""),  # other processes' terminals
    lambda r: (r / "dev/loop9").write_text(""),  # losetup (other sessions' loop devices)
    lambda r: (r / "run/nvhook/inventory").write_text("x"),  # nvhook's own cache
    lambda r: (r / "etc/subuid").write_text(""),  # the rootless rig's user: users.py's own
    lambda r: (r / "usr/bin/python3").write_text(""),  # not a driver or nvhook name
], ids=["pts", "loop", "nvhook-cache", "rootless-range", "other-binary"])
def test_the_guard_ignores_what_others_change(tmp_path: Path, change: object) -> None:
    _fake_host(tmp_path)
    before = hostguard.take(str(tmp_path))
    change(tmp_path)  # type: ignore[operator]
    assert hostguard.differences(before, hostguard.take(str(tmp_path))) == []


def _private_locks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for attr, path in (("LOCK_PATH", "lock"), ("IN_USE_PATH", "in-use"), ("ADDED_PATH", "added")):
        monkeypatch.setattr(users, attr, tmp_path / path)
    monkeypatch.setattr(users, "_HELD", [])


def _accounts() -> dict[str, str]:
    return {p: Path(p).read_text() for p in ("/etc/passwd", "/etc/group", "/etc/subuid",
                                             "/etc/subgid")}


@pytest.mark.parametrize("existed", [False, True], ids=["added-by-the-session", "pre-existing"])
def test_a_session_removes_what_it_added_and_nothing_else(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path, existed: bool) -> None:
    """A fresh user (not the shared rig user): what `ensure_rootless_user` added is removed by
    `release_rootless_user` (the user last, with its /etc/subuid and /etc/subgid lines); a
    user that was there before the session stays, with its ranges."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd")
    _private_locks(monkeypatch, tmp_path)
    name = f"nvhook-t{secrets.token_hex(3)}"
    accounts = _accounts()
    try:
        if existed:
            users._run(["/usr/sbin/useradd", "--no-create-home", "--user-group", name])
        expected = _accounts()
        user = users.ensure_rootless_user(name)
        assert pwd.getpwnam(name).pw_uid == user.uid
        assert f"{name}:" in Path("/etc/subuid").read_text()
        undone = users.release_rootless_user()
        assert (f"{name} user" in undone) != existed, undone  # the user last, when added
        assert users._user_exists(name) == existed
        assert _accounts() == expected
    finally:
        if users._user_exists(name):
            users._run(["/usr/sbin/userdel", name])
    assert _accounts() == accounts


def test_a_user_in_use_by_another_session_stays(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """The last session out removes the user: while another session holds it, it stays."""
    _private_locks(monkeypatch, tmp_path)
    (tmp_path / "added").write_text("nvhook-not-a-user user\n")
    monkeypatch.setattr(users, "_HELD", [os.open(tmp_path / "in-use", os.O_RDWR | os.O_CREAT)])
    fcntl.flock(users._HELD[0], fcntl.LOCK_SH)
    other = os.open(tmp_path / "in-use", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_SH)  # another session
        assert users.release_rootless_user() == []
        assert (tmp_path / "added").exists()
    finally:
        os.close(other)


def _snapshot_with_mounts(ours: str) -> tuple[bool, str]:
    """In a private mount namespace: a neighbour's mount (/mnt, like dockerd's) and then one
    under the session's temp dir; whether the filtered snapshot passed the first, and how it
    failed the second."""
    from nvmount import _libc
    from tests.fixtures.containers import HostSnapshot

    libc = _libc.Libc()
    snap = HostSnapshot()
    libc.mount("neighbour", "/mnt", "tmpfs", 0)
    snap.assert_unchanged()  # another daemon's mount does not count
    libc.mount("ours", ours, "tmpfs", 0)
    try:
        snap.assert_unchanged()
    except AssertionError as err:
        return True, str(err)
    return True, ""


def test_the_filtered_mount_snapshot_counts_only_what_could_be_ours(tmp_path: Path) -> None:
    """Issue 19 class 6: tests that compare host mounts (test_ldconfig, test_mounts) use this
    snapshot, so a dockerd mounting things meanwhile does not fail them."""
    from tests.fixtures.privns import in_private_ns

    (tmp_path / "ours").mkdir()
    passed, failure = in_private_ns(_snapshot_with_mounts, str(tmp_path / "ours"))
    assert passed and "host mounts changed" in failure and str(tmp_path) in failure
