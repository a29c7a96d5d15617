"""The only place that calls libc and raw syscalls through ctypes.

It uses ctypes' C module `_ctypes` alone, with the five C types it needs declared here:
`ctypes/__init__.py` (its ~60 classes, `struct`, `types`, the function-type cache) cost every
GPU start about 2 ms of CPU before a single call. `_ctypes`' names used here (`dlopen`,
`CFuncPtr`, `_SimpleCData`, `get_errno` and the FUNCFLAG values) are the ones
`ctypes/__init__.py` itself is built on, unchanged from CPython 3.9 to 3.14;
`tests/unit/test_libc.py` checks them against `ctypes`. No `Structure` either (see
`_OPEN_HOW`). Arguments built with `ctypes`
(`nvmount._bpf`) pass through unchanged: a call converts any C data object.

Every wrapper retries EINTR and raises `OSError(errno, strerror, path)`; callers translate
that once into an `NvmountError` at their stage boundary. A `Libc` is built by the caller
(the CLI) and passed down: there is no module-level library handle.
"""

from __future__ import annotations

import errno as _errno
import os
from _ctypes import (  # the C module: see the module doc
    FUNCFLAG_CDECL,
    FUNCFLAG_USE_ERRNO,
    CFuncPtr,
    _SimpleCData,
    dlopen,
    get_errno,
)
from _struct import pack, unpack_from  # struct.py only re-exports these

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from _ctypes import Array
    from collections.abc import Callable

# Syscall numbers that glibc 2.36 does not wrap. The new-mount-API numbers are the same on
# every architecture (generic table); the old ones differ.
_ARCH_SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {"pivot_root": 155, "bpf": 321, "renameat2": 316, "statx": 332},
    "aarch64": {"pivot_root": 41, "bpf": 280, "renameat2": 276, "statx": 291},
}
_COMMON_SYSCALLS = {
    "pidfd_send_signal": 424,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "openat2": 437,
    "mount_setattr": 442,
    "statmount": 457,
}

# Namespaces (sched.h)
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

# mount(2) flags
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOSYMFOLLOW = 0x100
MS_BIND = 0x1000
MS_MOVE = 0x2000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_SLAVE = 0x80000
MNT_DETACH = 0x2

# openat2 resolve flags (linux/openat2.h)
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

# new mount API (linux/mount.h)
OPEN_TREE_CLONE = 0x1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_NOFOLLOW = 0x100
AT_RECURSIVE = 0x8000
AT_FDCWD = -100
MOVE_MOUNT_F_SYMLINKS = 0x1
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOVE_MOUNT_T_SYMLINKS = 0x10
MOVE_MOUNT_T_EMPTY_PATH = 0x40
FSOPEN_CLOEXEC = 0x1
FSMOUNT_CLOEXEC = 0x1
FSCONFIG_SET_FLAG = 0
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_CREATE = 6
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_NOEXEC = 0x8
MOUNT_ATTR_NOSYMFOLLOW = 0x00200000
MOUNT_ATTR_IDMAP = 0x00100000

# statx/statmount (Linux 6.8): one mount's propagation without reading mountinfo
STATX_MNT_ID_UNIQUE = 0x4000
STATMOUNT_MNT_BASIC = 0x2
_STATX_SIZE = 256  # struct statx
_STATX_MNT_ID = 144  # offset of stx_mnt_id
_MNT_ID_REQ_SIZE_VER0 = 24  # struct mnt_id_req: size, spare, mnt_id, param
_STATMOUNT_SIZE = 512  # struct statmount without strings (fixed part is 512 bytes)
_STATMOUNT_PROPAGATION = 72  # offsets of mnt_propagation and mnt_peer_group (u64 each)

# renameat2
RENAME_NOREPLACE = 0x1
RENAME_EXCHANGE = 0x2

# fstatfs magics
PROC_SUPER_MAGIC = 0x9FA0
SYSFS_MAGIC = 0x62656572
CGROUP_SUPER_MAGIC = 0x27E0EB
CGROUP2_SUPER_MAGIC = 0x63677270
TMPFS_MAGIC = 0x01021994


# The C types, as ctypes declares them on LP64 Linux (the only ABI of _ARCH_SYSCALLS); mypy
# reads ctypes' own (typeshed types them only there)
if TYPE_CHECKING:
    from ctypes import c_char as c_char
    from ctypes import c_int as c_int
    from ctypes import c_long as c_long
    from ctypes import c_uint as c_uint
    from ctypes import c_ulong as c_ulong
else:
    class c_int(_SimpleCData):
        _type_ = "i"

    class c_uint(_SimpleCData):
        _type_ = "I"

    class c_long(_SimpleCData):
        _type_ = "l"

    class c_ulong(_SimpleCData):  # also size_t and uint64_t on LP64
        _type_ = "L"

    class c_char(_SimpleCData):
        _type_ = "c"

c_size_t = c_uint64 = c_ulong


class _Function(CFuncPtr):  # a libc function: cdecl, errno kept
    _flags_ = FUNCFLAG_CDECL | FUNCFLAG_USE_ERRNO
    _restype_ = c_int


