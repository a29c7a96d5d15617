"""The simulated driver's /proc/driver: a tmpfs where a kernel module would show its files.

Stage: apply (inside the container's mount namespace, before the plan). A container's procfs
has /proc/driver but no /proc/driver/nvidia without NVIDIA's kernel module, and procfs refuses
mkdir, so the plan's procfs view (a tmpfs on /proc/driver/nvidia) has nowhere to go. With
`EngineOptions.sim_procfs` (config `[nvhook] sim-procfs = true`, written by `nvhook sim create`)
the engine first mounts a small tmpfs (mode 0555, nosuid,nodev,noexec, private) on the
container's /proc/driver, resolved in the rootfs like every target, journaled like every mount.

Nothing is mounted when /proc/driver is not the procfs directory any more (the old
`nvhook sim prestart` step already covered it) or when /proc/driver/nvidia exists (a real
module is loaded): the step only ever stands in for the missing kernel module.
"""

from __future__ import annotations

import os

from nvmount.apply import mounts
from nvmount.errors import MountError, strerror
from nvmount.faults import Faults
from nvmount.plan.types import MountFlag

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc
    from nvmount.apply.journal import Journal
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

TARGET = "/proc/driver"
STEP = "mount sim procfs tmpfs -> /proc/driver"
FLAGS = MountFlag.NOSUID | MountFlag.NODEV | MountFlag.NOEXEC


def needs_sim_proc_driver(root: Root, libc: Libc) -> bool:
    """/proc/driver is still the container's procfs directory and has no `nvidia`."""
    from nvmount import _libc

    if not root.exists(TARGET) or root.exists(TARGET + "/nvidia"):
        return False
    fd = root.open_path(TARGET)
    try:
        return libc.fstatfs_type(fd) == _libc.PROC_SUPER_MAGIC
    finally:
        os.close(fd)


def mount_sim_proc_driver(root: Root, journal: Journal, libc: Libc, procfs: ProcFs, *,
                          faults: Faults | None = None,
                          host_peers: frozenset[int] = frozenset()) -> bool:
    """Mount the tmpfs on the container's /proc/driver when needed; whether it did."""
    if not needs_sim_proc_driver(root, libc):
        return False
    try:
        (faults or Faults())(STEP)
    except OSError as err:
        raise MountError("mount sim procfs", TARGET, strerror(err), source="tmpfs") from err
    tree = mounts.make_tmpfs(0o555, FLAGS, libc, what=TARGET)
    journal.on_close(lambda: os.close(tree))
    fd = root.open_path(TARGET)
    try:
        mounts.attach(tree, fd, libc, what=TARGET, procfs=procfs, host_peers=host_peers)
    except MountError:
        try:  # noqa: SIM105 (no contextlib import on the hook path)
            mounts.detach(tree, libc, procfs, what=TARGET)
        except (MountError, OSError):  # attached but not made private
            pass
        raise
    finally:
        os.close(fd)
    try:
        mnt_id: int | None = mounts.mount_identity(tree, procfs, libc)
    except OSError:
        mnt_id = None
    journal.record(f"mount sim procfs {TARGET}", lambda: mounts.detach(
        tree, libc, procfs, mnt_id=mnt_id, what=TARGET))
    return True
