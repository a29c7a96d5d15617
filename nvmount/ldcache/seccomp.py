"""A seccomp deny-list for helpers we exec in a sandbox (the ldconfig run). Pure: builds the
classic-BPF program; `_libc.Libc.seccomp_filter` installs it.

Why a deny-list: NVIDIA's allow-list for ldconfig broke with each new glibc (clock_gettime
missing -> EPERM spin until the CPU limit, libnvidia-container #324; SIGSYS with older
libseccomp, nvidia-docker #1456). ldconfig needs nothing from what is denied here, so a new
glibc cannot break it, while the kernel surface a compromised helper could reach shrinks:
new namespaces (user namespaces give back capabilities), mounts, keyrings, bpf, perf,
io_uring, userfaultfd, ptrace, module/kexec/reboot/clock/host-name changes, handle-based
opens. Everything denied fails with EPERM; clone3 with ENOSYS (its flags cannot be inspected,
libc then falls back to clone, whose namespace flags are checked). A foreign architecture
(e.g. the x32 ABI or 32-bit syscalls on x86_64) is killed. With `allow_fork=False` (ldconfig,
which never starts a process) clone, fork and vfork fail with EPERM too.
"""

from __future__ import annotations

import errno
import struct

_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "acct", "sethostname", "setdomainname", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex", "open_by_handle_at", "name_to_handle_at", "quotactl", "syslog",
    "vhangup", "pidfd_getfd", "lookup_dcookie", "iopl", "ioperm", "uselib", "modify_ldt",
)

# From the kernel's uapi headers: x86_64 asm/unistd_64.h; aarch64 = asm-generic/unistd.h.
_NR: dict[str, dict[str, int]] = {
    "x86_64": {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165,
        "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
        "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168,
        "acct": 163, "sethostname": 170, "setdomainname": 171, "settimeofday": 164,
        "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "quotactl": 179, "syslog": 103, "vhangup": 153,
        "lookup_dcookie": 212, "iopl": 172, "ioperm": 173, "uselib": 134, "modify_ldt": 154,
        "clone": 56, "fork": 57, "vfork": 58,
    },
    "aarch64": {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "mount": 40,
        "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268,
        "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "reboot": 142, "swapon": 224,
        "swapoff": 225, "acct": 89, "sethostname": 161, "setdomainname": 162,
        "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "quotactl": 60, "syslog": 116,
        "vhangup": 58, "lookup_dcookie": 18, "clone": 220,
    },
}
_COMMON_NR = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
              "fsmount": 432, "fspick": 433, "mount_setattr": 442, "io_uring_setup": 425,
              "io_uring_enter": 426, "io_uring_register": 427, "pidfd_getfd": 438,
              "clone3": 435}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000
# every CLONE_NEW* flag: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
CLONE_NS_FLAGS = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000

# classic BPF opcodes and seccomp return values
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data (args[0] low word: little endian)


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def denylist_program(machine: str, *, allow_fork: bool = True) -> bytes | None:
    """The filter for `machine` (platform.machine()) as packed sock_filter entries, or None
    when we have no syscall table for it (the caller then runs without seccomp)."""
    if machine not in _NR:
        return None
    nr = {**_NR[machine], **_COMMON_NR}
    denied = _DENIED if allow_fork else (*_DENIED, "clone", "fork", "vfork")
    eperm, enosys = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
    prog = [
        _insn(_LD_ABS, _OFF_ARCH),
        _insn(_JEQ, _AUDIT_ARCH[machine], jt=1),
        _insn(_RET, RET_KILL_PROCESS),
        _insn(_LD_ABS, _OFF_NR),
    ]
    if machine == "x86_64":  # x32 syscalls share the arch value: refuse them
        prog += [_insn(_JGE, _X32_SYSCALL_BIT, jf=1), _insn(_RET, eperm)]
    for name in denied:
        if name in nr:
            prog += [_insn(_JEQ, nr[name], jf=1), _insn(_RET, eperm)]
    prog += [_insn(_JEQ, nr["clone3"], jf=1), _insn(_RET, enosys)]
    prog += [  # clone: refuse namespace flags in args[0]
        _insn(_JEQ, nr["clone"], jf=3),
        _insn(_LD_ABS, _OFF_ARG0),
        _insn(_JSET, CLONE_NS_FLAGS, jf=1),
        _insn(_RET, eperm),
        _insn(_RET, RET_ALLOW),
    ]
    return b"".join(prog)
