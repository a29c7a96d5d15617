"""Mount primitives on file descriptors (apply stage; changes mounts).

Sources are cloned on the HOST side, before entering the container's mount namespace
(`clone_source`: open_tree(OPEN_TREE_CLONE|AT_SYMLINK_NOFOLLOW) of the host path, fstat type
check of the clone, then flags and private propagation in one mount_setattr). Inside the
container namespace the detached clone is attached onto a target fd from `rootfs.Root` with
move_mount (never following a symlink at the target). Tree fds are owned by the caller (close
them; keep them open until the plan succeeded if you want `detach` for rollback).
"""

from __future__ import annotations

import errno
import os
import stat

from nvmount import _libc  # ctypes: the hook has loaded it before any mount
from nvmount.errors import MountError, strerror
from nvmount.log import get_logger

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc
    from nvmount.fs.paths import SourceKind
    from nvmount.fs.procfs import ProcFs
    from nvmount.plan.types import MountFlag

log = get_logger(__name__)

MS_SHARED = 1 << 20


def check_source_mode(
    mode: int, st_rdev: int, kind: SourceKind, rdev: tuple[int, int] | None
) -> str | None:
    """Why a source of file mode `mode` cannot serve as `kind`, or None if it can (pure)."""
    from nvmount.fs.paths import SourceKind

    wanted = {
        SourceKind.FILE: stat.S_ISREG,
        SourceKind.DIRECTORY: stat.S_ISDIR,
        SourceKind.DEVICE: stat.S_ISCHR,
        SourceKind.SOCKET: stat.S_ISSOCK,
    }[kind]
    if not wanted(mode):
        return f"unexpected source file mode {mode:o} (expected a {kind.value})"
    if kind is SourceKind.DEVICE and rdev is not None:
        have = (os.major(st_rdev), os.minor(st_rdev))
        if have != tuple(rdev):
            return f"invalid device node: is {have[0]}:{have[1]}, expected {rdev[0]}:{rdev[1]}"
    return None


def mount_attrs(flags: MountFlag) -> int:
    """MOUNT_ATTR_* bits for our flags (pure)."""
    from nvmount.plan.types import MountFlag

    attrs = 0
    for flag, attr in ((MountFlag.RDONLY, _libc.MOUNT_ATTR_RDONLY),
                       (MountFlag.NOSUID, _libc.MOUNT_ATTR_NOSUID),
                       (MountFlag.NODEV, _libc.MOUNT_ATTR_NODEV),
                       (MountFlag.NOEXEC, _libc.MOUNT_ATTR_NOEXEC)):
        if int(flags) & int(flag):
            attrs |= attr
    return attrs


def clone_source(
    host_path: str, kind: SourceKind, rdev: tuple[int, int] | None, libc: Libc,
    flags: MountFlag | None = None,
) -> int:
    """A detached, private, non-recursive clone of host `host_path`; returns the tree fd.

    Checks the clone's type against `kind` (regular file, directory, char device whose
    st_rdev equals `rdev`, socket); a symlink (never followed: AT_SYMLINK_NOFOLLOW) or
    anything else is refused with MountError "unexpected source file mode". `flags`
    (RDONLY, NOSUID, ...) are set with the private propagation, in the same mount_setattr.
    Three syscalls: open_tree, fstat, mount_setattr. Run before setns (host paths).
    """
    try:
        tree = libc.open_tree(_libc.AT_FDCWD, host_path, _libc.OPEN_TREE_CLONE
                              | _libc.OPEN_TREE_CLOEXEC | _libc.AT_SYMLINK_NOFOLLOW)
    except OSError as err:
        raise MountError("open source", host_path, strerror(err)) from err
    try:
        st = os.fstat(tree)
        why = check_source_mode(st.st_mode, st.st_rdev, kind, rdev)
        if why is not None:
            raise MountError("check source", host_path, why, hint="fix the driver root")
    except OSError as err:
        os.close(tree)
        raise MountError("clone source", host_path, strerror(err)) from err
    except BaseException:
        os.close(tree)
        raise
    attrs = 0 if flags is None else mount_attrs(flags)
    return _private(tree, libc, f"clone of {host_path}", attrs)


