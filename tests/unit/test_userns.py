"""User namespaces (issue 28; NVIDIA's #580, #648, #1971): the container taken from the state,
and entries created where host root has no id (an id-mapped rootfs: Podman's --userns=auto,
crun's intermediate mount point), owned by the container's root."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nvhook.errors import SpecError
from nvhook.hook import oci
from nvhook.hook.locate import bundle_spec_path, container_rootfs, no_bundle
from nvmount._libc import Libc
from nvmount.container.open import container_root_ids, map_to_host
from nvmount.fs.owner import create_as_owner
from tests.fixtures.privns import in_private_ns, sleeper

pytestmark = pytest.mark.userns

MAPPED = 300000  # the container's root on the host in the id-mapped tests


def _state(text: str) -> oci.State:
    return oci.load_state(text.encode())


@pytest.mark.parametrize(("doc", "root"), [
    ('{"pid": 1, "bundle": "/b", "root": "/var/tmp/intermediate-mountpoint-0.0"}',
     "/var/tmp/intermediate-mountpoint-0.0"),                      # crun's hook state
    ('{"pid": 1, "bundle": "/b", "rootfs": "/b/rootfs"}', "/b/rootfs"),  # `runc state`
    ('{"pid": 1, "bundle": "/b", "root": "/a", "rootfs": "/r"}', "/a"),
    ('{"pid": 1, "bundle": "/b", "root": {"path": "/x"}}', ""),      # not a string: unknown
    ('{"pid": 1, "bundle": "/b", "rootfs": "rootfs"}', ""),          # relative: not used
    ('{"pid": 1, "bundle": "/b", "root": "/a\\u0000b"}', ""),
    ('{"pid": 1, "bundle": "/b"}', ""),
], ids=["crun-root", "runc-state-rootfs", "root-first", "object", "relative", "nul", "none"])
def test_state_names_the_rootfs(doc: str, root: str) -> None:
    assert _state(doc).root == root


def _spec(root_path: str, path: str = "/b/config.json") -> oci.Spec:
    return oci.Spec(path, "1.0.2", (), None, root_path, ())


@pytest.mark.parametrize(("state", "root_path", "cwd", "want", "note"), [
    (oci.State(1, "/b", "/var/tmp/im-0.0"), "rootfs", "/b", "/var/tmp/im-0.0", ""),
    (oci.State(1, "/b"), "/abs/r", "/elsewhere", "/abs/r", ""),
    (oci.State(1, "/b"), "rootfs", "/b", "/b/rootfs", ""),
    (oci.State(1, "/b"), "rootfs", "/home/me", "/b/rootfs", "relative to the bundle /b"),
    (oci.State(1, "/b"), "../r", None, "/r", ""),
], ids=["state-root-wins", "absolute", "cwd-is-bundle", "by-hand-elsewhere", "no-cwd"])
def test_container_rootfs(state: oci.State, root_path: str, cwd: str | None, want: str,
                          note: str) -> None:
    rootfs, said = container_rootfs(state, _spec(root_path), cwd)
    assert rootfs == want
    assert (note in said) if note else said == ""
    if note:
        assert "/home/me" in said and "'rootfs'" in said  # what, relative to what, not what


def test_relative_bundle_and_root_path_by_hand(tmp_path: Path) -> None:
    """`runc state ID | nvhook prestart` from another directory: runc's state names an
    absolute bundle and rootfs; the config.json's relative root.path is not the cwd's."""
    state = _state('{"pid": 1, "bundle": "/run/x", "rootfs": "/run/x/rootfs"}')
    assert container_rootfs(state, _spec("rootfs", "/run/x/config.json"), "/tmp") == (
        "/run/x/rootfs", "")
    assert bundle_spec_path(state, "/tmp") == "/run/x/config.json"


@pytest.mark.parametrize("bundle", ["/", "//", "/."])
def test_a_slash_bundle_is_no_bundle(bundle: str) -> None:
    state = oci.State(1, bundle, "/var/tmp/intermediate-mountpoint-0.0")
    assert no_bundle(bundle)
    with pytest.raises(SpecError, match=r'bundle is "/" \(the state names the rootfs /var/tmp/'):
        bundle_spec_path(state, "/")
    assert not no_bundle("") and not no_bundle("/b")


def test_cdi_hook_takes_the_state_root_without_config_json() -> None:
    """NVIDIA's #1971: nvidia-cdi-hook finds the rootfs in crun's `root` with a "/" bundle."""
    from nvhook.compat.cdihook.target import state_root

    state = oci.State(1, "/", "/var/tmp/intermediate-mountpoint-0.0/")
    assert state_root(state, "/") == ("/var/tmp/intermediate-mountpoint-0.0", None)


CRUN = ["/usr/bin/crun", "--log-format=json", "create", "--bundle", "/var/lib/c/u", "ID"]


@pytest.mark.parametrize(("cid", "argvs", "euid", "want"), [
    ("e19116", [], 0, ["/run/crun/e19116/config.json"]),
    ("e19116", [], 1000, ["/run/user/1000/crun/e19116/config.json"]),  # rootless
    ("e19116", [["sh", "front"], CRUN], 0, ["/var/lib/c/u/config.json",
                                             "/run/crun/e19116/config.json"]),
    ("e19116", [["crun", "--root=/tmp/r", "create", "-b", "/b", "x"]], 0,
     ["/b/config.json", "/tmp/r/e19116/config.json", "/run/crun/e19116/config.json"]),
    ("e19116", [["crun", "create", "--bundle", "rel"]], 0, ["/run/crun/e19116/config.json"]),
    ("../../etc", [], 0, []), ("a/b", [], 0, []), ("..", [], 0, []), ("", [CRUN], 0,
                                                                        ["/var/lib/c/u/config.json"]),
    ("x" * 1025, [], 0, []),
], ids=["root", "rootless", "parent-bundle", "root-flag", "relative-bundle", "dotdot", "slash",
        "parent", "no-id", "long"])
def test_runtime_spec_candidates(cid: str, argvs: list[list[str]], euid: int,
                                 want: list[str]) -> None:
    """A "/" bundle (crun 1.28 under Podman --userns=auto/nomap with a CDI device): the
    runtime's --bundle, crun's own copy by a container id that cannot leave its state dir."""
    from nvhook.hook.locate import runtime_spec_candidates

    assert runtime_spec_candidates(oci.State(1, "/", "/var/tmp/im", cid), argvs, euid) == want


def test_a_copy_found_by_id_must_name_the_states_rootfs() -> None:
    from nvhook.hook.locate import check_spec_root

    state = oci.State(1, "/", "/var/tmp/intermediate-mountpoint-0.0", "abc")
    check_spec_root(state, _spec("/var/tmp/intermediate-mountpoint-0.0/", "/run/crun/abc/c"))
    with pytest.raises(SpecError, match="not this container's"):
        check_spec_root(state, _spec("/var/lib/other/merged", "/run/crun/abc/config.json"))


@pytest.mark.parametrize(("inside", "id_map", "want"), [
    (0, ((0, 300000, 1024),), 300000),
    (1000, ((0, 300000, 1024),), 301000),
    (0, ((1, 100000, 65536), (0, 1000, 1)), 1000),  # rootless: the user is the container's root
    (0, ((1, 100000, 65536),), None),                # --userns=nomap-like: no root mapped
    (0, (), None),
])
def test_map_to_host(inside: int, id_map: tuple[tuple[int, int, int], ...],
                     want: int | None) -> None:
    assert map_to_host(inside, id_map) == want


def test_owner_is_the_containers_root_not_its_user() -> None:
    """A process running as `--user 1000` still gets links and caches owned by its root."""
    owner = os.stat_result((0o40555, 0, 0, 1, 301000, 301000, 0, 0, 0, 0))
    assert container_root_ids(((0, 300000, 65536),), ((0, 400000, 65536),), owner) == (
        300000, 400000)
    assert container_root_ids(((1, 300000, 10),), (), owner) == (301000, 301000)


# -- an id-mapped mount (root, a private mount namespace) -------------------------------------
def _idmapped(lower: str, upper: str, userns_pid: int) -> None:
    from nvmount import _libc

    libc = Libc()
    libc.mount("tmpfs", lower, "tmpfs", 0, "mode=0755")
    for sub in ("etc", "dev", "usr/lib"):
        os.makedirs(os.path.join(lower, sub))
    tree = libc.open_tree(_libc.AT_FDCWD, lower, _libc.OPEN_TREE_CLONE | _libc.OPEN_TREE_CLOEXEC)
    ns = os.open(f"/proc/{userns_pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc.mount_setattr(tree, "", _libc.AT_EMPTY_PATH, _libc.MOUNT_ATTR_IDMAP, userns_fd=ns)
        libc.move_mount(tree, "", _libc.AT_FDCWD, upper, _libc.MOVE_MOUNT_F_EMPTY_PATH)
    finally:
        os.close(ns)
        os.close(tree)


def _create_in_idmapped(tmp: str, pid: int, owner: tuple[int, int]) -> dict[str, object]:
    from nvmount.fs.paths import SourceKind
    from nvmount.fs.rootfs import Root

    lower, upper = f"{tmp}/lower", f"{tmp}/upper"
    _idmapped(lower, upper, pid)
    libc = Libc()
    out: dict[str, object] = {}
    try:
        os.mkdir(f"{upper}/x")
    except OSError as err:
        out["root_mkdir"] = err.errno  # host root has no id on this mount
    with Root.open(upper, libc) as root:
        fd, _ = root.ensure_mountpoint("/dev/nvidiactl", SourceKind.DEVICE, *owner)
        os.close(fd)
        fd, _ = root.ensure_dir("/proc/driver/nvidia", 0o555, *owner)
        os.close(fd)
        root.symlink("/usr/lib/libcuda.so.1", "libcuda.so.550", *owner)
    etc = os.open(f"{upper}/etc", os.O_PATH | os.O_CLOEXEC)
    fd = create_as_owner(libc, owner, lambda: os.open(
        "cache", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=etc), owner_first=True)
    os.close(fd)
    os.close(etc)
    ids = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    out["fsuid_after"] = (int(ids["Uid"].split()[3]), int(ids["Gid"].split()[3]))
    for name in ("dev/nvidiactl", "proc/driver/nvidia", "proc", "usr/lib/libcuda.so.1",
                 "etc/cache"):
        seen, disk = os.lstat(f"{upper}/{name}"), os.lstat(f"{lower}/{name}")
        out[name] = ((seen.st_uid, seen.st_gid), (disk.st_uid, disk.st_gid),
                     stat.S_IMODE(disk.st_mode))
    return out


@pytest.mark.root
def test_entries_in_an_idmapped_rootfs_belong_to_the_container(tmp_path: Path) -> None:
    """Host root creating in an id-mapped rootfs gets EOVERFLOW (the bug: "create mount point
    /dev/nvidiactl in rootfs /var/tmp/intermediate-mountpoint-0.0: value too large for
    defined data type"); the engine creates as the container's root instead: the entries are
    its (0 on disk, MAPPED through the mount), with the modes asked for."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    (tmp_path / "lower").mkdir()
    (tmp_path / "upper").mkdir()
    with sleeper("--user") as pid:
        for name in ("uid_map", "gid_map"):  # host root maps any range (no newuidmap policy)
            Path(f"/proc/{pid}/{name}").write_text(f"0 {MAPPED} 65536\n")
        out = in_private_ns(_create_in_idmapped, str(tmp_path), pid, (MAPPED, MAPPED))
    assert out.pop("root_mkdir") == 75  # EOVERFLOW
    assert out.pop("fsuid_after") == (0, 0)
    want_mode = {"dev/nvidiactl": 0o644, "proc/driver/nvidia": 0o555, "proc": 0o555,
                 "usr/lib/libcuda.so.1": 0o777, "etc/cache": 0o644}
    for name, (seen, disk, mode) in out.items():
        assert (seen, disk, mode) == ((MAPPED, MAPPED), (0, 0), want_mode[name]), name


@pytest.mark.root
def test_a_config_is_not_inside_a_slash_starting_directory(tmp_path: Path) -> None:
    """crun starts a "/" bundle's hooks in "/": every path is under it, none is the bundle."""
    from nvhook.config.load import untrusted_reason

    if os.geteuid() != 0:
        pytest.skip("needs root (the starting-directory rule is root's)")
    os.chmod(tmp_path, 0o755)
    config = tmp_path / "config.toml"
    config.write_text("")
    assert untrusted_reason(str(config), "/") is None
    assert "starting directory" in (untrusted_reason(str(config), str(tmp_path)) or "")
