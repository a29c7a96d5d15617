"""Root-only cache files: what the hook derived once (the parsed config, the driver inventory),
kept under a root-owned 0700 directory and trusted only while its stamp still matches.

A cache file holds `marshal.dumps((FORMAT, stamp, value))` (plain values only: str, int,
bool, float, None, bytes, tuples, lists, dicts). `load(directory, name, stamp)` returns the
value only when

- the process is root, the directory is owned by root with no group/other access and every
  directory above it is trusted (`nvmount.fs.trusted`: root's, writable by no one else), the file
  is a regular file owned by root that only root can write, opened without following
  symlinks and at most `MAX_BYTES` long,
- the format and the stamp (what the value was derived from, e.g. the config file's
  dev/inode/size/mtime/ctime) equal the caller's;

anything else - absent, foreign, tampered, stale, unreadable - is a miss (None), never an
error. `store` writes a temporary file in the directory and renames it over the old one
(atomic for concurrent hooks); a failure to store is reported to the debug log only.
"""

from __future__ import annotations

import marshal
import os
import stat

from nvmount.log import get_logger

log = get_logger(__name__)

FORMAT = 1
MAX_BYTES = 16 << 20
DEFAULT_DIR = "/run/nvhook"


def _dir_fd(directory: str, create: bool) -> int | None:
    """An fd on the cache directory if it is root's and private (creating it if asked): the
    walk to it is `nvmount.fs.trusted`'s (every component root's and writable by no one
    else, no symlink that a user planted), so a user who owns a parent cannot redirect it."""
    if os.geteuid() != 0 or not directory.startswith("/"):
        return None
    from nvmount.errors import TrustError
    from nvmount.fs.trusted import open_dir

    try:
        fd = open_dir(directory, "cache directory", create=0o700 if create else 0)
    except TrustError as err:
        log.warning("%s: not used", err)
        return None
    except OSError as err:
        if create:
            log.debug("cache directory %s: %s", directory, err.strerror)
        return None
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & 0o077:
        os.close(fd)
        log.warning("cache directory %s is not root's alone (mode %o, uid %d): not used",
                    directory, stat.S_IMODE(st.st_mode), st.st_uid)
        return None
    return fd


def load(directory: str, name: str, stamp: object) -> object | None:
    """The cached value for `name` if its stamp equals `stamp`, else None (a miss)."""
    dfd = _dir_fd(directory, create=False)
    if dfd is None:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dfd)
    except OSError:
        return None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022
                or st.st_size > MAX_BYTES):
            return None
        data = os.read(fd, st.st_size + 1)
    finally:
        os.close(fd)
    try:
        fmt, saved, value = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return None
    return value if fmt == FORMAT and saved == stamp else None


def store(directory: str, name: str, stamp: object, value: object) -> bool:
    """Write the cache file atomically; False (logged at debug) when it cannot be written."""
    try:
        data = marshal.dumps((FORMAT, stamp, value))  # type: ignore[arg-type]
    except ValueError as err:  # a value marshal cannot write: not cached
        log.debug("cache %s: %s", name, err)
        return False
    dfd = _dir_fd(directory, create=True)
    if dfd is None:
        return False
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        return True
    except OSError as err:
        log.debug("cache %s/%s: %s", directory, name, err.strerror)
        try:  # noqa: SIM105 (no contextlib import on the hook path)
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        return False
    finally:
        os.close(dfd)


def file_stamp(path: str) -> tuple[int, int, int, int, int] | None:
    """(dev, inode, size, mtime_ns, ctime_ns) of `path` without following a last symlink, or
    None when it does not exist: what a cached value derived from that file is keyed on."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
