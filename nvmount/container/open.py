"""The target container, read from procfs and its rootfs (read stage; changes nothing).

`open_container` holds the container's init with a pidfd, opens `/proc/<pid>` and its
`ns/mnt` relative to each other, verifies the pid was not reused, refuses a target whose
mount namespace is our own, and detects the rootfs layout (libnvc-spec §2.2) through
`/proc/<pid>/root/<rootfs>` (the container namespace's view). `ContainerHandle` owns the
fds; `record()` gives the plain `Container` record for the planner.
"""

from __future__ import annotations

import errno
import os
import posixpath

from nvmount.errors import ContainerError, strerror
from nvmount.fds import FdOwner
from nvmount.log import get_logger
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc
    from nvmount.container.cgroup import CgroupTarget
    from nvmount.plan.types import ContainerLayout

log = get_logger(__name__)

IDENTITY_UID_MAP = ((0, 0, 4294967295),)


@record
class Container:
    """The container as the engine found it from its pid."""

    pid: int
    rootfs: str  # host path of the rootfs as given (absolute, lexically clean)
    uid: int  # owner of /proc/<pid> (the container's root on the host)
    gid: int
    mntns: tuple[int, int]  # (st_dev, st_ino) of /proc/<pid>/ns/mnt
    cgroup: CgroupTarget | None  # None when cgroups are not to be touched
    in_userns: bool
    layout: ContainerLayout


class ContainerHandle(FdOwner):
    """An opened target container; a context manager owning pidfd, /proc/<pid> fd and mntns fd."""

    FD_ATTRS = ("mntns_fd", "proc_fd", "pidfd")

    def __init__(
        self,
        *,
        pid: int,
        pidfd: int,
        proc_fd: int,
        mntns_fd: int,
        mntns: tuple[int, int],
        uid: int,
        gid: int,
        in_userns: bool,
        cgroup: CgroupTarget | None,
        rootfs: str,
        layout: ContainerLayout,
        libc: Libc,
        ns_rootfs: str = "",
        hook_in_userns: bool = False,
    ) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.proc_fd = proc_fd  # O_PATH fd on /proc/<pid>
        self.mntns_fd = mntns_fd  # O_RDONLY fd on /proc/<pid>/ns/mnt (for setns)
        self.mntns = mntns
        self.uid = uid
        self.gid = gid
        self.in_userns = in_userns
        # the hook itself runs in a user namespace (a rootless engine's): no device cgroup
        self.hook_in_userns = hook_in_userns
        self.cgroup = cgroup
        self.rootfs = rootfs
        # the rootfs as seen inside the container's mount namespace: `rootfs` before runc's
        # pivot_root (a prestart hook), "/" after it (a created or paused container)
        self.ns_rootfs = ns_rootfs or rootfs
        self.layout = layout
        self._libc = libc

    def check_alive(self) -> None:
        """ContainerError if the container's init has exited (signal 0 through the pidfd)."""
        _check_alive(self.pidfd, self.pid, self._libc)

    def record(self) -> Container:
        """The plain record of this container for the planner."""
        return Container(
            pid=self.pid,
            rootfs=self.rootfs,
            uid=self.uid,
            gid=self.gid,
            mntns=self.mntns,
            cgroup=self.cgroup,
            in_userns=self.in_userns,
            layout=self.layout,
        )



def open_container(
    pid: int,
    rootfs: str,
    *,
    proc_root: str = "/proc",
    no_cgroups: bool,
    libc: Libc,
) -> ContainerHandle:
    """Open and verify the container whose init is `pid` and whose rootfs is `rootfs`.

    `proc_root` must be the real procfs of the host pid namespace (not a simulated one).
    Order: pidfd_open(pid); open /proc/<pid> (must be procfs); signal 0 through the pidfd
    (the process we hold is still the one /proc/<pid> names: no pid reuse); ns/mnt relative
    to that fd, refused when it is our own namespace; owner, uid_map, cgroup; layout through
    /proc/<pid>/root/<rootfs>; a last liveness check. Raises ContainerError (PathError from
    the layout).
    """
    check_rootfs_path(rootfs)
    if pid <= 0:
        raise ContainerError(f"open container pid {pid}: not a valid pid (check the OCI state)")
    pidfd, proc_fd = _open_process(pid, proc_root, libc)
    mntns_fd = -1
    try:
        mntns_fd, mntns = _open_mntns(pid, proc_fd, proc_root)
        in_userns = _other_userns(pid, proc_fd, proc_root)
        uid, gid = (0, 0) if not in_userns else container_root_ids(
            parse_id_map(_read_at(proc_fd, "uid_map", pid)),
            parse_id_map(_read_at(proc_fd, "gid_map", pid)), os.fstat(proc_fd))
        hook_in_userns = _hook_in_userns(proc_root)
        cgroup = None if no_cgroups or hook_in_userns else _find_cgroup(pid, proc_root)
        ns_rootfs = rootfs_in_namespace(proc_fd, rootfs)
        layout = _layout_via_proc(proc_fd, ns_rootfs, libc)
        _check_alive(pidfd, pid, libc)
    except BaseException:
        for fd in (mntns_fd, proc_fd, pidfd):
            if fd >= 0:
                os.close(fd)
        raise
    if hook_in_userns:
        log.info("the hook runs in a user namespace: the device cgroup of pid %d is left alone",
                 pid)
    return ContainerHandle(
        pid=pid, pidfd=pidfd, proc_fd=proc_fd, mntns_fd=mntns_fd, mntns=mntns,
        uid=uid, gid=gid, in_userns=in_userns, cgroup=cgroup,
        rootfs=rootfs, layout=layout, libc=libc, ns_rootfs=ns_rootfs,
        hook_in_userns=hook_in_userns,
    )


