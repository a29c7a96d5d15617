"""Device cgroup, v2: extend the cgroup's BPF_CGROUP_DEVICE programs with our allow rules.

Stage: the last step of apply (after mounts and ldcache). Touches only the bpf programs
attached directly to the container's cgroup. The instruction assembler and decoder here are
pure (bytes in, bytes out); the bpf(2) plumbing is in `nvmount/_bpf.py`.

How it differs from libnvidia-container (libnvc-spec §4.3, Appendix B):
- Every attached program is replaced ATOMICALLY by our rules + its own old instructions, with
  BPF_PROG_ATTACH(BPF_F_ALLOW_MULTI | BPF_F_REPLACE, replace_bpf_fd = old). NVIDIA detaches the
  old programs first and attaches the new ones after, so a failure in between leaves the cgroup
  without any device filter. Here the cgroup is never unfiltered: while the programs are swapped
  one by one, every attached program still runs (ALLOW_MULTI means all must allow), so the
  access set only ever grows towards the target, and a failure swaps the done ones back.
- With several programs attached, ALL of them are extended: one unextended program keeps
  denying the device.
- No program attached means all devices are allowed: nothing is done (NVIDIA builds a program
  the verifier rejects, `R0 !read_ok`, and fails).
- One prologue, then the rules grouped by access: one access check per group and one
  3-instruction block per rule (`if key != major<<20|minor skip; allow`). A block has a single
  conditional jump, so the verifier's pending branches do not grow with the rules: with a
  check per field (4 per rule) it refused ~2700 rules and more ("The sequence of 8193 jumps
  is too complex"; a 64-GPU MIG config request has ~9000). The type is read with a 32-bit
  load and a mask (endian-neutral) instead of a 16-bit load; compares are JMP32.
- Programs that call helpers or use maps cannot be re-loaded from their xlated form: refused
  with a clear error instead of loading something that behaves differently.
- RLIMIT_MEMLOCK is not raised: since Linux 5.11 bpf memory is charged to the memory cgroup
  (CAP_SYS_RESOURCE may be missing, as on crun's failure in clients.md §4).
Not handled: programs attached through a bpf link (BPF_F_REPLACE cannot target them; the
attach fails with ENOENT and everything is rolled back), and programs attached to ancestor
cgroups (they keep applying; a warning is logged).
"""

from __future__ import annotations

import errno
import os
import struct
import sys

from nvmount.cgroup.common import NoChange, format_rule, open_cgroup_dir, undo_quietly
from nvmount.errors import CgroupError
from nvmount.log import get_logger
from nvmount.records import mutable_record, record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence

    from nvmount._libc import Libc
    from nvmount.cgroup.common import CgroupChange
    from nvmount.container.cgroup import CgroupTarget
    from nvmount.plan.types import DeviceRule

log = get_logger(__name__)

LICENSE = "Apache-2.0"
PROG_NAME = "nvhook_devices"

# bpf_cgroup_dev_ctx: u32 access_type (low 16 bits type, high 16 bits access), u32 major, minor
DEV_BLOCK = 1
DEV_CHAR = 2
ACC_MKNOD = 1
ACC_READ = 2
ACC_WRITE = 4
_ACCESS_BITS = {"m": ACC_MKNOD, "r": ACC_READ, "w": ACC_WRITE}

# opcodes (linux/bpf_common.h, linux/bpf.h)
_CLASS_MASK = 0x07
_LD, _LDX, _ST, _JMP, _JMP32 = 0x00, 0x01, 0x02, 0x05, 0x06
_LDX_W = 0x61  # ldxw dst, [src+off]
_AND32_K = 0x54
_RSH32_K = 0x74
_LSH32_K = 0x64
_OR32_X = 0x4C
_MOV32_K = 0xB4
_MOV32_X = 0xBC
_JNE32_K = 0x56
_JNE32_X = 0x5E
_JGT32_K = 0x26
_EXIT = 0x95
_CALL = 0x85
_LD_IMM64 = 0x18
_MODE_MASK, _MODE_MEM = 0xE0, 0x60

BLOCK_LEN = 3  # instructions per rule
GROUP_LEN = 3  # instructions per access group
MINOR_BITS = 20  # the kernel's dev_t: 12-bit major, 20-bit minor (the key is exact)
_MAX_REG = 10  # r10 = frame pointer; r11 is the kernel-internal AX
_INSN = struct.Struct("=BBhi")


