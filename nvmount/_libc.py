"""The only place that calls libc and raw syscalls through ctypes.

Every wrapper retries EINTR and raises `OSError(errno, strerror, path)`; callers translate
that once into an `NvmountError` at their stage boundary. A `Libc` is built by the caller
(the CLI) and passed down: there is no module-level library handle.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os
import struct
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


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _b(path: str | bytes | None) -> bytes | None:
    if path is None or isinstance(path, bytes):
        return path
    return os.fsencode(path)


class Libc:
    """Thin, typed wrappers over the syscalls the engine needs."""

    def __init__(self) -> None:
        self._lib = ctypes.CDLL(None, use_errno=True)
        self._syscall = self._lib.syscall
        self._syscall.restype = ctypes.c_long
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
            err = ctypes.get_errno()
            if err != _errno.EINTR:
                raise OSError(err, f"{what}: {os.strerror(err)}", path)

    def _sys(self, name: str, *args: object, path: str | None = None) -> int:
        nr = self._nr[name]
        return self._call(lambda: int(self._syscall(ctypes.c_long(nr), *args)), name, path)

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
            lambda: int(self._lib.mount(src, tgt, fst, ctypes.c_ulong(flags), dat)),
            "mount",
            target,
        )

    def umount2(self, target: str, flags: int = 0) -> None:
        tgt = _b(target)
        self._call(lambda: int(self._lib.umount2(tgt, flags)), "umount2", target)

    # -- new mount API --------------------------------------------------------------------
    def open_tree(self, dirfd: int, path: str, flags: int) -> int:
        return self._sys("open_tree", dirfd, _b(path), ctypes.c_uint(flags), path=path)

    def move_mount(
        self, from_dirfd: int, from_path: str, to_dirfd: int, to_path: str, flags: int
    ) -> None:
        self._sys(
            "move_mount",
            from_dirfd,
            _b(from_path),
            to_dirfd,
            _b(to_path),
            ctypes.c_uint(flags),
            path=to_path or None,
        )

    def mount_setattr(
        self, dirfd: int, path: str, flags: int, attr_set: int, attr_clr: int = 0,
        propagation: int = 0,
    ) -> None:
        attr = _MountAttr(attr_set, attr_clr, propagation, 0)
        self._sys(
            "mount_setattr",
            dirfd,
            _b(path),
            ctypes.c_uint(flags),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
            path=path or None,
        )

    def fsopen(self, fstype: str, flags: int = FSOPEN_CLOEXEC) -> int:
        return self._sys("fsopen", _b(fstype), ctypes.c_uint(flags), path=fstype)

    def fsconfig(self, fd: int, cmd: int, key: str | None, value: str | None) -> None:
        self._sys("fsconfig", fd, ctypes.c_uint(cmd), _b(key), _b(value), 0)

    def fsmount(self, fd: int, flags: int, attr_flags: int) -> int:
        return self._sys("fsmount", fd, ctypes.c_uint(flags), ctypes.c_uint(attr_flags))

    # -- paths ----------------------------------------------------------------------------
    def openat2(self, dirfd: int, path: str, flags: int, mode: int = 0, resolve: int = 0) -> int:
        how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
        return self._sys(
            "openat2",
            dirfd,
            _b(path),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
            path=path,
        )

    def renameat2(self, olddirfd: int, old: str, newdirfd: int, new: str, flags: int) -> None:
        self._sys("renameat2", olddirfd, _b(old), newdirfd, _b(new), ctypes.c_uint(flags),
                  path=new)

    def fstatfs_type(self, fd: int) -> int:
        """The f_type (filesystem magic) of an open fd."""
        buf = ctypes.create_string_buffer(256)
        self._call(lambda: int(self._lib.fstatfs(fd, buf)), "fstatfs")
        return int(struct.unpack_from("l", buf.raw, 0)[0])

    # -- mount facts (instead of reading mountinfo) ---------------------------------------
    def mount_id_unique(self, fd: int) -> int | None:
        """The 64-bit unique id of the mount `fd` is on (statx STATX_MNT_ID_UNIQUE), or None
        when the kernel does not report one (before Linux 6.8)."""
        buf = ctypes.create_string_buffer(_STATX_SIZE)
        self._sys("statx", fd, b"", AT_EMPTY_PATH, ctypes.c_uint(STATX_MNT_ID_UNIQUE), buf)
        mask, = struct.unpack_from("=I", buf.raw, 0)
        if not mask & STATX_MNT_ID_UNIQUE:
            return None
        return int(struct.unpack_from("=Q", buf.raw, _STATX_MNT_ID)[0])

    def mount_propagation(self, mnt_id: int) -> tuple[int, int]:
        """(propagation flags MS_SHARED/MS_SLAVE/..., shared peer group or 0) of the mount with
        unique id `mnt_id` in the current mount namespace (statmount STATMOUNT_MNT_BASIC).
        ENOENT: no such mount in this namespace; ENOSYS before Linux 6.8."""
        req = ctypes.create_string_buffer(
            struct.pack("=IIQQ", _MNT_ID_REQ_SIZE_VER0, 0, mnt_id, STATMOUNT_MNT_BASIC),
            _MNT_ID_REQ_SIZE_VER0)
        out = ctypes.create_string_buffer(_STATMOUNT_SIZE)
        self._sys("statmount", req, out, ctypes.c_size_t(_STATMOUNT_SIZE), ctypes.c_uint(0))
        mask, = struct.unpack_from("=Q", out.raw, 8)
        if not mask & STATMOUNT_MNT_BASIC:
            raise OSError(_errno.ENOSYS, "statmount: no mount facts in the answer")
        propagation, peer_group = struct.unpack_from("=QQ", out.raw, _STATMOUNT_PROPAGATION)
        return int(propagation), int(peer_group)

    # -- processes ------------------------------------------------------------------------
    def pidfd_send_signal(self, pidfd: int, sig: int) -> None:
        self._sys("pidfd_send_signal", pidfd, sig, None, 0)

    # -- bpf ------------------------------------------------------------------------------
    def bpf(self, cmd: int, attr: ctypes.Array[ctypes.c_char] | ctypes.Structure) -> int:
        """bpf(2) with a caller-built attr union; returns the syscall's result."""
        return self._sys("bpf", cmd, ctypes.byref(attr), ctypes.c_uint(ctypes.sizeof(attr)))


