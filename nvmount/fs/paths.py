"""Pure helpers of in-root path handling: path splitting, display, causes, created entries.

Stage: the fd-safe layer (`nvmount.fs`), below `root`, `walk` and `rootfs`; no I/O except
`is_symlink` (one lstat relative to a directory fd).
"""

from __future__ import annotations

import errno
import os
import stat

from nvmount.choices import Choice, members
from nvmount.errors import PathError, strerror
from nvmount.records import record

MAX_SYMLINKS = 40  # the kernel's limit, also for our hand-made walk
# Components one hand-made walk may visit, link texts included: 40 links of 4 KiB of "../"
# would otherwise be 80,000 steps per path (43 s for a plan's ~60 paths). A real image's
# deepest lib path with its links is a few dozen.
MAX_WALK_STEPS = 256
# ... and all walks in one opened root together (one container start makes ~60-200 walks of a
# few components each): what a hostile chain just under MAX_WALK_STEPS can cost in all
MAX_ROOT_WALK_STEPS = 8192
PATH_MAX = 4096
NAME_MAX = 255

_CAUSES = {
    errno.ELOOP: "symlink loop or more than 40 symlinks (or a magic link under /proc)",
    errno.ENAMETOOLONG: "name too long",
    errno.EXDEV: "path escapes through a magic link (/proc/...) or leaves the rootfs",
    errno.ENOTDIR: "a path component is not a directory",
    errno.ENOENT: "no such file or directory",
    errno.EROFS: "read-only filesystem (the rootfs is mounted read-only)",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOSPC: "no space left on device",
}

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from typing import ClassVar


class EntryKind(Choice):
    __slots__ = ()
    DIRECTORY: ClassVar[EntryKind]
    FILE: ClassVar[EntryKind]
    SYMLINK: ClassVar[EntryKind]


members(EntryKind, DIRECTORY="directory", FILE="file", SYMLINK="symlink")


class SourceKind(Choice):
    """What a plan's bind source is on the host (checked when it is opened and at its target)."""

    __slots__ = ()
    FILE: ClassVar[SourceKind]  # regular file (library, binary, firmware, proc file)
    DIRECTORY: ClassVar[SourceKind]  # proc gpu dir, MPS pipe dir, capabilities dir
    DEVICE: ClassVar[SourceKind]  # character device; `rdev` must match
    SOCKET: ClassVar[SourceKind]  # IPC socket


members(SourceKind, FILE="file", DIRECTORY="directory", DEVICE="device", SOCKET="socket")


@record
class Created:
    """One filesystem entry we created inside the rootfs (for rollback)."""

    path: str  # container path of the entry (physical: parent resolved, no symlinks)
    parent: str  # container path of its parent directory
    name: str  # its name in the parent
    kind: EntryKind
    dev: int  # (st_dev, st_ino) right after creation; removal requires a match
    ino: int


def show(path: str, limit: int = 160) -> str:
    """A container path for messages, shortened when absurdly long (F15)."""
    return path if len(path) <= limit else f"{path[:limit]}...({len(path)} chars)"


def split_path(path: str) -> list[str]:
    """Components of a container path; "" and "." dropped (pure)."""
    return [c for c in path.split("/") if c not in ("", ".")]


def split_leaf(path: str) -> tuple[str, str]:
    parts = split_path(path)
    if not parts or parts[-1] == "..":
        raise PathError(f"resolve {show(path)}: not a file path (needs a last component)")
    return "/" + "/".join(parts[:-1]), parts[-1]


def is_symlink(path: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def type_name(mode: int) -> str:
    names = {
        stat.S_IFREG: "regular file", stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink",
        stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device",
        stat.S_IFBLK: "block device",
    }
    return names.get(stat.S_IFMT(mode), f"file of mode {mode:o}")


def cause(err: OSError) -> str:
    """The cause text of a failed lookup, with path-resolution wording for its errnos."""
    return strerror(err, _CAUSES)