@record
class Insn:
    """One eBPF instruction (struct bpf_insn)."""

    code: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0


# -- pure: assembler / decoder -------------------------------------------------------------
def encode(insns: Sequence[Insn], byteorder: str = sys.byteorder) -> bytes:
    """struct bpf_insn bytes; the register nibbles follow the bitfield order of `byteorder`."""
    fmt = struct.Struct("<BBhi" if byteorder == "little" else ">BBhi")
    out = bytearray()
    for i in insns:
        regs = (i.dst | i.src << 4) if byteorder == "little" else (i.dst << 4 | i.src)
        out += fmt.pack(i.code, regs, i.off, i.imm)
    return bytes(out)


def decode(data: bytes, byteorder: str = sys.byteorder) -> tuple[Insn, ...]:
    if len(data) % _INSN.size:
        raise ValueError(f"program of {len(data)} bytes is not a whole number of instructions")
    fmt = struct.Struct("<BBhi" if byteorder == "little" else ">BBhi")
    out = []
    for code, regs, off, imm in fmt.iter_unpack(data):
        dst, src = (regs & 0xF, regs >> 4) if byteorder == "little" else (regs >> 4, regs & 0xF)
        out.append(Insn(code, dst, src, off, imm))
    return tuple(out)


def access_mask(access: str) -> int:
    return sum(_ACCESS_BITS[c] for c in set(access))


def prologue() -> tuple[Insn, ...]:
    """r2 = type, r3 = access, r4 = major, r5 = minor; r1 (ctx) is left untouched."""
    return (
        Insn(_LDX_W, dst=2, src=1, off=0),
        Insn(_AND32_K, dst=2, imm=0xFFFF),
        Insn(_LDX_W, dst=3, src=1, off=0),
        Insn(_RSH32_K, dst=3, imm=16),
        Insn(_LDX_W, dst=4, src=1, off=4),
        Insn(_LDX_W, dst=5, src=1, off=8),
    )


def key_check(skip: int) -> tuple[Insn, ...]:
    """Char devices with a major and minor that fit dev_t only (else jump `skip` ahead of the
    end of these 6 instructions), then r7 = major << 20 | minor: one exact 32-bit key."""
    return (
        Insn(_JNE32_K, dst=2, off=skip + 5, imm=DEV_CHAR),
        Insn(_JGT32_K, dst=4, off=skip + 4, imm=(1 << (32 - MINOR_BITS)) - 1),
        Insn(_JGT32_K, dst=5, off=skip + 3, imm=(1 << MINOR_BITS) - 1),
        Insn(_MOV32_X, dst=7, src=4),
        Insn(_LSH32_K, dst=7, imm=MINOR_BITS),
        Insn(_OR32_X, dst=7, src=5),
    )


def group_check(access: str, rules: int) -> tuple[Insn, ...]:
    """The request asks for no more than `access`, else skip the group's `rules` blocks."""
    return (
        Insn(_MOV32_X, dst=6, src=3),
        Insn(_AND32_K, dst=6, imm=access_mask(access)),
        Insn(_JNE32_X, dst=6, src=3, off=BLOCK_LEN * rules),
    )


def rule_block(rule: DeviceRule) -> tuple[Insn, ...]:
    """Allow (return 1) when the key is `rule`'s major:minor; else go on after the block."""
    return (
        Insn(_JNE32_K, dst=7, off=2, imm=rule.major << MINOR_BITS | rule.minor),
        Insn(_MOV32_K, dst=0, imm=1),
        Insn(_EXIT),
    )


def extend_program(rules: Sequence[DeviceRule], old: Sequence[Insn]) -> tuple[Insn, ...]:
    """Our rules first, then the old program unchanged (its relative jumps stay valid). The
    rules are validated (`validate_rules`: major and minor within dev_t), grouped by access."""
    groups: dict[int, list[DeviceRule]] = {}
    for rule in rules:
        groups.setdefault(access_mask(rule.access), []).append(rule)
    body: list[Insn] = []
    for members in groups.values():
        body += group_check(members[0].access, len(members))
        for rule in members:
            body += rule_block(rule)
    return (*prologue(), *key_check(len(body)), *body, *old)


def program_length(rules: int, groups: int, old: int) -> int:
    """Instructions of `extend_program` for `rules` rules in `groups` access groups."""
    return len(prologue()) + 6 + GROUP_LEN * groups + BLOCK_LEN * rules + old