# == bpf(2) commands for cgroup device programs (used by nvmount/cgroup/bpf.py) ================
# Each attr below is the prefix of `union bpf_attr` that one command reads. The kernel accepts a
# shorter attr and zero-fills the rest, so these stay valid on older kernels. Instruction
# building and decoding (plain bytes) lives in cgroup_bpf.py; only the syscall plumbing is here.

BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_DETACH = 9
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_PROG_QUERY = 16
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6  # attach type
BPF_F_ALLOW_OVERRIDE = 0x1
BPF_F_ALLOW_MULTI = 0x2
BPF_F_REPLACE = 0x4
BPF_F_QUERY_EFFECTIVE = 0x1
_BPF_QUERY_RETRIES = 10
_BPF_LOG_SIZE = 1 << 18


class _BpfProgLoadAttr(ctypes.Structure):
    _fields_ = [
        ("prog_type", ctypes.c_uint32),
        ("insn_cnt", ctypes.c_uint32),
        ("insns", ctypes.c_uint64),
        ("license", ctypes.c_uint64),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_uint64),
        ("kern_version", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_name", ctypes.c_char * 16),
        ("prog_ifindex", ctypes.c_uint32),
        ("expected_attach_type", ctypes.c_uint32),
    ]


class _BpfAttachAttr(ctypes.Structure):
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_bpf_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
        ("replace_bpf_fd", ctypes.c_uint32),
    ]


class _BpfGetFdByIdAttr(ctypes.Structure):
    _fields_ = [
        ("prog_id", ctypes.c_uint32),
        ("next_id", ctypes.c_uint32),
        ("open_flags", ctypes.c_uint32),
    ]


class _BpfInfoAttr(ctypes.Structure):
    _fields_ = [
        ("bpf_fd", ctypes.c_uint32),
        ("info_len", ctypes.c_uint32),
        ("info", ctypes.c_uint64),
    ]