class _Handle:
    """What `_Function((name, handle))` looks a symbol up in: this process's libc (dlopen of
    the main program, as `ctypes.CDLL(None)`)."""

    def __init__(self) -> None:
        self._handle = dlopen(None, 0)  # type: ignore[arg-type]  # RTLD_LOCAL, as CDLL(None)

    def __getattr__(self, name: str) -> _Function:
        if name.startswith("_"):
            raise AttributeError(name)
        func = _Function((name, self))  # type: ignore[arg-type]  # it reads `_handle` only
        setattr(self, name, func)
        return func


def create_string_buffer(size: int) -> Array[c_char]:
    """A zeroed char[size] for the kernel to write (ctypes.create_string_buffer); what it
    only reads is passed as bytes."""
    return (c_char * size)()


# struct open_how (openat2) and struct mount_attr (mount_setattr, MOUNT_ATTR_SIZE_VER0): u64
# fields, passed as bytes (a call passes bytes as a pointer to them; the kernel only reads).
# No ctypes Structure: from CPython 3.14 defining one imports ctypes' Python layout code and
# with it the whole ctypes package (~3.6 ms per GPU start measured on Debian sid's 3.14).
_OPEN_HOW = "=QQQ"
_MOUNT_ATTR = "=QQQQ"
OPEN_HOW_SIZE = 24
MOUNT_ATTR_SIZE = 32


def _b(path: str | bytes | None) -> bytes | None:
    if path is None or isinstance(path, bytes):
        return path
    return os.fsencode(path)


