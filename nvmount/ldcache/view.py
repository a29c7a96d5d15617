"""The ldconfig sandbox's view of the container: mounts made by the worker, as root, in its
own mount namespace (`nvmount.ldcache.sandbox`). Stage: ldcache; runs only in that forked
worker, so nothing here is seen by the container or the host.

- `enter_rootfs`: a private recursive clone of the rootfs, made nodev, nosuid and noexec
  (mount_setattr, AT_RECURSIVE) before it becomes / (pivot_root; the old root is detached).
  Nodev is what keeps ldconfig from ever opening a device node of the image: the open of a
  block or char node fails with EACCES. Noexec: nothing of the image runs (ldconfig itself
  is executed from a sealed memfd, which is on no mount of the view).
- `mask_dirs`: an empty read-only tmpfs over /sys and /dev (no procfs: the container's
  /proc/1/root would lead to the host root - CVE-2025-23267).
- `mount_scratch`: a small writable tmpfs over /proc, owned by the container owner: the only
  place ldconfig writes its outputs (-f and -C point there), so no image entry - a FIFO,
  device or symlink at /etc/ld.so.cache~ - is ever opened for writing.
- `mask_aux_cache`: glibc's ldconfig always writes /var/cache/ldconfig/aux-cache~ (even with
  -i); that directory (or /var/cache, when it has none) gets a tmpfs of its own, resolved in
  the view without magic links: the image's aux-cache files are never read or written.
"""

from __future__ import annotations

import errno
import os

from nvmount import _libc as L

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc

SCRATCH = "/proc"  # the scratch tmpfs in the view (the container's procfs is never shown)
SCRATCH_FALLBACKS = ("/proc", "/dev", "/sys")  # the first that is a real directory
MASKED_DIRS = ("/sys", "/dev", "/proc")
VIEW_ATTRS = L.MOUNT_ATTR_NODEV | L.MOUNT_ATTR_NOSUID | L.MOUNT_ATTR_NOEXEC
_TMPFS_ATTRS = L.MOUNT_ATTR_NODEV | L.MOUNT_ATTR_NOSUID | L.MOUNT_ATTR_NOEXEC
AUX_CACHE_DIR = "/var/cache/ldconfig"


class ViewError(Exception):
    """A step of the view failed: `step` names it, the cause is the OSError."""

    def __init__(self, step: str, err: OSError) -> None:
        super().__init__(step)
        self.step, self.err = step, err


def enter_rootfs(rootfs: str, libc: Libc) -> None:
    """A private, nodev/nosuid/noexec recursive clone of `rootfs` becomes /."""
    step = "make / private"
    try:
        libc.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)
        step = f"open rootfs {rootfs}"
        root = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        step = f"clone rootfs {rootfs}"
        tree = libc.open_tree(root, "", L.OPEN_TREE_CLONE | L.OPEN_TREE_CLOEXEC
                              | L.AT_RECURSIVE | L.AT_EMPTY_PATH)
        step = f"make the clone of {rootfs} nodev,nosuid,noexec"
        libc.mount_setattr(tree, "", L.AT_EMPTY_PATH | L.AT_RECURSIVE, VIEW_ATTRS)
        step = f"clone rootfs {rootfs}"
        libc.move_mount(tree, "", root, "", L.MOVE_MOUNT_F_EMPTY_PATH | L.MOVE_MOUNT_T_EMPTY_PATH)
        step = f"pivot_root into {rootfs}"
        os.fchdir(tree)
        libc.pivot_root(".", ".")
        libc.umount2(".", L.MNT_DETACH)
        os.chdir("/")
        os.close(tree)
        os.close(root)
    except OSError as err:
        raise ViewError(step, err) from err


def _open_dir(path: str, libc: Libc, *, follow: bool) -> int | None:
    """An O_PATH fd on directory `path` of the view (None: absent, or a symlink when not
    following); symlinks are resolved in the view, magic links never."""
    resolve = L.RESOLVE_IN_ROOT | L.RESOLVE_NO_MAGICLINKS
    if not follow:
        resolve |= L.RESOLVE_NO_SYMLINKS
    try:
        return libc.openat2(L.AT_FDCWD, path, os.O_PATH | os.O_DIRECTORY, resolve=resolve)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EXDEV):
            return None
        raise ViewError(f"open {path}", err) from err


def _tmpfs_on(fd: int, libc: Libc, options: dict[str, str], attrs: int) -> None:
    fs = libc.fsopen("tmpfs")
    try:
        for key, value in options.items():
            libc.fsconfig(fs, L.FSCONFIG_SET_STRING, key, value)
        libc.fsconfig(fs, L.FSCONFIG_CMD_CREATE, None, None)
        mnt = libc.fsmount(fs, L.FSMOUNT_CLOEXEC, attrs)
    finally:
        os.close(fs)
    try:
        libc.move_mount(mnt, "", fd, "", L.MOVE_MOUNT_F_EMPTY_PATH | L.MOVE_MOUNT_T_EMPTY_PATH)
    finally:
        os.close(mnt)


def mask_dirs(libc: Libc, skip: str) -> None:
    """An empty read-only tmpfs over each of `MASKED_DIRS` that is a directory, but `skip`."""
    for path in MASKED_DIRS:
        if path == skip:
            continue
        fd = _open_dir(path, libc, follow=False)
        if fd is None:
            continue  # absent, or a symlink: nothing is mounted there by us or runc
        try:
            _tmpfs_on(fd, libc, {"size": "4k", "mode": "0555"}, _TMPFS_ATTRS | L.MOUNT_ATTR_RDONLY)
        except OSError as err:
            raise ViewError(f"mask {path} with an empty tmpfs", err) from err
        finally:
            os.close(fd)


def mount_scratch(libc: Libc, uid: int, gid: int, size: int) -> str:
    """A writable tmpfs (`size` bytes, mode 0700, owned by uid:gid) over the first of
    `SCRATCH_FALLBACKS` that is a real directory; returns its path. ViewError when none is."""
    for path in SCRATCH_FALLBACKS:
        fd = _open_dir(path, libc, follow=False)
        if fd is None:
            continue
        options = {"size": str(size), "mode": "0700", "uid": str(uid), "gid": str(gid),
                   "nr_inodes": "64"}
        try:
            _tmpfs_on(fd, libc, options, _TMPFS_ATTRS)
        except OSError as err:
            raise ViewError(f"mount the scratch tmpfs on {path}", err) from err
        finally:
            os.close(fd)
        return path
    raise ViewError("mount the scratch tmpfs", OSError(errno.ENOENT, "the image has none of "
                                                       + ", ".join(SCRATCH_FALLBACKS)))


def mask_aux_cache(libc: Libc, uid: int, gid: int) -> str | None:
    """A tmpfs over the directory ldconfig writes its aux cache to (or over its parent, which
    ldconfig would create it in); returns the masked path, None when there is nothing
    ldconfig could write to (no /var/cache, or a non-directory in the way)."""
    for path in (AUX_CACHE_DIR, os.path.dirname(AUX_CACHE_DIR)):
        fd = _open_dir(path, libc, follow=True)
        if fd is None:
            continue
        options = {"size": "16m", "mode": "0755", "uid": str(uid), "gid": str(gid),
                   "nr_inodes": "16"}
        try:
            _tmpfs_on(fd, libc, options, _TMPFS_ATTRS)
        except OSError as err:
            raise ViewError(f"mask {path} with a tmpfs", err) from err
        finally:
            os.close(fd)
        return path
    return None
