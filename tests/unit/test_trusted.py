"""nvmount.fs.trusted: the rules root applies to a host path that config or a user names (issue
19 classes 3, 8, 9). A "user" is an unprivileged uid that owns a directory on the way."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nvmount import cachefile
from nvmount.errors import TrustError
from nvmount.fs import trusted
from nvmount.timing import append_record

pytestmark = pytest.mark.root
USER = 64123  # any unprivileged uid


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the rules are root's (chown, mknod)")


def user_dir(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, USER, USER)
    path.chmod(mode)
    return path


# ---- the walk --------------------------------------------------------------------------------

@pytest.mark.parametrize(("build", "words"), [
    (lambda t: user_dir(t / "u") / "c", "owned by uid 64123"),
    (lambda t: (user_dir(t / "g", 0o775), t / "g" / "c")[1], "owned by uid 64123"),
    (lambda t: (t / "w").mkdir(mode=0o777) or os.chmod(t / "w", 0o777) or t / "w" / "c",
     r"writable by group or others \(mode 0777\)"),
    (lambda t: (t / "link").symlink_to(user_dir(t / "u2")) or os.chown(
        t / "link", USER, USER, follow_symlinks=False) or t / "link" / "c",
     "a symlink owned by uid 64123"),
    (lambda t: (t / "f").write_text("") or t / "f" / "c", "a regular file, not a directory"),
], ids=["user-parent", "group-writable-user-parent", "world-writable", "user-symlink",
        "file-component"])
def test_an_untrusted_component_is_named(tmp_path: Path, build: Callable[[Path], Path],
                                         words: str) -> None:
    path = build(tmp_path)
    with pytest.raises(TrustError, match=words) as err:
        os.close(trusted.open_dir(str(path), "cache directory", create=0o700))
    assert str(err.value).startswith(f"cache directory {path}: ")
    assert "\n" not in str(err.value)
    assert not os.path.lexists(path)


def test_root_symlinks_and_sticky_dirs_are_followed(tmp_path: Path) -> None:
    """/var/run -> /run: a symlink root made is followed; /tmp (sticky) holds root's dirs."""
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "abs").symlink_to(real)
    (tmp_path / "rel").symlink_to("real/sub/..")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    for path in (tmp_path / "abs" / "sub", tmp_path / "rel" / "sub", sticky / "mine"):
        fd = trusted.open_dir(str(path), "x", create=0o700)
        assert os.path.samefile(f"/proc/self/fd/{fd}", os.path.realpath(path))
        os.close(fd)
    with pytest.raises(TrustError, match="owned by uid 64123"):  # a user's dir in a sticky dir
        trusted.open_dir(str(user_dir(sticky / "theirs") / "c"), "x", create=0o700)


def test_a_symlink_loop_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(TrustError, match="more than 40 symlinks"):
        trusted.open_dir(str(tmp_path / "a"), "x")


def test_the_cache_dir_a_user_redirects_is_not_used(tmp_path: Path) -> None:
    """The review's case: `[nvhook] cache-dir` under a user's directory; the user replaces the
    parent by a symlink. Before: root made a root-owned dir where the link pointed and used it."""
    parent = user_dir(tmp_path / "home")
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    parent.rmdir()
    parent.symlink_to(chosen)
    os.chown(parent, USER, USER, follow_symlinks=False)
    assert cachefile.store(str(parent / "cache"), "x", 1, "v") is False
    assert cachefile.load(str(parent / "cache"), "x", 1) is None
    assert list(chosen.iterdir()) == []
    user_dir(tmp_path / "home2")
    assert cachefile.store(str(tmp_path / "home2" / "cache"), "x", 1, "v") is False
    assert not (tmp_path / "home2" / "cache").exists()


# ---- logs ------------------------------------------------------------------------------------

def _log_dir(tmp_path: Path) -> Path:
    """Ubuntu's /var/log: root:syslog 0775 (here: a group of users)."""
    logs = tmp_path / "log"
    logs.mkdir()
    os.chown(logs, 0, USER)
    logs.chmod(0o775)
    return logs


@pytest.mark.parametrize(("plant", "words"), [
    (lambda d, v: (d / "x.log").symlink_to(v), "a symlink, not a regular file"),
    (lambda d, v: os.link(v, d / "x.log"), "with 2 links"),
    (lambda d, v: os.mkfifo(d / "x.log"), "a FIFO, not a regular file"),
    (lambda d, v: (d / "x.log").write_text("") or os.chown(d / "x.log", USER, USER),
     "owned by uid 64123"),
], ids=["symlink", "hard-link", "fifo", "user-file"])
def test_a_planted_log_is_not_written(tmp_path: Path, plant: Callable[[Path, Path], None],
                                      words: str) -> None:
    """A group member plants an entry in the group-writable log directory: root appends to
    nothing of the user's choosing, and a FIFO does not block (before: every start hung)."""
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    logs = _log_dir(tmp_path)
    plant(logs, victim)
    started = time.monotonic()
    with pytest.raises(TrustError, match=words):
        trusted.open_log(str(logs / "x.log"), "debug log")
    with pytest.raises(TrustError, match=words):
        append_record(str(logs / "x.log"), {"total_ms": 1.0})
    assert time.monotonic() - started < 2
    assert victim.read_text() == "root's file\n"


