"""Creating an entry in a rootfs where host root has no id: as the container's root instead.

A rootfs on an id-mapped mount (Podman's `--userns=auto`, crun's intermediate mount point) or
on a filesystem mounted inside a user namespace (fuse-overlayfs, rootless) maps only the
container's ids. Host root, the hook's fsuid, is not among them: the kernel cannot give a new
entry a valid owner and refuses the create with EOVERFLOW ("value too large for defined data
type"). `create_as_owner` tries as host root (every other container: no extra syscall) and, on
EOVERFLOW only, once more with fsuid/fsgid set to the container's root as the host sees it,
so that the entry is born owned by the container and no chown is needed. The ids are restored
before it returns. Single-threaded callers only (setfsuid acts on the calling thread).
"""

from __future__ import annotations

import errno

from nvmount.privileges import effective, set_effective  # not lazily: used after setns

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from nvmount._libc import Libc

    T = TypeVar("T")


def create_as_owner(libc: Libc, owner: tuple[int, int], create: Callable[[], T], *,
                    owner_first: bool = False) -> T:
    """`create()`; on EOVERFLOW, `create()` again as fsuid:fsgid `owner` (see the module).
    `owner_first`: as `owner` at once (a stage that dropped CAP_CHOWN cannot chown after)."""
    if not owner_first or owner == (0, 0):
        try:
            return create()
        except OSError as err:
            if err.errno != errno.EOVERFLOW or owner == (0, 0):
                raise
    before = effective()
    old = libc.set_fs_ids(*owner)
    try:
        set_effective(before)  # the kernel dropped the file capabilities with fsuid 0
        return create()
    finally:
        libc.set_fs_ids(*old)
        set_effective(before)  # and raised every permitted one again with it