def apply_flags(tree_fd: int, flags: MountFlag, libc: Libc, *, what: str = "") -> None:
    """Set RDONLY/NOSUID/NODEV/NOEXEC on the mount `tree_fd` (mount_setattr).

    Only sets: flags the source mount already has (e.g. nosuid) are kept.
    """
    attrs = mount_attrs(flags)
    if not attrs:
        return
    try:
        libc.mount_setattr(tree_fd, "", _libc.AT_EMPTY_PATH, attrs)
    except OSError as err:
        raise MountError("set mount flags on", what, strerror(err),
                         flags=flags.names()) from err


def attach(tree_fd: int, target_fd: int, libc: Libc, *, what: str = "",
           procfs: ProcFs | None = None, host_peers: frozenset[int] = frozenset()) -> None:
    """move_mount the detached tree onto the verified target fd (F_EMPTY_PATH|T_EMPTY_PATH).

    Never MOVE_MOUNT_T_SYMLINKS. After the attach the mount is made private again: a mount
    attached under a shared parent joins the parent's peer group (and a copy appears at the
    peers - this cannot be prevented without changing the parent, so with `procfs` given it
    is logged as a warning); making ours private stops anything mounted beneath it, and its
    unmount, from propagating. A target on a mount whose peer group is one of `host_peers`
    (the peer groups of the hook's own namespace, `peer_groups` read before setns) is
    refused: the copy would appear on the host (an image linking a lib dir into an rshared
    volume, T-LEAK). `tree_fd` then refers to the attached mount. `what` (a container path)
    names the target in errors.
    """
    groups = shared_groups(target_fd, procfs, libc) if procfs is not None else frozenset()
    if groups & host_peers:
        raise MountError(
            "attach mount at", what, "the target is on a mount shared with the host (peer "
            f"group {min(groups & host_peers)}); the mount would propagate out of the container",
            hint="do not mount a shared volume where driver files go")
    if groups:
        log.warning("%s is on a shared mount: the mount propagates to its peers", what)
    flags = _libc.MOVE_MOUNT_F_EMPTY_PATH | _libc.MOVE_MOUNT_T_EMPTY_PATH
    try:
        libc.move_mount(tree_fd, "", target_fd, "", flags)
    except OSError as err:
        raise MountError("attach mount at", what, strerror(err)) from err
    try:
        libc.mount_setattr(tree_fd, "", _libc.AT_EMPTY_PATH, 0, 0, _libc.MS_PRIVATE)
    except OSError as err:
        raise MountError("make private the mount at", what, strerror(err)) from err


def make_tmpfs(mode: int, flags: MountFlag, libc: Libc, *, what: str = "tmpfs") -> int:
    """A new detached, private tmpfs (fsopen/fsconfig mode=/fsmount) with `flags`; its fd."""
    try:
        fs = libc.fsopen("tmpfs")
    except OSError as err:
        raise MountError("create", what, strerror(err)) from err
    try:
        libc.fsconfig(fs, _libc.FSCONFIG_SET_STRING, "mode", f"{mode:o}")
        libc.fsconfig(fs, _libc.FSCONFIG_CMD_CREATE, None, None)
        tree = libc.fsmount(fs, _libc.FSMOUNT_CLOEXEC, mount_attrs(flags))
    except OSError as err:
        raise MountError("create", what, strerror(err)) from err
    finally:
        os.close(fs)
    return _private(tree, libc, what)


def detach(mount_fd: int, libc: Libc, procfs: ProcFs, *, mnt_id: int | None = None,
           what: str = "") -> None:
    """Lazily unmount (MNT_DETACH) the mount whose root `mount_fd` is (rollback).

    `mount_fd` is the tree fd after `attach` (or an O_PATH fd on the mounted target). If
    `mnt_id` is given, the fd's mount id must equal it, else MountError and nothing is
    unmounted. The unmount goes through the procfs handle's magic link for the fd (cwd
    switched to the handle for the call), never through a path in the container.
    """
    try:
        have = mount_identity(mount_fd, procfs, libc)
        if mnt_id is not None and have != mnt_id:
            raise MountError("unmount", what, f"mount id {have} is not ours ({mnt_id})",
                             hint="left in place")
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fchdir(procfs.fd)
            libc.umount2(f"thread-self/fd/{mount_fd}", _libc.MNT_DETACH)
        finally:
            os.fchdir(cwd)
            os.close(cwd)
    except OSError as err:
        raise MountError("unmount", what, strerror(err)) from err
    log.debug("unmounted %s (mount id %d)", what, have)


