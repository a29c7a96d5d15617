"""Files and links the CDI hooks put into a container's rootfs, fd-safe. Stage: apply
(changes the rootfs, never the host).

Every directory is reached with `Root.ensure_dir` (openat2 RESOLVE_IN_ROOT walks, missing
parents created as the container's root user); entries are created relative to that
directory fd: new files O_CREAT|O_EXCL|O_NOFOLLOW, replacements and links written to a
random temporary name and renamed over the old entry (which is never opened or followed:
a symlink, FIFO or device there is simply replaced; a directory there is an error). An image
file is read only after an O_PATH|O_NOFOLLOW open and fstat said it is a regular file, then
reopened through the trusted procfs handle: no device, FIFO or socket of the image is opened.
"""

from __future__ import annotations

import os
import stat

from nvmount.fs.owner import create_as_owner  # not lazily: it runs after setns
from nvmount.fs.paths import split_leaf

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.api import Libc
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

MAX_ENTRIES = 4096  # directory entries looked at in an image directory
MAX_SMALL_FILE = 64 << 10


def _tmp_name() -> str:
    return f".nvhook-{os.urandom(8).hex()}"


def symlink(root: Root, path: str, text: str, owner: tuple[int, int]) -> bool:
    """Link `path` -> `text` in the rootfs, replacing what is there (NVIDIA 1.20's
    create-symlinks); False when the same link already exists."""
    parent, name = split_leaf(path)
    pfd = parent_dir(root, parent, owner)
    try:
        return _link_in(pfd, name, text, owner, root.libc)
    finally:
        os.close(pfd)


def parent_dir(root: Root, path: str, owner: tuple[int, int]) -> int:
    """An fd on directory `path` of the rootfs: one openat2 where it exists, else walked
    with the missing parts created as `owner` (`Root.ensure_dir`)."""
    from nvmount.errors import PathError

    try:
        return root.open_path(path, os.O_PATH | os.O_DIRECTORY)
    except PathError:
        return root.ensure_dir(path, 0o755, *owner)[0]


def _link_in(pfd: int, name: str, text: str, owner: tuple[int, int], libc: Libc) -> bool:
    own = owner == (os.geteuid(), os.getegid())
    if own:  # a new name: one symlinkat, which never follows or replaces anything
        try:
            os.symlink(text, name, dir_fd=pfd)
            return True
        except FileExistsError:
            pass
    try:
        if os.readlink(name, dir_fd=pfd) == text:
            return False
    except OSError:
        pass  # missing, or not a symlink: replaced below
    tmp = _tmp_name()
    create_as_owner(libc, owner, lambda: os.symlink(text, tmp, dir_fd=pfd))
    try:
        if os.stat(tmp, dir_fd=pfd, follow_symlinks=False).st_uid != owner[0] or not own:
            os.chown(tmp, *owner, dir_fd=pfd, follow_symlinks=False)
        create_as_owner(libc, owner, lambda: os.rename(tmp, name, src_dir_fd=pfd,
                                                       dst_dir_fd=pfd))
    except BaseException:
        os.unlink(tmp, dir_fd=pfd)
        raise
    return True


def write_file(root: Root, path: str, data: bytes, mode: int, owner: tuple[int, int], *,
               dir_mode: int = 0o755, replace: bool = True) -> None:
    """Write `path` in the rootfs: a new file renamed over the old entry (`replace`), or a
    new name only (O_EXCL: FileExistsError when taken)."""
    parent, name = split_leaf(path)
    pfd = parent_dir(root, parent, owner) if dir_mode == 0o755 else \
        root.ensure_dir(parent, dir_mode, *owner)[0]
    try:
        target = _tmp_name() if replace else name
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = create_as_owner(root.libc, owner, lambda: os.open(target, flags, 0o600,
                                                               dir_fd=pfd))
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchown(fd, *owner)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            if replace:
                create_as_owner(root.libc, owner, lambda: os.rename(
                    target, name, src_dir_fd=pfd, dst_dir_fd=pfd))
        except BaseException:
            os.unlink(target, dir_fd=pfd)
            raise
    finally:
        os.close(pfd)


def list_dir(root: Root, path: str) -> tuple[int, list[str]] | None:
    """(O_RDONLY directory fd, entry names) of an image directory, None when it is missing;
    the caller closes the fd. At most `MAX_ENTRIES` names."""
    from nvmount.errors import PathError

    try:
        fd = root.open_path(path, os.O_RDONLY | os.O_DIRECTORY)
    except PathError:
        return None
    names: list[str] = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if len(names) == MAX_ENTRIES:
                    break
                names.append(entry.name)
    except OSError:
        os.close(fd)
        raise
    return fd, names


def stat_entry(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def open_regular(dir_fd: int, name: str, procfs: ProcFs) -> int | None:
    """An O_RDONLY fd on regular file `name` (never following a link, never opening anything
    else); None when it is missing or not a regular file."""
    try:
        path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(path_fd).st_mode):
            return None
        return os.open(f"thread-self/fd/{path_fd}", os.O_RDONLY | os.O_CLOEXEC,
                       dir_fd=procfs.fd)
    except OSError:
        return None
    finally:
        os.close(path_fd)


def read_small(dir_fd: int, name: str, procfs: ProcFs, limit: int = MAX_SMALL_FILE
               ) -> bytes | None:
    """The content of regular file `name` (at most `limit` bytes), None for anything else."""
    fd = open_regular(dir_fd, name, procfs)
    if fd is None:
        return None
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)
