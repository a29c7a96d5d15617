"""Install a finished ld.so.cache into the image, fd-safely. Stage: ldcache; runs in the
ldconfig sandbox's worker as the container owner, inside its nodev view.

ldconfig writes its cache to the sandbox's scratch tmpfs, never into the image. This module
checks that file (a regular file on the scratch, at most `MAX_CACHE_BYTES`, starting with a
cache magic) and installs it: a new temp file in the image's /etc (O_CREAT|O_EXCL|O_NOFOLLOW,
mode 0644) renamed over `ld.so.cache`. Whatever the image had there - a symlink, a FIFO, a
device node - is replaced by the rename, never opened; /etc itself is resolved in the view
without magic links.
"""

from __future__ import annotations

import contextlib
import os
import stat

from nvmount import _libc as L

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc

MAX_CACHE_BYTES = 64 << 20
CACHE_MAGICS = (b"ld.so-1.7.0", b"glibc-ld.so.cache1.1")


class InstallError(Exception):
    """The cache could not be installed; the text says why (one line)."""


def check_cache(fd: int, where: str) -> int:
    """The size of the cache file `fd`; InstallError unless it is a regular file of at most
    `MAX_CACHE_BYTES` that starts with a cache magic."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise InstallError(f"check {where}: not a regular file")
    if st.st_size > MAX_CACHE_BYTES:
        raise InstallError(f"check {where}: {st.st_size} bytes, more than {MAX_CACHE_BYTES}")
    head = os.pread(fd, 20, 0)
    if not head.startswith(CACHE_MAGICS):
        raise InstallError(f"check {where}: not an ld.so.cache (magic {head[:20]!r})")
    return st.st_size


def install_cache(source: str, libc: Libc, directory: str = "/etc",
                  name: str = "ld.so.cache") -> int:
    """Copy the cache at `source` to `directory`/`name` (temp file + rename); returns its
    size. InstallError names the step that failed."""
    target = f"{directory}/{name}"
    try:
        src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise InstallError(f"open {source}: {os.strerror(err.errno or 0).lower()}") from err
    try:
        size = check_cache(src, source)
        try:
            dfd = libc.openat2(L.AT_FDCWD, directory, os.O_PATH | os.O_DIRECTORY,
                               resolve=L.RESOLVE_NO_MAGICLINKS)
        except OSError as err:
            raise InstallError(f"open {directory}: {_why(err)}") from err
        try:
            _replace(src, size, dfd, name, target)
        finally:
            os.close(dfd)
    finally:
        os.close(src)
    return size


def _replace(src: int, size: int, dfd: int, name: str, target: str) -> None:
    tmp = f".{name}.nvhook-{os.urandom(6).hex()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
    except OSError as err:
        raise InstallError(f"create a temp file next to {target}: {_why(err)}") from err
    try:
        try:
            offset = 0
            while offset < size:
                sent = os.sendfile(fd, src, offset, size - offset)
                if sent == 0:
                    raise InstallError(f"copy the cache to {target}: source shrank")
                offset += sent
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError as err:
        _unlink_quietly(tmp, dfd)
        raise InstallError(f"install {target}: {_why(err)}") from err
    except BaseException:
        _unlink_quietly(tmp, dfd)
        raise


def _unlink_quietly(name: str, dfd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dfd)


def _why(err: OSError) -> str:
    return os.strerror(err.errno).lower() if err.errno else str(err)