def test_a_log_in_a_group_writable_dir_is_created_and_appended(tmp_path: Path) -> None:
    logs = _log_dir(tmp_path)
    for line in (b"one\n", b"two\n"):
        fd = trusted.open_log(str(logs / "x.log"), "debug log")
        os.write(fd, line)
        os.close(fd)
    assert (logs / "x.log").read_bytes() == b"one\ntwo\n"
    assert stat.S_IMODE(os.stat(logs / "x.log").st_mode) == 0o644
    with pytest.raises(TrustError, match="writable by group or others"):  # not for other files
        trusted.read_file(str(logs / "x.log"), "CDI spec", 100)


def test_a_fifo_debug_log_does_not_block_the_hook_logger(tmp_path: Path) -> None:
    """The hook's debug log (nvhook.logs.open_debug_log) on a FIFO that has a reader: no write."""
    from nvhook.logs import open_debug_log

    fifo = tmp_path / "debug.log"
    os.mkfifo(fifo)
    reader = threading.Thread(target=lambda: open(fifo, "rb").close(), daemon=True)
    reader.start()
    time.sleep(0.1)
    try:
        _, failed = open_debug_log(str(fifo))
    finally:
        if reader.is_alive():  # our open did not reach it: let it go
            os.close(os.open(fifo, os.O_RDWR))
        reader.join(5)
    assert failed is not None and "a FIFO" in failed


# ---- reads and writes ------------------------------------------------------------------------

def test_read_file_refuses_what_a_user_could_have_written(tmp_path: Path) -> None:
    good = tmp_path / "spec.yaml"
    good.write_text("kind: nvidia.com/gpu\n")
    assert trusted.read_file(str(good), "CDI spec", 100) == b"kind: nvidia.com/gpu\n"
    os.chown(good, USER, USER)
    with pytest.raises(TrustError, match="owned by uid 64123"):
        trusted.read_file(str(good), "CDI spec", 100)
    os.chown(good, 0, 0)
    good.chmod(0o666)
    with pytest.raises(TrustError, match="writable by group or others"):
        trusted.read_file(str(good), "CDI spec", 100)


def test_write_atomic_sets_the_mode_on_the_fd_without_setid_bits(tmp_path: Path) -> None:
    """Before (`runtime configure`, `install`): the old mode was copied through os.stat with
    its setuid bit and chmod'ed by path after the write."""
    target = tmp_path / "etc" / "daemon.json"
    trusted.write_atomic(str(target), b"{}", "write", parents=True)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    target.chmod(0o4777)
    trusted.write_atomic(str(target), b"{\"a\": 1}", "write", keep_mode=True)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o777
    assert target.read_bytes() == b"{\"a\": 1}"
    assert sorted(os.listdir(target.parent)) == ["daemon.json"]  # no temporary file left
    link = tmp_path / "etc" / "link.json"
    link.symlink_to(tmp_path / "victim")
    trusted.write_atomic(str(link), b"x", "write")  # the link is replaced, never followed
    assert link.is_file() and not link.is_symlink() and not (tmp_path / "victim").exists()


def test_write_atomic_refuses_a_user_directory(tmp_path: Path) -> None:
    with pytest.raises(TrustError, match="owned by uid 64123"):
        trusted.write_atomic(str(user_dir(tmp_path / "u") / "out.yaml"), b"x", "write CDI spec")
    assert os.listdir(tmp_path / "u") == []


def test_check_tree_finds_a_user_file_deep_inside(tmp_path: Path) -> None:
    pkg = tmp_path / "site" / "nvhook" / "sub"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text("")
    assert trusted.check_tree(str(tmp_path / "site" / "nvhook"), "import path") == 2
    os.chown(pkg / "mod.py", USER, USER)
    with pytest.raises(TrustError, match=f"{pkg}/mod.py: owned by uid 64123"):
        trusted.check_tree(str(tmp_path / "site" / "nvhook"), "import path")
    os.chown(pkg / "mod.py", 0, 0)
    (pkg / "evil.py").symlink_to("/tmp")
    with pytest.raises(TrustError, match="a symlink inside code root runs"):
        trusted.check_tree(str(tmp_path / "site" / "nvhook"), "import path")
