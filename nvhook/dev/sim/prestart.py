"""`nvhook sim prestart`: give a container a writable-by-root /proc/driver for the simulation.

On a real host the kernel module provides /proc/driver/nvidia, and the engine mounts its
tmpfs there. With a simulated driver the container's procfs has no such directory and
procfs refuses mkdir, so this OCI prestart step (run before nvhook's own) mounts a small
tmpfs (mode 0555, nosuid,nodev,noexec, private) on <rootfs>/proc/driver inside the
container's mount namespace, optionally with an empty `nvidia` directory in it: the engine
is then tested both with and without /proc/driver/nvidia present.

Effects: one mount in the container's mount namespace, made by a forked child (the caller
never changes namespace). The target is resolved with openat2(RESOLVE_IN_ROOT) from an
O_PATH fd of the rootfs and the tmpfs is attached with fsopen/fsmount/move_mount onto
that fd, so a symlink in the image cannot redirect the mount.
"""

from __future__ import annotations

import os

from nvhook.errors import SimError
from nvmount.api import libc as _libc

PROC_DRIVER = "proc/driver"


def mount_proc_driver(pid: int, rootfs: str, with_nvidia_dir: bool = False) -> None:
    """Mount the tmpfs on <rootfs>/proc/driver in the mount namespace of `pid`."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child, reports through the pipe
        os.close(read_fd)
        status = 0
        try:
            _mount_in_namespace(pid, rootfs, with_nvidia_dir)
        except BaseException as err:  # everything goes back to the parent
            os.write(write_fd, str(err).encode()[:4000])
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        message = pipe.read().decode(errors="replace")
    _, wait_status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(wait_status) != 0:
        raise SimError(message or f"mount tmpfs on {rootfs}/{PROC_DRIVER}: helper process "
                       f"failed with status {wait_status:#x}")


def _mount_in_namespace(pid: int, rootfs: str, with_nvidia_dir: bool) -> None:
    libc = _libc.Libc()
    where = f"{rootfs}/{PROC_DRIVER} of pid {pid}"
    step = "open the mount namespace"
    try:
        ns_fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        step = "enter the mount namespace"
        libc.setns(ns_fd, _libc.CLONE_NEWNS)
        step = "open the rootfs"
        root_fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        step = "resolve proc/driver in the rootfs"
        target_fd = libc.openat2(
            root_fd, PROC_DRIVER, os.O_PATH | os.O_DIRECTORY,
            resolve=_libc.RESOLVE_IN_ROOT | _libc.RESOLVE_NO_MAGICLINKS,
        )
        step = "create the tmpfs"
        mount_fd = _make_tmpfs(libc)
        if with_nvidia_dir:
            step = "create nvidia in the tmpfs"
            os.mkdir("nvidia", 0o555, dir_fd=mount_fd)
        step = "attach the tmpfs"
        libc.move_mount(mount_fd, "", target_fd, "",
                        _libc.MOVE_MOUNT_F_EMPTY_PATH | _libc.MOVE_MOUNT_T_EMPTY_PATH)
    except OSError as err:
        raise SimError(f"mount tmpfs on {where}: {step}: {err.strerror or err} "
                       "(run as root with the container's pid from the OCI state)") from err


def _make_tmpfs(libc: _libc.Libc) -> int:
    fs_fd = libc.fsopen("tmpfs")
    try:
        libc.fsconfig(fs_fd, _libc.FSCONFIG_SET_STRING, "mode", "0555")
        libc.fsconfig(fs_fd, _libc.FSCONFIG_SET_STRING, "size", "1m")
        libc.fsconfig(fs_fd, _libc.FSCONFIG_CMD_CREATE, None, None)
        mount_fd = libc.fsmount(
            fs_fd, _libc.FSMOUNT_CLOEXEC,
            _libc.MOUNT_ATTR_NOSUID | _libc.MOUNT_ATTR_NODEV | _libc.MOUNT_ATTR_NOEXEC,
        )
    finally:
        os.close(fs_fd)
    libc.mount_setattr(mount_fd, "", _libc.AT_EMPTY_PATH, 0, 0, _libc.MS_PRIVATE)
    return mount_fd
