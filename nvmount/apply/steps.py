"""Run a mount plan inside the container's mount namespace, journaled, undone on failure.

Stage: apply. Two halves:

- `clone_sources` (host side, BEFORE setns): every bind source is cloned with open_tree on
  the host (never following a last symlink), type-checked and given its flags, so no source
  is ever resolved inside the container (or through it);
- `apply_plan` (inside the container's mount namespace): each entry in order. Targets are
  resolved in the rootfs with fds (`rootfs.Root`), missing mountpoints are created as the
  container owner, clones are attached with move_mount.
  Tmpfs mounts are created writable (nosuid,nodev,noexec), filled, and made read-only at
  the end, after everything that lives inside them is in place.

Every created entry and every mount goes into the `Journal`; on any failure the journal is
undone in reverse (mounts detached after checking their mount id, entries removed only if
their inode is still the one we created) and the error names the step:

    mount library /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15 ->
    /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15 (ro,nosuid,nodev): <cause>

A fault point (`faults(step)`) precedes every effect; the step names are those of errors.
"""

from __future__ import annotations

import os
import posixpath

from nvmount._compat import add_note
from nvmount.apply import mounts
from nvmount.errors import ContainerError, MountError, NvmountError, PathError, step_text
from nvmount.faults import Faults
from nvmount.fs.paths import SourceKind
from nvmount.log import get_logger
from nvmount.plan.types import Bind, MountFlag, MountPlan, Symlink, Tmpfs, WriteFile
from nvmount.records import record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from nvmount._libc import Libc
    from nvmount.apply.journal import Journal
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Created, Root

    T = TypeVar("T")  # annotations only (they are not evaluated at run time)

log = get_logger(__name__)

Sources = dict[Bind, int]  # planned bind -> detached clone (tree fd)
_KEEP_CLASS = (PathError, ContainerError)  # keep their class; others become MountError


@record
class ApplyResult:
    """Counts of what `apply_plan` changed in the container."""

    mounts: int  # binds and tmpfs attached
    files: int  # files written into our tmpfs mounts
    symlinks: int  # symlinks created (existing entries kept are not counted)
    created: int  # entries created in the rootfs (mountpoints, parents, links, files)


class Step:
    """One named step of applying a plan: the fields of `MountError` and of fault points.
    `op` may be a (prefix, what) pair and `flags` a MountFlag: the text is made only when
    needed (an error, a recording or armed fault point), not for every entry."""

    __slots__ = ("_flags", "_op", "link", "source", "target")

    def __init__(self, op: str | tuple[str, str], target: str = "", *, source: str = "",
                 link: str = "", flags: str | MountFlag = "") -> None:
        self._op, self.target, self.source, self.link, self._flags = (op, target, source, link,
                                                                      flags)

    @property
    def op(self) -> str:
        return self._op if isinstance(self._op, str) else " ".join(self._op)

    @property
    def flags(self) -> str:
        return self._flags if isinstance(self._flags, str) else self._flags.names()

    def __str__(self) -> str:
        return step_text(self.op, self.target, source=self.source, link=self.link,
                         flags=self.flags)

    def error(self, cause: str) -> MountError:
        return MountError(self.op, self.target, cause, source=self.source, link=self.link,
                          flags=self.flags)


def bind_step(entry: Bind) -> Step:
    return Step(("mount", entry.what), entry.target, source=entry.source, flags=entry.flags)


def tmpfs_step(entry: Tmpfs) -> Step:
    return Step(("mount", entry.what), entry.target, source="tmpfs", flags=entry.flags)


def run_step(step: Step, faults: Faults | None, action: Callable[[], T]) -> T:
    """Fault point (none: `faults` None), then `action`; failures become one NvmountError
    naming `step`."""
    try:
        if faults is not None:
            faults(step)
        return action()
    except OSError as err:
        raise step.error((err.strerror or str(err)).lower()) from err
    except NvmountError as err:
        if isinstance(err, _KEEP_CLASS):
            raise type(err)(f"{step}: {err}") from err
        raise step.error(str(err)) from err


def clone_sources(plan: MountPlan, libc: Libc, faults: Faults | None = None) -> Sources:
    """Open and clone every bind source on the host side (call before entering the ns)."""
    faults = faults or Faults()
    sources: Sources = {}
    try:
        for entry in plan.entries:
            if isinstance(entry, Bind) and entry not in sources:
                sources[entry] = run_step(
                    Step(("open source", entry.what), entry.source), faults,
                    lambda e=entry: mounts.clone_source(  # type: ignore[misc]
                        e.source, e.kind, e.rdev, libc, e.flags))
    except BaseException:
        close_sources(sources)
        raise
    return sources


