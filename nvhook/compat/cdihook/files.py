"""What the CDI hooks read from a container's rootfs, fd-safe. Stage: apply (reads the
rootfs; what the hooks write goes through `nvmount.fs.rootfs.Root`: `symlink(...,
replace=True)`, `write_file`, `mkdir_all`).

An image file is read only after an O_PATH|O_NOFOLLOW open and fstat said it is a regular
file, then reopened through the trusted procfs handle: no device, FIFO or socket of the image
is opened. Directory listings are bounded (`MAX_ENTRIES`).
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

MAX_ENTRIES = 4096  # directory entries looked at in an image directory
MAX_SMALL_FILE = 64 << 10


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