class Libc:
    """Thin, typed wrappers over the syscalls the engine needs."""

    def __init__(self) -> None:
        self._lib = _Handle()
        self._syscall = _Function(("syscall", self._lib))  # type: ignore[arg-type]
        self._syscall.restype = c_long
        machine = os.uname().machine  # = platform.machine() on Linux, without its import
        if machine not in _ARCH_SYSCALLS:
            raise OSError(_errno.ENOSYS, f"unsupported architecture {machine}")
        self._nr = {**_COMMON_SYSCALLS, **_ARCH_SYSCALLS[machine]}

    # -- plumbing -------------------------------------------------------------------------
    def _call(self, fn: Callable[[], int], what: str, path: str | None = None) -> int:
        while True:
            rc = fn()
            if rc != -1:
                return rc
            err = get_errno()
            if err != _errno.EINTR:
                raise OSError(err, f"{what}: {os.strerror(err)}", path)

    def _sys(self, name: str, *args: object, path: str | None = None) -> int:
        """`_call` of syscall(2), inlined: the engine makes ~20 of these per mount."""
        nr = c_long(self._nr[name])
        while True:
            rc = int(self._syscall(nr, *args))
            if rc != -1:
                return rc
            err = get_errno()
            if err != _errno.EINTR:
                raise OSError(err, f"{name}: {os.strerror(err)}", path)

    def syscall(self, name: str, *args: object, path: str | None = None) -> int:
        """A raw syscall by name (the table above), EINTR retried, errors as OSError: for
        `nvmount._bpf`, which builds its own ctypes arguments."""
        return self._sys(name, *args, path=path)

    def prctl(self, option: int, *args: object) -> int:
        """prctl(2) with caller-built ctypes arguments (unused ones given as 0)."""
        padded = [*args, *(c_ulong(0),) * (4 - len(args))]
        return self._call(lambda: int(self._lib.prctl(c_int(option), *padded)),
                          f"prctl {option}")

    # -- namespaces -----------------------------------------------------------------------
    def setns(self, fd: int, nstype: int) -> None:
        self._call(lambda: int(self._lib.setns(fd, nstype)), "setns")

    def unshare(self, flags: int) -> None:
        self._call(lambda: int(self._lib.unshare(flags)), "unshare")

    def pivot_root(self, new_root: str, put_old: str) -> None:
        self._sys("pivot_root", _b(new_root), _b(put_old), path=new_root)

    # -- classic mount API ----------------------------------------------------------------
    def mount(
        self,
        source: str | None,
        target: str,
        fstype: str | None,
        flags: int,
        data: str | None = None,
    ) -> None:
        src, tgt, fst, dat = _b(source), _b(target), _b(fstype), _b(data)
        self._call(
            lambda: int(self._lib.mount(src, tgt, fst, c_ulong(flags), dat)),
            "mount",
            target,
        )

    def umount2(self, target: str, flags: int = 0) -> None:
        tgt = _b(target)
        self._call(lambda: int(self._lib.umount2(tgt, flags)), "umount2", target)

    # -- new mount API --------------------------------------------------------------------
    def open_tree(self, dirfd: int, path: str, flags: int) -> int:
        return self._sys("open_tree", dirfd, _b(path), c_uint(flags), path=path)

    def move_mount(
        self, from_dirfd: int, from_path: str, to_dirfd: int, to_path: str, flags: int
    ) -> None:
        self._sys(
            "move_mount",
            from_dirfd,
            _b(from_path),
            to_dirfd,
            _b(to_path),
            c_uint(flags),
            path=to_path or None,
        )

    def mount_setattr(
        self, dirfd: int, path: str, flags: int, attr_set: int, attr_clr: int = 0,
        propagation: int = 0, userns_fd: int = 0,
    ) -> None:
        attr = pack(_MOUNT_ATTR, attr_set, attr_clr, propagation, userns_fd)
        self._sys(
            "mount_setattr",
            dirfd,
            _b(path),
            c_uint(flags),
            attr,
            c_size_t(MOUNT_ATTR_SIZE),
            path=path or None,
        )

    def fsopen(self, fstype: str, flags: int = FSOPEN_CLOEXEC) -> int:
        return self._sys("fsopen", _b(fstype), c_uint(flags), path=fstype)

    def fsconfig(self, fd: int, cmd: int, key: str | None, value: str | None) -> None:
        self._sys("fsconfig", fd, c_uint(cmd), _b(key), _b(value), 0)

    def fsmount(self, fd: int, flags: int, attr_flags: int) -> int:
        return self._sys("fsmount", fd, c_uint(flags), c_uint(attr_flags))

    # -- paths ----------------------------------------------------------------------------
    def openat2(self, dirfd: int, path: str, flags: int, mode: int = 0, resolve: int = 0) -> int:
        how = pack(_OPEN_HOW, flags | os.O_CLOEXEC, mode, resolve)
        return self._sys(
            "openat2",
            dirfd,
            _b(path),
            how,
            c_size_t(OPEN_HOW_SIZE),
            path=path,
        )

    def renameat2(self, olddirfd: int, old: str, newdirfd: int, new: str, flags: int) -> None:
        self._sys("renameat2", olddirfd, _b(old), newdirfd, _b(new), c_uint(flags),
                  path=new)

    def fstatfs_type(self, fd: int) -> int:
        """The f_type (filesystem magic) of an open fd."""
        buf = create_string_buffer(256)
        self._call(lambda: int(self._lib.fstatfs(fd, buf)), "fstatfs")
        return int(unpack_from("l", buf.raw, 0)[0])

    # -- mount facts (instead of reading mountinfo) ---------------------------------------
    def mount_id_unique(self, fd: int) -> int | None:
        """The 64-bit unique id of the mount `fd` is on (statx STATX_MNT_ID_UNIQUE), or None
        when the kernel does not report one (before Linux 6.8)."""
        buf = create_string_buffer(_STATX_SIZE)
        self._sys("statx", fd, b"", AT_EMPTY_PATH, c_uint(STATX_MNT_ID_UNIQUE), buf)
        mask, = unpack_from("=I", buf.raw, 0)
        if not mask & STATX_MNT_ID_UNIQUE:
            return None
        return int(unpack_from("=Q", buf.raw, _STATX_MNT_ID)[0])

    def mount_propagation(self, mnt_id: int) -> tuple[int, int]:
        """(propagation flags MS_SHARED/MS_SLAVE/..., shared peer group or 0) of the mount with
        unique id `mnt_id` in the current mount namespace (statmount STATMOUNT_MNT_BASIC).
        ENOENT: no such mount in this namespace; ENOSYS before Linux 6.8."""
        req = pack("=IIQQ", _MNT_ID_REQ_SIZE_VER0, 0, mnt_id, STATMOUNT_MNT_BASIC)
        out = create_string_buffer(_STATMOUNT_SIZE)
        self._sys("statmount", req, out, c_size_t(_STATMOUNT_SIZE), c_uint(0))
        mask, = unpack_from("=Q", out.raw, 8)
        if not mask & STATMOUNT_MNT_BASIC:
            raise OSError(_errno.ENOSYS, "statmount: no mount facts in the answer")
        propagation, peer_group = unpack_from("=QQ", out.raw, _STATMOUNT_PROPAGATION)
        return int(propagation), int(peer_group)

    # -- filesystem ids -------------------------------------------------------------------
    def set_fs_ids(self, uid: int, gid: int) -> tuple[int, int]:
        """setfsgid then setfsuid (this thread only; the hook has one); the previous
        (fsuid, fsgid). They report no errors: PermissionError unless both took effect."""
        old_gid = int(self._lib.setfsgid(c_uint(gid)))
        old_uid = int(self._lib.setfsuid(c_uint(uid)))
        now = (int(self._lib.setfsuid(c_uint(0xFFFFFFFF))),
               int(self._lib.setfsgid(c_uint(0xFFFFFFFF))))
        if now != (uid, gid):
            self._lib.setfsuid(c_uint(old_uid))
            self._lib.setfsgid(c_uint(old_gid))
            raise PermissionError(_errno.EPERM, f"setfsuid {uid}/setfsgid {gid}: not permitted")
        return old_uid, old_gid

    # -- processes ------------------------------------------------------------------------
    def pidfd_send_signal(self, pidfd: int, sig: int) -> None:
        self._sys("pidfd_send_signal", pidfd, sig, None, 0)
