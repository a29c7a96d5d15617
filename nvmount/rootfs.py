"""In-root path operations on an untrusted container rootfs (apply stage; touches the rootfs).

`Root` is an opened container root. Every lookup is relative to its fd with
openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS); missing ancestors are created one
component at a time with mkdirat relative to the verified parent fd; leaves are created with
O_CREAT|O_EXCL|O_NOFOLLOW relative to the parent fd; every fd we hand out is re-checked via
readlink(/proc/thread-self/fd/N) (through a verified procfs handle) to be inside the rootfs
and not the rootfs itself. Symlinks that resolve through procfs (magic links) are refused.

What we create is returned as `Created` records so rollback (`remove_created`) removes
exactly that, by parent fd + name, and only if (st_dev, st_ino) still match.

Open `Root` in the mount namespace whose mounts you will change (after `namespace.entered`):
an fd opened in the host namespace refers to the host's mounts, and move_mount onto it fails.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvmount._libc import Libc
    from nvmount.plan_types import SourceKind
    from nvmount.procfs import ProcFs

log = logging.getLogger(__name__)


class EntryKind(enum.Enum):
    DIRECTORY = "directory"
    FILE = "file"
    SYMLINK = "symlink"


@dataclass(frozen=True, slots=True)
class Created:
    """One filesystem entry we created inside the rootfs (for rollback)."""

    path: str  # container path of the entry (physical: parent resolved, no symlinks)
    parent: str  # container path of its parent directory
    name: str  # its name in the parent
    kind: EntryKind
    dev: int  # (st_dev, st_ino) right after creation; removal requires a match
    ino: int


class Root:
    """An opened container root: an O_PATH|O_DIRECTORY fd plus its kernel path prefix.

    A context manager; closes its fd (and the procfs handle, if it opened one).
    """

    def __init__(self, fd: int, host_path: str, prefix: str, libc: Libc, procfs: ProcFs,
                 owns_procfs: bool) -> None:
        self.fd = fd
        self.host_path = host_path
        self.prefix = prefix  # readlink of our fd: what kernel paths inside the root start with
        self._libc = libc
        self._procfs = procfs
        self._owns_procfs = owns_procfs

    @classmethod
    def open(
        cls,
        host_path: str,
        libc: Libc,
        *,
        dir_fd: int | None = None,
        procfs: ProcFs | None = None,
        require_proc_dir: bool = False,
    ) -> Root:
        """Open the rootfs at `host_path` (relative to `dir_fd`) O_PATH|O_DIRECTORY|O_NOFOLLOW.

        Refuses a rootfs that is itself a symlink. With `require_proc_dir`, refuses a rootfs
        whose `/proc` is not an ordinary directory (CVE-2023-27561 class). Without `procfs`,
        opens (and owns) a verified procfs handle. Raises PathError.
        """
        raise NotImplementedError

    # -- lookups ----------------------------------------------------------------------------
    def open_path(self, path: str, flags: int = 0, *, follow: bool = True) -> int:
        """Open container `path` inside the root; returns an fd the caller closes.

        `flags` are added to O_CLOEXEC (default: O_PATH when no access mode is asked for,
        i.e. pass os.O_RDONLY explicitly to read). With `follow=False` a leaf symlink is not
        followed (O_NOFOLLOW). The fd is verified to be inside the rootfs (or the root itself
        for "/"). Raises PathError naming `path` and the rootfs.
        """
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        """Whether `path` resolves inside the root (following symlinks in-root)."""
        raise NotImplementedError

    def real_path(self, fd: int) -> str:
        """The container path of an fd opened inside this root ("/" for the root itself)."""
        raise NotImplementedError

    # -- creation ---------------------------------------------------------------------------
    def ensure_dir(
        self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0
    ) -> tuple[int, tuple[Created, ...]]:
        """Resolve `path` as a directory inside the root, creating what is missing.

        Symlinks (also the leaf) are followed as if chrooted; magic links are refused.
        Returns an O_PATH fd on the directory (strictly inside the root unless path is "/")
        and the entries created (ancestors first), owned by uid:gid with `mode`.
        """
        raise NotImplementedError

    def ensure_file(
        self, path: str, mode: int = 0o644, uid: int = 0, gid: int = 0
    ) -> tuple[int, tuple[Created, ...]]:
        """Resolve or create regular file `path` (a mount point for a file source).

        Ancestors as in `ensure_dir`. The leaf is never followed: a symlink, FIFO, socket or
        device there is replaced (unlinked by parent fd + name, then created) and logged; an
        existing regular file is reused; a directory is an error.
        """
        raise NotImplementedError

    def ensure_mountpoint(
        self, path: str, kind: SourceKind, uid: int = 0, gid: int = 0, mode: int | None = None
    ) -> tuple[int, tuple[Created, ...]]:
        """A mount target for a source of `kind`: a directory for DIRECTORY, else a file.

        For DEVICE an existing char device and for SOCKET an existing socket at the target
        are reused too (mounted over). Returns (O_PATH-or-read fd, created entries).
        """
        raise NotImplementedError

    def symlink(self, path: str, link_text: str, uid: int = 0, gid: int = 0) -> tuple[Created, ...]:
        """Create symlink `path` -> `link_text` (symlinkat to a temp name, renameat2 NOREPLACE).

        Missing parents are created. An existing entry of any type at `path` is kept: the
        result has no SYMLINK entry then (only created parents, if any).
        """
        raise NotImplementedError

    def write_file(self, path: str, data: bytes, mode: int = 0o444) -> Created:
        """Create regular file `path` with `data` (O_CREAT|O_EXCL|O_NOFOLLOW; parent must exist).

        Only for files inside a tmpfs this engine mounted.
        """
        raise NotImplementedError

    # -- rollback ---------------------------------------------------------------------------
    def remove_created(self, entry: Created) -> bool:
        """Remove `entry` by parent fd + name if (st_dev, st_ino) still match; True if removed.

        A non-empty directory, a vanished entry or a mismatch is logged and kept. Detach any
        mount on the entry first (a mounted entry does not match).
        """
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Root:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
