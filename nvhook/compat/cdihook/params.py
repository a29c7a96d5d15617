"""`disable-device-node-modification`: the container's /proc/driver/nvidia/params says
`ModifyDeviceFiles: 0`, so NVML and nvidia-smi inside never create or chmod /dev nodes.
Stage: apply (mounts in the container's mount namespace).

As NVIDIA 1.20 does, only when the host's params file (under `[nvhook] proc-root`) says
`ModifyDeviceFiles: 1`, and only over that one file (the rest of /proc/driver/nvidia, MIG
capabilities included, stays as the runtime made it). How, unlike NVIDIA (which makes a
scratch directory and a tmpfs inside the container's root and leaves them there):

- the copy is written into a new detached tmpfs (fsopen/fsmount: in no mount namespace),
  its one file cloned with open_tree, made read-only (ro,nosuid,nodev,noexec), private, and
  moved with move_mount onto the container's params file, opened O_PATH in the rootfs and
  checked to be a procfs regular file. Nothing is created in the container.
- kernels older than 6.15 refuse to clone from a detached mount: the tmpfs is then attached
  for the clone on a scratch directory in the container's /dev (the runtime's tmpfs), and
  detached and removed right after.

The simulated driver has no /proc/driver/nvidia: with `[nvhook] sim-procfs` the hook mounts
the simulated /proc/driver and a procfs view of params (rewritten), version and registry
(the engine's own `procfs view` entries), as nvhook's hook does for the simulator.
"""

from __future__ import annotations

import errno
import os
import stat

from nvmount.errors import MountError, strerror

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount.api import Libc
    from nvmount.fs.procfs import ProcFs
    from nvmount.fs.rootfs import Root

PARAMS = "/proc/driver/nvidia/params"
_ON, _OFF = b"ModifyDeviceFiles: 1", b"ModifyDeviceFiles: 0"
MAX_PARAMS = 64 << 10


def read_host_file(proc_root: str, name: str) -> bytes | None:
    """<proc_root>/driver/nvidia/<name>, None when missing (no driver)."""
    try:
        with open(os.path.join(proc_root, "driver/nvidia", name), "rb") as stream:
            return stream.read(MAX_PARAMS)
    except OSError:
        return None


def modified(data: bytes) -> bytes | None:
    """The params text with `ModifyDeviceFiles: 1` lines turned to 0; None when no change
    is needed (NVIDIA's rule: a `ModifyDeviceFiles: 0` line, or no such line)."""
    lines = data.split(b"\n")
    if _OFF in lines or _ON not in lines:
        return None
    return b"\n".join(_OFF if line == _ON else line for line in lines)


def bind_params(root: Root, procfs: ProcFs, libc: Libc, data: bytes, *,
                target_path: str = PARAMS) -> None:
    """Mount a read-only copy holding `data` over the container's params file (`target_path`,
    a procfs regular file of the rootfs)."""
    from nvmount.api import RO_PROC, MountFlag
    from nvmount.api import apply_mounts as mounts
    from nvmount.api import libc as _libc

    target = root.open_path(target_path, os.O_PATH, follow=False)
    try:
        if not stat.S_ISREG(os.fstat(target).st_mode) or \
                libc.fstatfs_type(target) != _libc.PROC_SUPER_MAGIC:
            raise MountError("check", target_path, "not the container's procfs file")
        tree = mounts.make_tmpfs(0o755, MountFlag.NOSUID | MountFlag.NODEV | MountFlag.NOEXEC,
                                 libc, what="params copy")
        try:
            fd = os.open("params", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444,
                         dir_fd=tree)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            clone = _clone_file(tree, root, procfs, libc)
        finally:
            os.close(tree)
        try:
            mounts.apply_flags(clone, RO_PROC, libc, what=target_path)
            mounts.attach(clone, target, libc, what=target_path, procfs=procfs,
                          host_peers=mounts.peer_groups(procfs))
        finally:
            os.close(clone)
    finally:
        os.close(target)


def _clone_file(tree: int, root: Root, procfs: ProcFs, libc: Libc) -> int:
    """A private detached clone of `params` in the tmpfs `tree` (see the module doc)."""
    from nvmount.api import apply_mounts as mounts
    from nvmount.api import libc as _libc

    flags = _libc.OPEN_TREE_CLONE | _libc.OPEN_TREE_CLOEXEC
    try:
        return libc.open_tree(tree, "params", flags)
    except OSError as err:
        if err.errno != errno.EINVAL:
            raise MountError("clone", "params copy", strerror(err)) from err
    dev = root.open_path("/dev", os.O_PATH | os.O_DIRECTORY)
    name = f".nvhook-{os.urandom(8).hex()}"
    try:
        os.mkdir(name, 0o700, dir_fd=dev)
        try:
            scratch = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=dev)
            try:
                mounts.attach(tree, scratch, libc, what=f"/dev/{name}")
                try:
                    return libc.open_tree(tree, "params", flags)
                finally:
                    mounts.detach(tree, libc, procfs, what=f"/dev/{name}")
            finally:
                os.close(scratch)
        finally:
            os.rmdir(name, dir_fd=dev)
    except OSError as err:
        raise MountError("clone", "params copy", strerror(err)) from err
    finally:
        os.close(dev)


def sim_view(root: Root, procfs: ProcFs, libc: Libc, proc_root: str, data: bytes) -> None:
    """The simulated driver: /proc/driver and a procfs view with params, version, registry."""
    from nvmount.api import (
        PROC_DRIVER,
        PROC_FILES,
        RO_PROC,
        UNGATED,
        Journal,
        MountPlan,
        PlanEntry,
        Tmpfs,
        WriteFile,
        apply_plan,
        simproc,
    )

    journal = Journal("simulated procfs")
    try:
        simproc.mount_sim_proc_driver(root, journal, libc, procfs)
        entries: list[PlanEntry] = [Tmpfs(PROC_DRIVER, 0o555, RO_PROC, "procfs view")]
        for name in PROC_FILES:
            content = data if name == "params" else read_host_file(proc_root, name)
            if content is not None:
                entries.append(WriteFile(f"{PROC_DRIVER}/{name}", content, 0o444,
                                         "procfs file"))
        plan = MountPlan(entries=tuple(entries), device_rules=(), ldconfig_dirs=(),
                         libs_dir="", libs32_dir="", bins_dir="", capabilities=UNGATED,
                         gpus=(), mig_devices=())
        apply_plan(plan, root, {}, journal, libc, procfs=procfs)
    except BaseException:
        journal.rollback()
        raise
    journal.commit()