def allowlist_program(rules: Sequence[DeviceRule]) -> tuple[Insn, ...]:
    """A deny-by-default program allowing only `rules` (what runc attaches, in spirit)."""
    return extend_program(rules, (Insn(_MOV32_K, dst=0, imm=0), Insn(_EXIT)))


def unreloadable_reason(insns: Sequence[Insn]) -> str | None:
    """Why xlated instructions cannot be loaded again as they are (None: they can)."""
    if not insns:
        return "it has no instructions"
    second_half = False  # the second slot of a 16-byte ld_imm64 carries only data
    for n, insn in enumerate(insns):
        if second_half:
            second_half = False
            continue
        cls = insn.code & _CLASS_MASK
        if insn.dst > _MAX_REG or insn.src > _MAX_REG:
            return (f"instruction {n} uses the JIT's hidden register (constant blinding: "
                    "net.core.bpf_jit_harden)")
        if cls in (_JMP, _JMP32) and insn.code & 0xF0 == 0x80:
            return f"instruction {n} calls a function (helpers are rewritten in xlated code)"
        if insn.code == _LD_IMM64:
            if insn.src != 0:
                return f"instruction {n} loads a map or other kernel object"
            second_half = True
        elif cls == _LD:
            return f"instruction {n} is a legacy packet load (opcode {insn.code:#04x})"
        if cls == _ST and insn.code & _MODE_MASK != _MODE_MEM:
            return f"instruction {n} is a kernel-internal store (opcode {insn.code:#04x})"
    return None


# -- effects ------------------------------------------------------------------------------
@mutable_record
class _Swap:
    """One device program replaced in a cgroup: ours, the old one, whether swapped."""

    prog_id: int  # id of the program we replaced
    old_fd: int
    new_fd: int
    swapped: bool = False


class BpfChange:
    """Programs replaced in one cgroup; `undo` swaps the old ones back, `close` keeps ours."""

    def __init__(self, path: str, cg_fd: int, flags: int, swaps: list[_Swap], libc: Libc,
                 rules: tuple[DeviceRule, ...]) -> None:
        self.path = path
        self.rules = rules
        self._cg_fd: int | None = cg_fd
        self._flags = flags
        self._swaps = swaps
        self._libc = libc

    def describe(self) -> str:
        ids = ",".join(str(s.prog_id) for s in self._swaps if s.swapped) or "none"
        rules = ", ".join(format_rule(r) for r in self.rules)
        return f"cgroup v2 {self.path}: device program(s) {ids} extended with {rules}"

    def undo(self) -> None:
        """Swap every replaced program back (each atomically); raise after trying them all."""
        failed: list[str] = []
        if self._cg_fd is not None:
            for swap in reversed(self._swaps):
                if not swap.swapped:
                    continue
                try:
                    _replace(self._libc, self._cg_fd, self._flags, swap.old_fd, swap.new_fd)
                    swap.swapped = False
                except OSError as err:
                    failed.append(f"program {swap.prog_id}: {err.strerror}")
        self.close()
        if failed:
            raise CgroupError(f"restore device programs of cgroup {self.path}: "
                              f"{'; '.join(failed)} (the cgroup keeps the extended program)")

    def close(self) -> None:
        """Drop our fds; attached programs stay attached (the kernel holds them)."""
        for swap in self._swaps:
            for fd in (swap.old_fd, swap.new_fd):
                if fd >= 0:
                    os.close(fd)
            swap.old_fd = swap.new_fd = -1
        if self._cg_fd is not None:
            os.close(self._cg_fd)
            self._cg_fd = None


def _replace(libc: Libc, cg_fd: int, flags: int, new_fd: int, old_fd: int) -> None:
    from nvmount import _bpf as B

    if flags & B.BPF_F_ALLOW_MULTI:
        B.bpf_prog_attach(libc, cg_fd, new_fd, B.BPF_CGROUP_DEVICE,
                          B.BPF_F_ALLOW_MULTI | B.BPF_F_REPLACE, replace_fd=old_fd)
    else:  # single-program mode: attaching with the same flags replaces the one program
        B.bpf_prog_attach(libc, cg_fd, new_fd, B.BPF_CGROUP_DEVICE, flags)