def close_sources(sources: Sources) -> None:
    close_fds(list(sources.values()))
    sources.clear()


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:  # noqa: SIM105 (no contextlib import on the hook path)
            os.close(fd)
        except OSError:
            pass


class _Applier:
    """State of one `apply_plan` run."""

    def __init__(self, root: Root, sources: Sources, journal: Journal, libc: Libc,
                 procfs: ProcFs, owner: tuple[int, int], faults: Faults,
                 host_peers: frozenset[int] = frozenset()) -> None:
        self.root, self.sources, self.journal = root, sources, journal
        self.libc, self.procfs, self.owner, self.faults = libc, procfs, owner, faults
        self.host_peers = host_peers
        self.tmpfs: list[tuple[Tmpfs, int]] = []
        self.tmpfs_devs: set[int] = set()  # entries on our tmpfs mounts go with the mount
        self.counts = {"mounts": 0, "files": 0, "symlinks": 0, "created": 0}
        self.skipped: list[str] = []  # optional tmpfs targets that were read-only

    def created(self, entries: tuple[Created, ...]) -> None:
        for c in entries:
            if c.dev in self.tmpfs_devs:
                continue
            self.journal.record(f"created {c.kind.value} {c.path}",
                                lambda c=c: self.root.remove_created(c))  # type: ignore[misc]
        self.counts["created"] += len(entries)

    def mounted(self, fd: int, target: str) -> None:
        try:
            mnt_id: int | None = mounts.mount_identity(fd, self.procfs, self.libc)
        except OSError:
            mnt_id = None
        self.journal.record(f"mount {target}", lambda: mounts.detach(
            fd, self.libc, self.procfs, mnt_id=mnt_id, what=target))
        self.counts["mounts"] += 1

    def attach(self, tree: int, target_fd: int, target: str) -> None:
        try:
            mounts.attach(tree, target_fd, self.libc, what=target, procfs=self.procfs,
                          host_peers=self.host_peers)
        except MountError:
            self._detach_quietly(tree, target)  # attached but not made private: take it off
            raise
        self.mounted(tree, target)

    def _detach_quietly(self, tree: int, target: str) -> None:
        try:  # noqa: SIM105 (no contextlib import on the hook path)
            mounts.detach(tree, self.libc, self.procfs, what=target)
        except (MountError, OSError):  # it was never attached
            pass

    def bind(self, entry: Bind, step: Step | None = None) -> None:
        tree = self.sources[entry]  # its flags are set (`clone_sources`)
        self.faults(f"mountpoint {entry.target}")
        uid, gid = self.owner
        fd, created = self.root.ensure_mountpoint(entry.target, entry.kind, uid, gid)
        self.created(created)
        try:
            self.faults(step or bind_step(entry))
            self.attach(tree, fd, entry.target)
        finally:
            os.close(fd)

    def tmpfs_mount(self, entry: Tmpfs) -> None:
        self.faults(f"mountpoint {entry.target}")
        fd, created = self._tmpfs_target(entry)
        self.created(created)
        try:
            self.faults(tmpfs_step(entry))
            early = entry.flags & ~MountFlag.RDONLY
            tree = mounts.make_tmpfs(entry.mode, early, self.libc, what=entry.target)
            self.journal.on_close(lambda: os.close(tree))
            self.attach(tree, fd, entry.target)
        finally:
            os.close(fd)
        self.tmpfs.append((entry, tree))
        self.tmpfs_devs.add(os.fstat(tree).st_dev)

    def _tmpfs_target(self, entry: Tmpfs) -> tuple[int, tuple[Created, ...]]:
        """The directory to mount a tmpfs on; never created inside a real procfs."""
        from nvmount import _libc

        ancestor = entry.target
        while ancestor != "/" and not self.root.exists(ancestor):
            ancestor = posixpath.dirname(ancestor)
        fd = self.root.open_path(ancestor)
        if ancestor == entry.target:
            return fd, ()
        try:
            on_proc = self.libc.fstatfs_type(fd) == _libc.PROC_SUPER_MAGIC
        finally:
            os.close(fd)
        if on_proc:
            missing = entry.target[len("/proc/"):] if entry.target.startswith("/proc/") else (
                entry.target)
            raise MountError(f"the container's /proc has no {missing}",
                             hint="is the NVIDIA kernel module loaded?")
        uid, gid = self.owner
        return self.root.ensure_dir(entry.target, entry.mode, uid, gid)

    def write_file(self, entry: WriteFile) -> None:
        created = self.root.write_file(entry.target, entry.data, entry.mode)
        self.created((created,))
        self.counts["files"] += 1

    def symlink(self, entry: Symlink) -> None:
        uid, gid = self.owner
        created = self.root.symlink(entry.target, entry.link, uid, gid)
        self.created(created)
        self.counts["symlinks"] += sum(1 for c in created if c.path == entry.target)

    def seal(self) -> None:
        """Read-only (and the rest of the flags) on every tmpfs, last."""
        for entry, tree in self.tmpfs:
            run_step(Step(("seal", entry.what), entry.target, flags=entry.flags),
                     self.faults,
                     lambda e=entry, t=tree: mounts.apply_flags(  # type: ignore[misc]
                         t, e.flags, self.libc, what=e.target))

    def run_optional(self, entry: Tmpfs | WriteFile | Bind | Symlink,
                     optional: frozenset[str]) -> None:
        """`run`; an optional entry (its label in `optional`, or a file inside an optional
        tmpfs that was skipped) on a read-only target is skipped with a warning."""
        if isinstance(entry, WriteFile) and any(
                entry.target.startswith(t + "/") for t in self.skipped):
            return
        if entry.what not in optional:
            self.run(entry)
            return
        try:
            self.run(entry)
        except NvmountError as err:
            if not _read_only(err):
                raise
            log.warning("%s (read-only: skipped, the container starts without it)", err)
            if isinstance(entry, Tmpfs):
                self.skipped.append(entry.target)

    def run(self, entry: Tmpfs | WriteFile | Bind | Symlink) -> None:
        if isinstance(entry, Bind):  # its fault point is in `bind`, after the mount point
            step = bind_step(entry)
            run_step(step, None, lambda: self.bind(entry, step))
        elif isinstance(entry, Tmpfs):
            run_step(tmpfs_step(entry), None, lambda: self.tmpfs_mount(entry))
        elif isinstance(entry, WriteFile):
            run_step(Step(("write", entry.what), entry.target), self.faults,
                     lambda: self.write_file(entry))
        else:
            run_step(Step(("symlink", entry.what), entry.target, link=entry.link), self.faults,
                     lambda: self.symlink(entry))


