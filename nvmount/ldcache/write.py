"""Stage ldcache, mode `write` (the default): the hook updates the image's /etc/ld.so.cache
itself, fd-safe and undoably, instead of running ldconfig.

`update_ldcache` (called inside the container's mount namespace, after the mounts):

1. falls back to the sandboxed ldconfig (`Fallback`) when the CUDA compat directory has to
   lead the search (its libraries are the image's: their sonames would have to be read from
   image files) or when the image's cache is in a form `nvmount.ldcache.image` does not
   rewrite;
2. opens /etc through the rootfs (`Root`, openat2 RESOLVE_IN_ROOT) and `ld.so.cache` in it by
   one name with O_PATH|O_NOFOLLOW: never opened for reading unless `fstat` says it is a
   regular file of a sane size (then reopened through the trusted procfs handle), so a FIFO,
   socket, device node or symlink planted there is never opened - it is replaced;
3. a missing cache is created only in an image that has /etc/ld.so.conf or ld.so.conf.d
   (glibc); a musl image keeps relying on the SONAME links;
4. merges the plan's `ldcache_entries` (`image.merge`) and puts the new cache in place with
   `Root.exchange_file` (a fresh name in /etc, O_CREAT|O_EXCL|O_NOFOLLOW, 0644, owned by the
   container's root, swapped in with renameat2(RENAME_EXCHANGE), RENAME_NOREPLACE when there
   was none).

The old entry is kept under the temporary name until the start succeeds: the journal's undo
swaps it back (so a failed start leaves the image's cache as it was, unlike ldconfig, whose
rewrite cannot be undone), and its close step removes whatever the temporary name holds.
Nothing from the image is executed and no device, FIFO or socket of the image is opened.
"""

from __future__ import annotations

import os
import posixpath
import stat

from nvmount.discover.ldcache import MACHINE_ARCHES
from nvmount.errors import LdcacheError, PathError, strerror
from nvmount.ldcache import image
from nvmount.log import get_logger
from nvmount.records import replace

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.apply.journal import Journal
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root
    from nvmount.plan.types import MountPlan

log = get_logger(__name__)

CACHE_NAME = "ld.so.cache"
MAX_CACHE_BYTES = 8 << 20  # ldconfig's caches are a few hundred KiB; the image's is hostile input
_GLIBC_MARKERS = ("ld.so.conf", "ld.so.conf.d")
MAX_DIRS = 64  # directory names of the image's cache compared with the driver's


class Fallback(Exception):
    """This container's cache is left to the sandboxed ldconfig (the reason is the message)."""


def update_ldcache(root: Root, procfs: ProcFs, plan: MountPlan, owner: tuple[int, int],
                   journal: Journal, machine: str | None = None) -> str:
    """Write the container's ld.so.cache; returns what was done, for the log.

    Raises Fallback (run ldconfig instead) or LdcacheError (a failure, already undone)."""
    if plan.ldconfig_dirs and plan.ldconfig_dirs[0] not in (plan.libs_dir, plan.libs32_dir):
        raise Fallback(f"the CUDA compat directory {plan.ldconfig_dirs[0]} goes first")
    arches = MACHINE_ARCHES.get(machine or os.uname().machine)
    new = image.entries_for(plan.ldcache_entries, arches) if arches else ()
    return write_entries(root, procfs, new, owner, journal)


