"""Mount primitives on file descriptors (apply stage; changes mounts).

Sources are cloned on the HOST side, before entering the container's mount namespace
(`clone_source`: O_PATH|O_NOFOLLOW, fstat type check, open_tree(OPEN_TREE_CLONE),
propagation private). Inside the container namespace the detached clone is attached onto
a target fd from `rootfs.Root` with move_mount (never following a symlink at the target).
Flags are set with mount_setattr. Tree fds are owned by the caller (close them; keep them
open until the plan succeeded if you want `detach` for rollback).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvmount._libc import Libc
    from nvmount.plan_types import MountFlag, SourceKind
    from nvmount.procfs import ProcFs

log = logging.getLogger(__name__)


def clone_source(
    host_path: str, kind: SourceKind, rdev: tuple[int, int] | None, libc: Libc
) -> int:
    """A detached, private, non-recursive clone of host `host_path`; returns the tree fd.

    Checks the source's type against `kind` (regular file, directory, char device whose
    st_rdev equals `rdev`, socket); a symlink or anything else is refused with
    MountError "unexpected source file mode". Run before setns (host paths).
    """
    raise NotImplementedError


def apply_flags(tree_fd: int, flags: MountFlag, libc: Libc) -> None:
    """Set RDONLY/NOSUID/NODEV/NOEXEC on the mount `tree_fd` (mount_setattr)."""
    raise NotImplementedError


def attach(tree_fd: int, target_fd: int, libc: Libc, *, what: str = "") -> None:
    """move_mount the detached tree onto the verified target fd (F_EMPTY_PATH|T_EMPTY_PATH).

    After the attach the mount is made private again (a mount attached under a shared parent
    joins its peer group; we leave it). `tree_fd` then refers to the attached mount.
    `what` (a container path) names the target in errors.
    """
    raise NotImplementedError


def make_tmpfs(mode: int, flags: MountFlag, libc: Libc) -> int:
    """A new detached tmpfs (fsopen/fsconfig mode=/fsmount) with `flags`; returns its fd."""
    raise NotImplementedError


def detach(mount_fd: int, libc: Libc, procfs: ProcFs, *, mnt_id: int | None = None) -> None:
    """Lazily unmount (MNT_DETACH) the mount whose root `mount_fd` is (rollback).

    `mount_fd` is the tree fd after `attach` (or an O_PATH fd on the mounted target). If
    `mnt_id` is given, the fd's mount id must equal it, else MountError and nothing is
    unmounted. Uses the procfs handle's magic link, not a path in the container.
    """
    raise NotImplementedError


def mount_id(fd: int, procfs: ProcFs) -> int:
    """The mount id of the mount `fd` is on."""
    raise NotImplementedError