def mount_identity(fd: int, procfs: ProcFs, libc: Libc) -> int:
    """An id of the mount `fd` is on, stable while it is mounted: statx's unique mount id
    (one syscall), else the fdinfo `mnt_id` (three). Record and check with this same call."""
    try:
        unique = libc.mount_id_unique(fd)
    except OSError:
        unique = None
    return procfs.mount_id(fd) if unique is None else unique


def mount_id(fd: int, procfs: ProcFs) -> int:
    """The mount id of the mount `fd` is on."""
    return procfs.mount_id(fd)


def mountinfo_line(mnt_id: int, procfs: ProcFs) -> str | None:
    """The line of our mount namespace's mountinfo for mount `mnt_id`, if any."""
    for line in procfs.read("thread-self/mountinfo").splitlines():
        if line.split(" ", 1)[0] == str(mnt_id):
            return line
    return None


def is_shared(fd: int, procfs: ProcFs, libc: Libc | None = None) -> bool:
    """Whether the mount `fd` is on has shared propagation (a `shared:N` tag)."""
    return bool(shared_groups(fd, procfs, libc))


def shared_groups(fd: int, procfs: ProcFs, libc: Libc | None = None) -> frozenset[int]:
    """The peer group of the mount `fd` is on ({N} of a `shared:N` tag; empty if private).

    With `libc`, the kernel is asked for that one mount (statx + statmount, Linux 6.8: ~6 us)
    instead of reading the whole mountinfo, whose cost grows with the namespace's mounts
    (~50 us with 20 mounts, ~1.4 ms with 1000) and is paid once per attach. Where those
    calls are missing or refused, mountinfo is read: the answer is the same either way.
    """
    if libc is not None:
        groups = _statmount_groups(fd, libc)
        if groups is not None:
            return groups
    line = mountinfo_line(procfs.mount_id(fd), procfs)
    return frozenset() if line is None else _shared_tags(line)


def _statmount_groups(fd: int, libc: Libc) -> frozenset[int] | None:
    """`shared_groups` from statmount; None when the kernel cannot answer (read mountinfo)."""
    try:
        mnt_id = libc.mount_id_unique(fd)
        if mnt_id is None:
            return None
        propagation, peer_group = libc.mount_propagation(mnt_id)
    except OSError as err:
        if err.errno == errno.ENOENT:  # not in this namespace: mountinfo does not list it
            return frozenset()
        return None  # ENOSYS (before 6.8), EPERM (seccomp), ...
    return frozenset((peer_group,)) if propagation & MS_SHARED else frozenset()


def peer_groups(procfs: ProcFs) -> frozenset[int]:
    """Every peer group of the current mount namespace (call it before setns: the host's).

    A scan for `shared:N` tags, not a parse of every line (a host with 1000 mounts has 150 KB
    of mountinfo); a tag-like string in a source or option only adds a group to refuse."""
    text = procfs.read("thread-self/mountinfo")
    groups: set[int] = set()
    at = text.find("shared:")
    while at >= 0:
        end = at + 7
        while end < len(text) and text[end].isdigit():
            end += 1
        if at + 7 < end <= at + 17:  # a peer group id fits 10 digits; skip anything else
            groups.add(int(text[at + 7:end]))
        at = text.find("shared:", end)
    return frozenset(groups)


def _shared_tags(line: str) -> frozenset[int]:
    optional = line.split(" - ", 1)[0].split()[6:]
    return frozenset(int(t[7:]) for t in optional if t.startswith("shared:") and t[7:].isdigit())


def _private(tree: int, libc: Libc, label: str, attrs: int = 0) -> int:
    """Make the detached mount `tree` private (no propagation) and set `attrs` (MOUNT_ATTR_*)
    in one call; closes it on failure."""
    try:
        libc.mount_setattr(tree, "", _libc.AT_EMPTY_PATH, attrs, 0, _libc.MS_PRIVATE)
    except OSError as err:
        os.close(tree)
        raise MountError("make private" if not attrs else "set mount flags on", label,
                         strerror(err)) from err
    return tree
