"""ctypes for BPF programs: bpf(2) for cgroup device programs, prctl for seccomp filters.

The second ctypes module of the engine (after `nvmount._libc`, whose `Libc` it uses for the
call and EINTR/errno handling). Used only by `nvmount.cgroup.bpf` (eBPF device programs of
cgroup v2) and `nvmount.ldcache.sandbox` (the classic-BPF seccomp filter of the ldconfig
sandbox). Building and decoding instructions (plain bytes) lives with those users.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os

from nvmount.errors import strerror

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from nvmount._libc import Libc


def bpf(libc: Libc, cmd: int, attr: ctypes.Array[ctypes.c_char] | ctypes.Structure) -> int:
    """bpf(2) with a caller-built attr union; returns the syscall's result."""
    return libc.syscall("bpf", cmd, ctypes.byref(attr), ctypes.c_uint(ctypes.sizeof(attr)))


# == bpf(2) commands for cgroup device programs (used by nvmount/cgroup/bpf.py) ==============
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
        return bpf(libc, cmd, attr)
    except OSError as err:
        raise OSError(err.errno, f"bpf {name}: {strerror(err)}") from err


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


# -- seccomp (the classic-BPF program is built by nvmount.ldcache.seccomp) -------------
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_set_filter(libc: Libc, program: bytes) -> None:
    """Install a classic-BPF seccomp filter (packed 8-byte sock_filter entries) on the calling
    thread; it is inherited across fork and exec. Needs no_new_privs (or CAP_SYS_ADMIN)."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog))