def allow_devices_bpf(target: CgroupTarget, rules: tuple[DeviceRule, ...],
                      libc: Libc) -> CgroupChange:
    """Prepend `rules` to every device program attached to `target` (validated rules)."""
    from nvmount import _libc as L

    cg_fd = open_cgroup_dir(target.path, libc, os.O_RDONLY, L.CGROUP2_SUPER_MAGIC, 2)
    change = BpfChange(target.path, cg_fd, 0, [], libc, rules)
    try:
        flags, ids = _query(libc, cg_fd, target.path)
        if not ids:
            log.info("cgroup v2 %s has no device program: all devices are allowed, nothing to do",
                     target.path)
            change.close()
            return NoChange(target.path)
        change._flags = flags
        for prog_id in ids:
            _prepare(libc, change, prog_id, rules)
        for swap in change._swaps:
            _swap_in(libc, cg_fd, flags, swap, target.path)
    except BaseException:
        undo_quietly(change)
        raise
    log.info("%s", change.describe())
    return change


def _query(libc: Libc, cg_fd: int, path: str) -> tuple[int, tuple[int, ...]]:
    from nvmount import _bpf as B

    try:
        flags, ids = B.bpf_prog_query(libc, cg_fd, B.BPF_CGROUP_DEVICE)
        _, effective = B.bpf_prog_query(libc, cg_fd, B.BPF_CGROUP_DEVICE,
                                        B.BPF_F_QUERY_EFFECTIVE)
    except OSError as err:
        raise CgroupError(f"query device programs of cgroup {path}: {err.strerror} "
                          "(needs CAP_SYS_ADMIN and a kernel with cgroup bpf)") from err
    inherited = sorted(set(effective) - set(ids))
    if inherited:
        log.warning("cgroup v2 %s inherits device program(s) %s from a parent cgroup: they "
                    "still apply and may deny the devices", path, inherited)
    log.debug("cgroup v2 %s: device programs %s, attach flags %#x", path, ids, flags)
    return flags, ids


def _prepare(libc: Libc, change: BpfChange, prog_id: int, rules: tuple[DeviceRule, ...]) -> None:
    """Open program `prog_id`, load its extended copy (nothing attached yet); fds go to `change`."""
    from nvmount import _bpf as B

    what = f"device program {prog_id} of cgroup {change.path}"
    try:
        swap = _Swap(prog_id, B.bpf_prog_get_fd_by_id(libc, prog_id), -1)
    except OSError as err:
        raise CgroupError(f"open {what}: {err.strerror} (an LSM may deny bpf access)") from err
    change._swaps.append(swap)
    try:
        info = B.bpf_prog_info(libc, swap.old_fd)
        old = decode(info.xlated)
    except (OSError, ValueError) as err:
        raise CgroupError(f"read {what}: {err}") from err
    reason = (unreloadable_reason(old) if info.prog_type == B.BPF_PROG_TYPE_CGROUP_DEVICE
              else f"it has program type {info.prog_type}")
    if reason:
        raise CgroupError(f"extend {what} ({info.name or 'unnamed'}): {reason} "
                          "(only plain programs like runc's and systemd's can be extended)")
    try:
        swap.new_fd = B.bpf_prog_load(libc, B.BPF_PROG_TYPE_CGROUP_DEVICE,
                                      encode(extend_program(rules, old)), LICENSE, PROG_NAME)
    except B.BpfLoadError as err:
        tail = " | ".join(err.log.strip().splitlines()[-4:]) or "no verifier log"
        raise CgroupError(f"load extended {what}: {err.strerror} (verifier: {tail})") from err
    log.debug("loaded extended copy of %s (%s, %d -> %d instructions)", what, info.name,
              len(old), program_length(len(rules), len({access_mask(r.access) for r in rules}),
                                        len(old)))


def _swap_in(libc: Libc, cg_fd: int, flags: int, swap: _Swap, path: str) -> None:
    try:
        _replace(libc, cg_fd, flags, swap.new_fd, swap.old_fd)
    except OSError as err:
        hint = ("the program is attached through a bpf link or was detached meanwhile"
                if err.errno == errno.ENOENT else "needs CAP_SYS_ADMIN")
        raise CgroupError(f"replace device program {swap.prog_id} in cgroup {path}: "
                          f"{err.strerror} ({hint})") from err
    swap.swapped = True
    log.debug("cgroup v2 %s: device program %d replaced", path, swap.prog_id)