class _BpfQueryAttr(ctypes.Structure):
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("query_flags", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
        ("prog_ids", ctypes.c_uint64),
        ("prog_cnt", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
    ]


class _BpfProgInfo(ctypes.Structure):
    """The head of `struct bpf_prog_info` (the kernel copies min(info_len, its size))."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * 16),
    ]


class BpfLoadError(OSError):
    """BPF_PROG_LOAD failed; `log` holds the verifier's log (may be empty)."""

    def __init__(self, err: int, log: str) -> None:
        super().__init__(err, f"bpf BPF_PROG_LOAD: {os.strerror(err)}")
        self.log = log


class BpfProgInfo:
    """What BPF_OBJ_GET_INFO_BY_FD tells about one program, with its xlated instructions."""

    __slots__ = ("name", "prog_id", "prog_type", "xlated")

    def __init__(self, prog_type: int, prog_id: int, name: str, xlated: bytes) -> None:
        self.prog_type = prog_type
        self.prog_id = prog_id
        self.name = name
        self.xlated = xlated


def _bpf_cmd(libc: Libc, cmd: int, name: str, attr: ctypes.Structure) -> int:
    try:
        return libc.bpf(cmd, attr)
    except OSError as err:
        raise OSError(err.errno, f"bpf {name}: {os.strerror(err.errno or 0)}") from err


def bpf_prog_query(
    libc: Libc, target_fd: int, attach_type: int, query_flags: int = 0
) -> tuple[int, tuple[int, ...]]:
    """(attach_flags, program ids) attached to a cgroup; retries ENOSPC with the new count."""
    count = 64
    for _ in range(_BPF_QUERY_RETRIES):
        ids = (ctypes.c_uint32 * count)()
        attr = _BpfQueryAttr(target_fd=target_fd, attach_type=attach_type,
                             query_flags=query_flags, prog_ids=ctypes.addressof(ids),
                             prog_cnt=count)
        try:
            _bpf_cmd(libc, BPF_PROG_QUERY, "BPF_PROG_QUERY", attr)
        except OSError as err:
            if err.errno != _errno.ENOSPC:
                raise
            count = max(int(attr.prog_cnt), count * 2)
            continue
        return int(attr.attach_flags), tuple(int(i) for i in ids[: attr.prog_cnt])
    raise OSError(_errno.ENOSPC, "bpf BPF_PROG_QUERY: program list keeps growing")


def bpf_prog_get_fd_by_id(libc: Libc, prog_id: int) -> int:
    """A new (close-on-exec) fd for the program with this id."""
    attr = _BpfGetFdByIdAttr(prog_id=prog_id)
    return _bpf_cmd(libc, BPF_PROG_GET_FD_BY_ID, "BPF_PROG_GET_FD_BY_ID", attr)


def bpf_prog_info(libc: Libc, prog_fd: int) -> BpfProgInfo:
    """Type, id, name and xlated instructions of a program: one call to size, one to read."""
    info = _BpfProgInfo()
    attr = _BpfInfoAttr(bpf_fd=prog_fd, info_len=ctypes.sizeof(info),
                        info=ctypes.addressof(info))
    _bpf_cmd(libc, BPF_OBJ_GET_INFO_BY_FD, "BPF_OBJ_GET_INFO_BY_FD", attr)
    size = int(info.xlated_prog_len)
    buf = ctypes.create_string_buffer(size)
    info2 = _BpfProgInfo(xlated_prog_len=size, xlated_prog_insns=ctypes.addressof(buf))
    attr = _BpfInfoAttr(bpf_fd=prog_fd, info_len=ctypes.sizeof(info2),
                        info=ctypes.addressof(info2))
    _bpf_cmd(libc, BPF_OBJ_GET_INFO_BY_FD, "BPF_OBJ_GET_INFO_BY_FD", attr)
    if size and not info2.xlated_prog_insns:  # blinded program, raw dumps not allowed
        raise OSError(_errno.EACCES, "bpf BPF_OBJ_GET_INFO_BY_FD: the kernel withheld the "
                      "instructions (constant blinding, net.core.bpf_jit_harden)")
    got = min(size, int(info2.xlated_prog_len))
    name = bytes(info.name).split(b"\0", 1)[0].decode("ascii", "replace")
    return BpfProgInfo(int(info.type), int(info.id), name, buf.raw[:got])


def bpf_prog_load(libc: Libc, prog_type: int, insns: bytes, license: str, name: str) -> int:
    """Load a program; on failure load again with a log and raise BpfLoadError with it."""
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(license.encode())
    attr = _BpfProgLoadAttr(prog_type=prog_type, insn_cnt=len(insns) // 8,
                            insns=ctypes.addressof(code), license=ctypes.addressof(lic),
                            prog_name=name.encode()[:15])
    try:
        return _bpf_cmd(libc, BPF_PROG_LOAD, "BPF_PROG_LOAD", attr)
    except OSError as err:
        first = err.errno or _errno.EINVAL
    log = ctypes.create_string_buffer(_BPF_LOG_SIZE)
    attr.log_level, attr.log_size, attr.log_buf = 1, _BPF_LOG_SIZE, ctypes.addressof(log)
    try:
        fd = _bpf_cmd(libc, BPF_PROG_LOAD, "BPF_PROG_LOAD", attr)
    except OSError:
        raise BpfLoadError(first, log.value.decode("utf-8", "replace")) from None
    os.close(fd)  # passed with a log but not without: do not trust it
    raise BpfLoadError(first, "")


def bpf_prog_attach(
    libc: Libc, target_fd: int, prog_fd: int, attach_type: int, flags: int,
    replace_fd: int = 0,
) -> None:
    """BPF_PROG_ATTACH; with BPF_F_REPLACE, `replace_fd` is swapped out atomically."""
    attr = _BpfAttachAttr(target_fd=target_fd, attach_bpf_fd=prog_fd, attach_type=attach_type,
                          attach_flags=flags, replace_bpf_fd=replace_fd)
    _bpf_cmd(libc, BPF_PROG_ATTACH, "BPF_PROG_ATTACH", attr)


def bpf_prog_detach(libc: Libc, target_fd: int, prog_fd: int, attach_type: int) -> None:
    attr = _BpfAttachAttr(target_fd=target_fd, attach_bpf_fd=prog_fd, attach_type=attach_type)
    _bpf_cmd(libc, BPF_PROG_DETACH, "BPF_PROG_DETACH", attr)


# -- seccomp (the program is built by nvmount.ldcache.seccomp) ----------------------------------------
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_set_filter(libc: Libc, program: bytes) -> None:
    """Install a classic-BPF seccomp filter (packed 8-byte sock_filter entries) on the calling
    thread; it is inherited across fork and exec. Needs no_new_privs (or CAP_SYS_ADMIN)."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    libc._call(
        lambda: int(libc._lib.prctl(ctypes.c_int(PR_SET_SECCOMP),
                                    ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog),
                                    ctypes.c_ulong(0), ctypes.c_ulong(0))),
        "prctl PR_SET_SECCOMP",
    )