def write_entries(root: Root, procfs: ProcFs, new: tuple[image.CacheEntry, ...],
                  owner: tuple[int, int], journal: Journal) -> str:
    """Steps 2-4 for entries `new` (in the order ldconfig would add them): what was done.
    Raises Fallback or LdcacheError (also used by NVIDIA's update-ldcache hook,
    `nvhook.compat.cdihook.ldcache`)."""
    if not new:
        return "unchanged: no libraries"
    try:
        etc = root.open_path("/etc", os.O_PATH | os.O_DIRECTORY)
    except PathError:
        return "skipped: the image has no /etc"
    try:
        old = _read_old(etc, procfs)
        if old is None and not any(_exists(etc, n) for n in _GLIBC_MARKERS):
            return "skipped: no ld.so.cache and no ld.so.conf (not a glibc image)"
    finally:
        os.close(etc)
    try:
        current = image.parse_image(old) if old else image.CacheImage()
    except image.UnsupportedCache as err:
        raise Fallback(f"the image's ld.so.cache: {err}") from err
    merged = image.merge(current, _as_named_by_image(root, new, current))
    if merged == current.entries:
        return "unchanged: the cache already lists the driver's libraries"
    # no generator text: the image's ("ldconfig (GLIBC ...)") did not write this cache
    data = image.serialize(merged, b"", current.hwcaps)
    try:
        done = root.exchange_file(f"/etc/{CACHE_NAME}", data, 0o644, *owner)
    except PathError as err:
        raise LdcacheError(str(err)) from err
    journal.record(f"write /etc/{CACHE_NAME}", done.undo)
    journal.on_close(done.close)
    return f"wrote /etc/{CACHE_NAME}: {len(merged)} entries ({len(new)} of the driver)"


def _as_named_by_image(root: Root, new: tuple[image.CacheEntry, ...],
                       current: image.CacheImage) -> tuple[image.CacheEntry, ...]:
    """The driver's entries under the name the image's cache gives their directory.

    ldconfig keeps the first name of a directory it meets (the container's ld.so.conf order):
    on a merged-/usr image it lists /usr/lib/<triplet> as /lib/<triplet>, and so does the
    image's cache. A planned directory that is the same directory (device and inode, opened
    in the rootfs) as one of the cache's takes that name, so this cache, the sandboxed
    ldconfig's and one an ldconfig in the container writes list each library at one path."""
    known = list(dict.fromkeys(posixpath.dirname(e.value) for e in current.entries))
    ids: dict[bytes, tuple[int, int] | None] = {}

    def ident(directory: bytes) -> tuple[int, int] | None:
        if directory not in ids:
            try:
                fd = root.open_path(os.fsdecode(directory), os.O_PATH | os.O_DIRECTORY)
            except PathError:
                ids[directory] = None
            else:
                st = os.fstat(fd)
                os.close(fd)
                ids[directory] = (st.st_dev, st.st_ino)
        return ids[directory]

    merged_usr = any(k.startswith(b"/lib/") for k in known)
    names: dict[bytes, bytes] = {}
    out = []
    for entry in new:
        directory, base = posixpath.split(entry.value)
        if directory not in names:
            want = ident(directory)
            # a directory the image's cache does not list yet (/usr/lib/i386-linux-gnu) is
            # named as the cache names its siblings: /lib/... when /usr/lib/... is /lib/...
            alias = [b"/lib/" + directory[9:]] if merged_usr and directory.startswith(
                b"/usr/lib/") and b"/" not in directory[9:] else []  # /usr/lib/<triplet>
            names[directory] = next((k for k in [*known[:MAX_DIRS], *alias] if k != directory
                                     and want is not None and ident(k) == want), directory)
        out.append(replace(entry, value=posixpath.join(names[directory], base)))
    return tuple(out)


def _read_old(etc: int, procfs: ProcFs) -> bytes | None:
    """The image's cache bytes; None when there is none, or it is not a regular file (it is
    then replaced, never opened)."""
    try:
        fd = os.open(CACHE_NAME, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=etc)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise LdcacheError(f"open /etc/{CACHE_NAME}: {strerror(err)}") from err
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise Fallback(f"/etc/{CACHE_NAME} is a directory")
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CACHE_BYTES:
            log.info("replacing /etc/%s: not a regular file of a sane size (mode %o)",
                     CACHE_NAME, st.st_mode)
            return None
        rfd = os.open(f"thread-self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC,
                      dir_fd=procfs.fd)
        try:
            again = os.fstat(rfd)
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
                raise LdcacheError(f"read /etc/{CACHE_NAME}: changed while we looked")
            return _read_all(rfd, st.st_size)
        finally:
            os.close(rfd)
    except OSError as err:
        raise LdcacheError(f"read /etc/{CACHE_NAME}: {strerror(err)}") from err
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    chunks, left = [], min(size, MAX_CACHE_BYTES)
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _exists(etc: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=etc, follow_symlinks=False)
    except OSError:
        return False
    return True
