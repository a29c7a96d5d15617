"""Which container a CDI hook works on, and where: its rootfs opened in the right mount
namespace (a `nvmount.fs.rootfs.Root`). Stage: read (changes nothing).

NVIDIA's specs run their hooks at `createContainer`: the runtime starts them from the
container's init, inside the container's mount namespace (before pivot_root) and, usually,
its pid namespace. There the state's `pid` is the init's pid *in the container's pid
namespace* (runc passes getpid() of `runc init`: 1), while /proc is still the host's procfs:
/proc/1 would be the host's init. So the pid is never looked up blindly:

- the hook is inside the container when its own pid namespace is not /proc's (the procfs
  shows it under another pid), or when the state's pid is one of its ancestors (a container
  sharing the host's pid namespace): it works in its own mount namespace, on `root.path` of
  the bundle's config.json (or "/" after pivot_root); nothing is entered;
- otherwise (a hook run from the runtime's namespaces: prestart, createRuntime) the state's
  pid is a host pid and the container is opened as the engine opens it
  (`nvmount.container.open.open_container`: pidfd, ns/mnt, never the hook's own namespace),
  and its namespace is entered for the work.

Either way every container path is resolved in the rootfs with openat2 RESOLVE_IN_ROOT
(`Root`); mounts are made only where the rootfs's /proc is a procfs mount, i.e. in the
container's own mount namespace.
"""

from __future__ import annotations

import os

from nvhook.errors import StateError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from nvhook.hook.oci import State
    from nvmount.api import Libc
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

    T = TypeVar("T")

MAX_ANCESTORS = 32
MAX_STATE_BYTES = 1 << 20


class Target:
    """The container of one hook run (see the module doc)."""

    __slots__ = ("config", "host_pid", "in_container", "mntns_fd", "ns_rootfs", "opened",
                 "owner", "rootfs", "state_pid")

    def __init__(self, rootfs: str, ns_rootfs: str, mntns_fd: int, in_container: bool,
                 owner: tuple[int, int], host_pid: int, *, state_pid: int = 0,
                 config: object = None) -> None:
        self.rootfs, self.ns_rootfs, self.mntns_fd = rootfs, ns_rootfs, mntns_fd
        self.in_container, self.owner, self.host_pid = in_container, owner, host_pid
        self.state_pid = state_pid  # the state's pid (in the container's pid namespace)
        self.config = config  # the bundle's config.json, decoded (for `batch`)
        self.opened: tuple[ProcFs, Root] | None = None  # kept for the next hook's work

    def close(self) -> None:
        if self.opened is not None:
            self.opened[1].close()
            self.opened[0].close()
            self.opened = None
        if self.mntns_fd >= 0:
            os.close(self.mntns_fd)
            self.mntns_fd = -1