def _read_only(err: BaseException) -> bool:
    """Whether `err` was caused by a read-only file system (EROFS) somewhere in its chain."""
    import errno

    seen: BaseException | None = err
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno == errno.EROFS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def apply_plan(
    plan: MountPlan,
    root: Root,
    sources: Sources,
    journal: Journal,
    libc: Libc,
    *,
    procfs: ProcFs,
    owner: tuple[int, int] = (0, 0),
    faults: Faults | None = None,
    host_peers: frozenset[int] = frozenset(),
    optional: frozenset[str] = frozenset(),
) -> ApplyResult:
    """Execute `plan` in order inside the current (container) mount namespace.

    Takes ownership of the `sources` fds (closed when the journal is committed or rolled
    back). Files and mountpoints are created as `owner` (uid, gid). On failure the journal
    is rolled back here, still inside the namespace, and the error (naming the step) raised.
    `host_peers` (`mounts.peer_groups` of the hook's namespace): targets on a mount in one of
    these peer groups are refused, the mount would propagate to the host. `optional`: labels
    of entries skipped with a warning when their target is read-only (EROFS).
    """
    faults = faults or Faults()
    fds = list(sources.values())
    journal.on_close(lambda: close_fds(fds))
    applier = _Applier(root, sources, journal, libc, procfs, owner, faults, host_peers)
    root.remember_dirs(True)
    try:
        for entry in plan.entries:
            applier.run_optional(entry, optional)
            if isinstance(entry, Tmpfs) or (isinstance(entry, Bind)
                                             and entry.kind is SourceKind.DIRECTORY):
                root.remember_dirs(True)  # a directory was covered: walk again
        applier.seal()
    except BaseException as err:
        failures = journal.rollback()
        if failures and isinstance(err, NvmountError):
            add_note(err, "rollback incomplete: " + "; ".join(failures))
            log.error("rollback after a failed mount left things behind: %s", failures)
        raise
    finally:
        root.remember_dirs(False)
    counts = applier.counts
    log.info("applied %d mounts, %d files, %d symlinks in %s", counts["mounts"], counts["files"],
             counts["symlinks"], root.host_path)
    return ApplyResult(**counts)