def check_rootfs_path(rootfs: str) -> None:
    """ContainerError unless `rootfs` is absolute, lexically clean and not "/" (pure)."""
    if not rootfs.startswith("/") or posixpath.normpath(rootfs) != rootfs or rootfs == "/":
        raise ContainerError(
            f"check rootfs {rootfs!r}: must be an absolute, clean path other than / "
            "(no '..', '.', '//' or trailing '/')"
        )
    if rootfs.startswith("//"):
        raise ContainerError(f"check rootfs {rootfs!r}: must not start with '//'")


def _open_process(pid: int, proc_root: str, libc: Libc) -> tuple[int, int]:
    """(pidfd, O_PATH fd on /proc/<pid>), verified to be the same live process."""
    from nvmount import _libc

    try:
        pidfd = os.pidfd_open(pid)
    except OSError as err:
        cause = "no such process" if err.errno == errno.ESRCH else strerror(err)
        raise ContainerError(
            f"open container pid {pid}: {cause} (did the container exit?)"
        ) from err
    try:
        proc_fd = os.open(f"{proc_root}/{pid}", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        os.close(pidfd)
        raise ContainerError(
            f"open {proc_root}/{pid}: {strerror(err)} ({_open_hint(err, pid)})"
        ) from err
    try:
        if libc.fstatfs_type(proc_fd) != _libc.PROC_SUPER_MAGIC:
            raise ContainerError(
                f"open {proc_root}/{pid}: not on procfs (proc root must be the real /proc)"
            )
        _check_alive(pidfd, pid, libc)
    except BaseException:
        os.close(proc_fd)
        os.close(pidfd)
        raise
    return pidfd, proc_fd


def _open_hint(err: OSError, pid: int) -> str:
    """What to do about a failed open under /proc/<pid>: gone, or not ours to open."""
    if err.errno in (errno.EACCES, errno.EPERM):
        return (f"the hook needs host root with CAP_SYS_PTRACE; is pid {pid} the container's "
                "init process?")
    return "did the container exit?"


def _check_alive(pidfd: int, pid: int, libc: Libc) -> None:
    """A pidfd polls readable once its process exited (zombies too); signal 0 double-checks."""
    import select

    poll = select.poll()
    poll.register(pidfd, select.POLLIN)
    try:
        if poll.poll(0):
            raise OSError(errno.ESRCH, os.strerror(errno.ESRCH))
        libc.pidfd_send_signal(pidfd, 0)
    except PermissionError:  # alive, owned by another (mapped) uid and no CAP_KILL: fine
        return
    except OSError as err:
        raise ContainerError(
            f"check container pid {pid}: {strerror(err)} (the process exited; its pid may "
            "have been reused)"
        ) from err


def _open_mntns(pid: int, proc_fd: int, proc_root: str) -> tuple[int, tuple[int, int]]:
    """The container's ns/mnt fd (for setns) and its (st_dev, st_ino); never our own."""
    try:
        fd = os.open("ns/mnt", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    except OSError as err:
        raise ContainerError(
            f"open {proc_root}/{pid}/ns/mnt: {strerror(err)} ({_open_hint(err, pid)})"
        ) from err
    try:
        st = os.fstat(fd)
        own = os.stat(f"{proc_root}/self/ns/mnt")
    except OSError as err:
        os.close(fd)
        raise ContainerError(f"stat mount namespaces: {strerror(err)}") from err
    if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
        os.close(fd)
        raise ContainerError(
            f"open container pid {pid}: its mount namespace is the hook's own "
            f"(mnt:[{st.st_ino}]); refusing to mount into the host (state.pid must be the "
            "container's init, in its own mount namespace)"
        )
    return fd, (st.st_dev, st.st_ino)


def _read_at(dir_fd: int, name: str, pid: int) -> str:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            return os.read(fd, 65536).decode("ascii", "replace")
        finally:
            os.close(fd)
    except OSError as err:
        raise ContainerError(
            f"read /proc/{pid}/{name}: {strerror(err)} (did the container exit?)"
        ) from err


def _other_userns(pid: int, proc_fd: int, proc_root: str) -> bool:
    """Whether the container's user namespace is not the hook's own. Its uid_map, read from
    another namespace, then maps its ids to ours (from inside, it would map them to the
    parent's: a rootless engine's hook shares the container's namespace, where its root is 0)."""
    try:
        theirs, ours = os.stat("ns/user", dir_fd=proc_fd), os.stat(f"{proc_root}/self/ns/user")
    except OSError as err:
        raise ContainerError(
            f"stat /proc/{pid}/ns/user: {strerror(err)} (did the container exit?)") from err
    return (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino)


def _hook_in_userns(proc_root: str) -> bool:
    """Whether this process runs in a user namespace other than the initial one (a rootless
    engine's hook): it cannot load a device BPF program nor write a v1 devices cgroup. A
    container's own user namespace does not matter: host root limits its devices."""
    try:
        with open(f"{proc_root}/self/uid_map", "rb") as stream:
            text = stream.read(65536).decode("ascii", "replace")
    except OSError as err:
        raise ContainerError(f"read {proc_root}/self/uid_map: {strerror(err)}") from err
    return parse_id_map(text) != IDENTITY_UID_MAP


def _find_cgroup(pid: int, proc_root: str) -> CgroupTarget | None:
    from nvmount.container.cgroup import find_cgroup

    return find_cgroup(pid, proc_root)


def rootfs_in_namespace(proc_fd: int, rootfs: str) -> str:
    """Where the rootfs is inside the container's mount namespace: "/" when the container's
    root already is the rootfs (runc pivoted: a created or paused container), else `rootfs`
    (a prestart hook runs before pivot_root)."""
    try:
        inside = os.stat("root/", dir_fd=proc_fd)  # the trailing slash follows the magic link
        host = os.stat(rootfs, follow_symlinks=False)
    except OSError:
        return rootfs
    return "/" if (inside.st_dev, inside.st_ino) == (host.st_dev, host.st_ino) else rootfs


def _layout_via_proc(proc_fd: int, ns_rootfs: str, libc: Libc) -> ContainerLayout:
    """Detect the layout through /proc/<pid>/root<rootfs>: the container namespace's view."""
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

    path = "root/" if ns_rootfs == "/" else "root" + ns_rootfs
    from nvmount.container.layout import detect_layout

    with ProcFs.open(libc, private=False) as procfs, Root.open(
        path, libc, dir_fd=proc_fd, procfs=procfs, ns_root=ns_rootfs == "/"
    ) as root:
        return detect_layout(root)


# -- pure decisions -----------------------------------------------------------------------
def map_to_host(inside: int, id_map: tuple[tuple[int, int, int], ...]) -> int | None:
    """The host id of id `inside` of a user namespace with `id_map` (uid_map's triples),
    None when the namespace does not map it."""
    for first, outside, count in id_map:
        if first <= inside < first + count:
            return outside + inside - first
    return None


def container_root_ids(uid_map: tuple[tuple[int, int, int], ...],
                       gid_map: tuple[tuple[int, int, int], ...],
                       proc_owner: os.stat_result) -> tuple[int, int]:
    """Who owns what the engine creates in a container of a user namespace: its root as the
    host sees it (uid_map's and gid_map's id 0), whatever user its process runs as (`--user
    1000`); where the namespace maps no root (an unusual map), the owner of /proc/<pid>."""
    uid, gid = map_to_host(0, uid_map), map_to_host(0, gid_map)
    return (proc_owner.st_uid if uid is None else uid,
            proc_owner.st_gid if gid is None else gid)


def parse_id_map(text: str) -> tuple[tuple[int, int, int], ...]:
    """Parse /proc/<pid>/uid_map text into (inside, outside, count) triples."""
    triples = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 3 or not all(f.isdigit() for f in fields):
            raise ContainerError(f"parse uid_map line {line!r}: expected three numbers")
        triples.append((int(fields[0]), int(fields[1]), int(fields[2])))
    return tuple(triples)