def read_state(container_spec: str, stdin: bytes | None) -> bytes:
    """The OCI state: from the file `--container-spec` names (NVIDIA's testing flag), else
    stdin ("" and "-" mean stdin, as NVIDIA's)."""
    from nvhook.hook.oci import read_state as read_fd

    if container_spec in ("", "-"):
        return stdin if stdin is not None else read_fd(0)
    try:
        fd = os.open(container_spec, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise StateError(f"failed to load container state: open {container_spec}: "
                         f"{err.strerror}") from err
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StateError(f"failed to load container state: {container_spec} is not a "
                             "regular file")
        return os.read(fd, MAX_STATE_BYTES)
    finally:
        os.close(fd)


def locate(state_bytes: bytes, cwd: str | None, libc: Callable[[], Libc]) -> Target:
    """The target container of the state (see the module doc); `libc()` (ctypes: loaded
    only when needed) opens a container outside this process's namespaces."""
    from nvhook.hook.oci import load_state

    state = load_state(state_bytes)
    if not state.bundle and not state.root:
        raise StateError("failed to load container state: no bundle in the OCI state")
    rootfs, doc = state_root(state, cwd) if state.root else container_root(state.bundle, cwd)
    self_host = _host_pid_of_self()
    if self_host != os.getpid() or state.pid in _ancestors(self_host):
        ns_rootfs = rootfs if os.path.isdir(rootfs) else "/"  # "/": after pivot_root
        fd = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        return Target(rootfs, ns_rootfs, fd, True, (os.geteuid(), os.getegid()), self_host,
                      state_pid=state.pid, config=doc)
    from nvmount.api import open_container

    with open_container(state.pid, rootfs, no_cgroups=True, libc=libc()) as handle:
        return Target(rootfs, handle.ns_rootfs, os.dup(handle.mntns_fd), False,
                      (handle.uid, handle.gid), state.pid, state_pid=state.pid, config=doc)


def state_root(state: State, cwd: str | None) -> tuple[str, object]:
    """(the rootfs the state names (crun's `root`: NVIDIA's #1971, the intermediate mount
    point of a container in a user namespace), the bundle's config.json decoded or None):
    the hooks' work needs no config.json; one that cannot be read costs only the group."""
    from nvhook.errors import SpecError
    from nvhook.hook.locate import bundle_spec_path
    from nvhook.hook.oci import decode_json, go_clean, read_spec_file

    try:
        return go_clean(state.root), decode_json(read_spec_file(bundle_spec_path(state, cwd)))
    except (SpecError, ValueError):
        return go_clean(state.root), None


def container_root(bundle: str, cwd: str | None) -> tuple[str, object]:
    """(`root.path` of the bundle's config.json, relative to the bundle (NVIDIA's
    GetContainerRoot), the decoded document); of its fields only `root.path` is checked
    (NVIDIA's hooks need no `process`)."""
    from nvhook.errors import SpecError
    from nvhook.hook.oci import decode_json, go_clean, go_join, read_spec_file, resolve_bundle

    path = go_join(resolve_bundle(bundle, cwd), "config.json")
    try:
        doc = decode_json(read_spec_file(path))
    except ValueError as err:
        raise SpecError(f"could not decode OCI spec: {path}: {err}") from err
    root = doc.get("root") if isinstance(doc, dict) else None
    value = root.get("path") if isinstance(root, dict) else None
    if not isinstance(value, str) or not value or "\0" in value:
        raise SpecError(f"failed to determine container root: no root.path in {path}")
    if value.startswith("/"):
        return go_clean(value), doc
    return go_join(path[:-len("/config.json")], value), doc


def _host_pid_of_self() -> int:
    """Our pid as /proc (the host's procfs, before pivot_root) shows it."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def _ancestors(pid: int) -> list[int]:
    """The parent chain of `pid` in /proc (bounded)."""
    found: list[int] = []
    for _ in range(MAX_ANCESTORS):
        try:
            with open(f"/proc/{pid}/stat", "rb") as stream:
                stat_line = stream.read(4096)
            pid = int(stat_line.rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 0:
            break
        found.append(pid)
    return found


def with_root(target: Target, libc: Libc, action: Callable[[Root, ProcFs], T], *,
              mounts: bool = False) -> T:
    """`action(root, procfs)` on the container's rootfs in its mount namespace. `mounts`:
    the action mounts, so the rootfs's /proc must be the container's procfs mount. In the
    container's own namespace the procfs handle and the rootfs stay open for the next
    action (the hooks a first hook does for its group)."""
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

    if target.in_container:
        if target.opened is None:
            procfs = ProcFs.open(libc)
            try:
                root = Root.open(target.ns_rootfs, libc, procfs=procfs,
                                 ns_root=target.ns_rootfs == "/")
            except BaseException:
                procfs.close()
                raise
            target.opened = procfs, root
        procfs, root = target.opened
        if mounts:
            root.check_proc_dir()
            root.check_proc_mounted()
        return action(root, procfs)
    from nvmount.api import entered

    with ProcFs.open(libc) as procfs, entered(target.mntns_fd, libc), Root.open(
            target.ns_rootfs, libc, procfs=procfs, require_proc_dir=mounts,
            ns_root=target.ns_rootfs == "/") as root:
        if mounts:
            root.check_proc_mounted()
        return action(root, procfs)
