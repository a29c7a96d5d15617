"""Spec delivery, the rootfs half: the links and the ld.so.cache the wrapper writes into the
container's rootfs before runc runs. Effects: the rootfs, in-root and fd-safe, undone on error.

The rootfs is the bundle's `root.path` on the host (containerd, Docker and CRI-O mount the
image's overlay there before they call the runtime). It is opened O_PATH (`nvmount.fs.rootfs.Root`,
verified through a private procfs clone; a root.path that is the host's / is refused) and every
path in it is resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), walking and
creating one component at a time, so no symlink, FIFO or device of the image can redirect a
write; the helpers are the hook's own (`Root.symlink`, `nvmount.ldcache.write.update_ldcache`):

- the plan's symlinks (SONAME links, the driver's and graphics links), each created by symlinkat
  to a fresh name and renameat2(RENAME_NOREPLACE) (an entry already there is kept);
- the ld.so.cache with the driver's libraries merged in (`[nvhook] ldcache = "write"`, the
  default), written to a fresh name in /etc and swapped in.

What lies under a mount of the spec (Docker's /dev tmpfs: the /dev/dri/by-path links) would be
hidden by that mount, so it is left to the prestart hook, as is the ld.so.cache when
`ldcache = "ldconfig"`, when the CUDA compat directory must lead the search (ldconfig has to read
the image's libraries), or when /etc itself is a mount. Created entries belong to the
container's root (the host ids its user namespace maps 0 to). A failure undoes what was written
(the journal) and fails the create; runc failing later leaves the rootfs as the container
would have had it (the engine discards a failed container's rootfs).
"""

from __future__ import annotations

import posixpath

from nvmount.api import Symlink

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvhook.launch.runtime_log import RuntimeLog
    from nvmount.api import Journal, MountPlan
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

LDCACHE = "/etc/ld.so.cache"


def covered_by(path: str, destinations: frozenset[str]) -> bool:
    """Whether `path` is, or lies under, one of the mount `destinations` (normalised)."""
    path = posixpath.normpath(path)
    while True:
        if path in destinations:
            return True
        if path == "/":
            return False
        path = posixpath.dirname(path)


class RootfsWork:
    """What `write_rootfs` did, and whether the prestart hook still has work."""

    __slots__ = ("ldcache", "left", "links")

    def __init__(self, links: int, ldcache: str, left: tuple[str, ...]) -> None:
        self.links, self.ldcache, self.left = links, ldcache, left


def write_rootfs(plan: MountPlan, rootfs: str, mounts: frozenset[str], owner: tuple[int, int],
                 *, ldcache_mode: str, ldconfig_required: bool, log: RuntimeLog) -> RootfsWork:
    """Write the plan's links and the ld.so.cache into `rootfs` (module docstring); `mounts`
    are the spec's mount destinations."""
    from nvmount.api import Journal, Libc
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

    links = [e for e in plan.entries if isinstance(e, Symlink)]
    mine = [e for e in links if not covered_by(e.target, mounts)]
    left = [f"{len(links) - len(mine)} links under a spec mount"] if len(mine) < len(links) else []
    libc = Libc()
    journal = Journal("rootfs")
    with ProcFs.open(libc) as procfs, Root.open(rootfs, libc, procfs=procfs) as root:
        try:
            for link in mine:
                for made in root.symlink(link.target, link.link, *owner):
                    journal.record(f"created {made.path}",
                                   lambda m=made: root.remove_created(m))  # type: ignore[misc]
            ldcache = _ldcache(plan, root, procfs, journal, owner, mounts, ldcache_mode,
                               ldconfig_required, log)
        except BaseException:
            failures = journal.rollback()
            if failures:
                log.error(f"rootfs {rootfs}: could not undo: {'; '.join(failures)}")
            raise
        journal.commit()
    if ldcache.startswith("left"):
        left.append(ldcache)
    return RootfsWork(len(mine), ldcache, tuple(left))


def _ldcache(plan: MountPlan, root: Root, procfs: ProcFs, journal: Journal,
             owner: tuple[int, int], mounts: frozenset[str], mode: str, required: bool,
             log: RuntimeLog) -> str:
    """The ld.so.cache written (what was done), or "left to the hook: <why>"."""
    if not plan.ldconfig_dirs and not plan.ldcache_entries:
        return "unchanged: no library directories"
    if mode != "write":
        return f"left to the hook: [nvhook] ldcache = {mode!r}"
    if covered_by(LDCACHE, mounts):
        return "left to the hook: /etc is a mount of the spec"
    from nvmount.api import Fallback, update_ldcache
    from nvmount.errors import LdcacheError

    try:
        return update_ldcache(root, procfs, plan, owner, journal)
    except Fallback as why:
        return f"left to the hook: {why}"
    except LdcacheError as err:
        if required:
            raise LdcacheError(f"{err} (ldconfig-required = true)") from err
        log.warning(f"{err} (the container starts anyway: SONAME links are in place)")
        return f"failed: {err}"
