"""nvmount.cgroup.bpf: the assembler (pure, checked with a tiny interpreter) and cgroup v2
device programs replaced on a real cgroup2 hierarchy mounted in a private mount namespace."""

from __future__ import annotations

import errno
import os
import resource
import struct
import tempfile
from collections.abc import Callable, Sequence

import pytest

from nvmount import _bpf as B
from nvmount import _libc as L
from nvmount.cgroup import bpf as cgroup_bpf
from nvmount.cgroup.allow import allow_devices
from nvmount.cgroup.bpf import (
    ACC_MKNOD,
    ACC_READ,
    ACC_WRITE,
    BLOCK_LEN,
    DEV_BLOCK,
    DEV_CHAR,
    Insn,
    allowlist_program,
    decode,
    encode,
    extend_program,
    program_length,
    prologue,
    rule_block,
    unreloadable_reason,
)
from nvmount.container.cgroup import CgroupTarget
from nvmount.errors import CgroupError
from nvmount.plan.types import DeviceRule
from tests.fixtures.cgroup import (
    CgroupProbe,
    bpftool_path,
    bpftool_progs,
    cgroup2_mount,
    in_private_mntns,
    make_nodes,
    require_v1_devices,
    v1_cgroup,
    v2_cgroup,
)

M32 = 0xFFFFFFFF


# -- a tiny interpreter for the instructions we emit ------------------------------------------
def run(insns: Sequence[Insn], dev_type: int, access: int, major: int, minor: int) -> int:
    ctx = struct.pack("=III", access << 16 | dev_type, major, minor)
    regs, pc = [0] * 11, 0
    for _ in range(10_000):
        i = insns[pc]
        pc += 1
        if i.code == 0x61:  # ldxw dst, [r1+off]
            assert i.src == 1, "only ctx loads expected"
            regs[i.dst] = struct.unpack_from("=I", ctx, i.off)[0]
        elif i.code == 0x54:
            regs[i.dst] &= i.imm & M32
        elif i.code == 0x74:
            regs[i.dst] = (regs[i.dst] & M32) >> i.imm
        elif i.code == 0x64:
            regs[i.dst] = (regs[i.dst] << i.imm) & M32
        elif i.code == 0x4C:
            regs[i.dst] = (regs[i.dst] | regs[i.src]) & M32
        elif i.code == 0x26:
            pc += i.off if (regs[i.dst] & M32) > (i.imm & M32) else 0
        elif i.code == 0xB4:
            regs[i.dst] = i.imm & M32
        elif i.code == 0xBC:
            regs[i.dst] = regs[i.src] & M32
        elif i.code == 0x56:
            pc += i.off if (regs[i.dst] & M32) != (i.imm & M32) else 0
        elif i.code == 0x5E:
            pc += i.off if (regs[i.dst] & M32) != (regs[i.src] & M32) else 0
        elif i.code == 0x05:
            pc += i.off
        elif i.code == 0x95:
            return regs[0]
        else:
            raise AssertionError(f"unexpected opcode {i.code:#x}")
    raise AssertionError("no exit")


DENY_ALL = (Insn(0xB4, dst=0, imm=0), Insn(0x95))
RW, R, M = ACC_READ | ACC_WRITE, ACC_READ, ACC_MKNOD
GPU_RULES = (DeviceRule(195, 0), DeviceRule(195, 255), DeviceRule(10, 200, "rwm"))
OLD_ALLOWS_NULL = allowlist_program([DeviceRule(1, 3, "rwm")])

EVAL_CASES = [
    ("rule-rw", (DEV_CHAR, RW, 195, 0), 1),
    ("rule-read-only-request", (DEV_CHAR, R, 195, 0), 1),
    ("rule-write-only-request", (DEV_CHAR, ACC_WRITE, 195, 255), 1),
    ("mknod-not-granted", (DEV_CHAR, M, 195, 0), 0),
    ("rw-plus-mknod-not-granted", (DEV_CHAR, RW | M, 195, 0), 0),
    ("rwm-rule", (DEV_CHAR, RW | M, 10, 200), 1),
    ("other-minor", (DEV_CHAR, RW, 195, 1), 0),
    ("other-major", (DEV_CHAR, RW, 196, 0), 0),
    ("block-device", (DEV_BLOCK, RW, 195, 0), 0),
    ("old-program-still-allows", (DEV_CHAR, RW, 1, 3), 1),
    ("old-program-still-denies", (DEV_CHAR, RW, 1, 5), 0),
]


@pytest.mark.parametrize(("ctx", "want"), [c[1:] for c in EVAL_CASES],
                         ids=[c[0] for c in EVAL_CASES])
def test_extended_program_semantics(ctx: tuple[int, int, int, int], want: int) -> None:
    assert run(extend_program(GPU_RULES, OLD_ALLOWS_NULL), *ctx) == want


def test_block_jumps_land_after_the_block() -> None:
    block = rule_block(DeviceRule(195, 7))
    assert len(block) == BLOCK_LEN
    jumps = [(n, insn) for n, insn in enumerate(block) if insn.code & 0x07 in (0x05, 0x06)
             and insn.code != 0x95]
    assert [n + 1 + insn.off for n, insn in jumps] == [BLOCK_LEN]  # one branch per rule
    assert all(i.dst != 1 for i in (*prologue(), *block)), "r1 (ctx) must stay untouched"


def test_every_check_jumps_to_the_old_program_or_the_next_block() -> None:
    old = decode(encode(OLD_ALLOWS_NULL))
    new = extend_program(GPU_RULES, old)
    starts = {len(new) - len(old)}
    for n, insn in enumerate(new[:-len(old)]):
        if insn.code in (0x56, 0x5E, 0x26):
            target = n + 1 + insn.off
            assert target == len(new) - len(old) or new[target - 1].code == 0x95, n
            starts.add(target)
    assert all(i.dst != 1 for i in new[:-len(old)]), "r1 (ctx) must stay untouched"


def test_extend_keeps_old_instructions_verbatim() -> None:
    old = decode(encode(OLD_ALLOWS_NULL))
    new = extend_program(GPU_RULES, old)
    assert new[-len(old):] == old
    assert len(new) == program_length(len(GPU_RULES), 2, len(old))  # "rw" and "rwm"


def test_program_grows_by_one_block_per_rule() -> None:
    """Linear, with one conditional jump per rule: the verifier's pending branches do not
    grow with the rules (one check per field refused ~2700 rules and more)."""
    rules = [DeviceRule(237, m) for m in range(9000)]
    program = extend_program(rules, DENY_ALL)
    assert len(program) == program_length(9000, 1, len(DENY_ALL))
    branches = sum(1 for i in program if i.code in (0x56, 0x5E, 0x26))
    assert branches == 9000 + 1 + 3
    assert run(program, DEV_CHAR, RW, 237, 8999) == 1
    assert run(program, DEV_CHAR, RW, 237, 9000) == 0


@pytest.mark.parametrize(("major", "minor"), [(195, 1 << 20), (1 << 12, 0), (0, 195 << 20)],
                         ids=["minor-past-20-bits", "major-past-12-bits", "aliasing-key"])
def test_out_of_range_numbers_never_alias_a_rule(major: int, minor: int) -> None:
    assert run(extend_program(GPU_RULES, DENY_ALL), DEV_CHAR, RW, major, minor) == 0


@pytest.mark.parametrize(("insn", "little", "big"), [
    (Insn(0xB4, dst=0, imm=1), "b400000001000000", "b400000000000001"),
    (Insn(0x61, dst=2, src=1, off=4), "6112040000000000", "6121000400000000"),
    (Insn(0x56, dst=4, off=-3, imm=195), "5604fdffc3000000", "5640fffd000000c3"),
], ids=["mov32", "ldxw-regs", "jne32-negative-off"])
def test_encode_known_bytes(insn: Insn, little: str, big: str) -> None:
    assert encode([insn], "little").hex() == little
    assert encode([insn], "big").hex() == big
    assert decode(bytes.fromhex(little), "little") == (insn,)
    assert decode(bytes.fromhex(big), "big") == (insn,)


def test_decode_rejects_partial_instruction() -> None:
    with pytest.raises(ValueError, match="whole number"):
        decode(b"\x95" * 9)


@pytest.mark.parametrize(("insns", "reason"), [
    ((), "no instructions"),
    ((Insn(0x85, imm=5), *DENY_ALL), "calls a function"),
    ((Insn(0x18, dst=1, src=1, imm=7), Insn(0), *DENY_ALL), "map"),
    ((Insn(0x30, imm=0), *DENY_ALL), "legacy packet load"),
    ((Insn(0xC2), *DENY_ALL), "kernel-internal store"),
    ((Insn(0xB4, dst=11, imm=1), Insn(0xBC, dst=0, src=11), Insn(0x95)), "hidden register"),
    ((Insn(0x18, dst=1, imm=7), Insn(0), *DENY_ALL), None),
    (OLD_ALLOWS_NULL, None),
], ids=["empty", "helper-call", "map-load", "ld-abs", "nospec", "blinded", "plain-imm64",
        "plain"])
def test_unreloadable_reason(insns: tuple[Insn, ...], reason: str | None) -> None:
    got = unreloadable_reason(insns)
    assert (got is None) if reason is None else (reason in (got or ""))


def test_load_error_carries_verifier_log() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    with pytest.raises(B.BpfLoadError) as info:
        B.bpf_prog_load(L.Libc(), B.BPF_PROG_TYPE_CGROUP_DEVICE, encode([Insn(0x95)]),
                        "Apache-2.0", "nvhook_test")
    assert "R0 !read_ok" in info.value.log


# -- real cgroup2 (private mount namespace) ---------------------------------------------------
NODES = {"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidiactl": (195, 255), "null": (1, 3)}
RUNC_LIKE = (DeviceRule(1, 3, "rwm"), DeviceRule(1, 5, "rwm"), DeviceRule(5, 0, "rwm"))


def attach(libc: L.Libc, cg: str, insns: Sequence[Insn], flags: int = B.BPF_F_ALLOW_MULTI
           ) -> tuple[int, int]:
    """(fd, id) of a program loaded from `insns` and attached to `cg` with `flags`."""
    fd = B.bpf_prog_load(libc, B.BPF_PROG_TYPE_CGROUP_DEVICE, encode(insns), "GPL", "test_runc")
    cg_fd = os.open(cg, os.O_RDONLY | os.O_DIRECTORY)
    try:
        B.bpf_prog_attach(libc, cg_fd, fd, B.BPF_CGROUP_DEVICE, flags)
    finally:
        os.close(cg_fd)
    return fd, B.bpf_prog_info(libc, fd).prog_id


def scenario(body: Callable[[L.Libc, str, dict[str, str]], None]) -> None:
    """body(libc, cgroup dir, nodes) on a fresh cgroup of a private cgroup2 mount."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    bpftool_path()  # skip here, not inside the child

    def child() -> None:
        libc = L.Libc()
        with tempfile.TemporaryDirectory() as tmp, cgroup2_mount(libc) as root, \
                v2_cgroup(root) as cg:
            body(libc, cg, make_nodes(tmp, NODES))

    in_private_mntns(child)


def _extend_single_runc_like(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    _, old_id = attach(libc, cg, allowlist_program(RUNC_LIKE))
    with CgroupProbe(f"{cg}/cgroup.procs") as probe:
        assert probe.open_errno(nodes["nvidia0"]) == errno.EPERM
        assert probe.open_errno(nodes["null"]) == 0
        change = allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 0), DeviceRule(195, 255)],
                               libc)
        assert probe.open_errno(nodes["nvidia0"]) == errno.ENXIO
        assert probe.open_errno(nodes["nvidiactl"]) == errno.ENXIO
        assert probe.open_errno(nodes["nvidia1"]) == errno.EPERM
        assert probe.open_errno(nodes["null"]) == 0
        progs = bpftool_progs(cg)
        assert len(progs) == 1 and progs[0][0] != old_id, progs
        assert progs[0][1].startswith("nvhook_dev"), progs
        change.undo()
        assert bpftool_progs(cg) == [(old_id, "test_runc")]
        assert probe.open_errno(nodes["nvidia0"]) == errno.EPERM
        assert probe.open_errno(nodes["null"]) == 0


@pytest.mark.root
def test_v2_extend_runc_like_program_and_undo() -> None:
    scenario(_extend_single_runc_like)


def _two_programs(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    ids = [attach(libc, cg, allowlist_program(RUNC_LIKE))[1],
           attach(libc, cg, allowlist_program((DeviceRule(1, 3, "rw"),)))[1]]
    with CgroupProbe(f"{cg}/cgroup.procs") as probe:
        change = allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 1)], libc)
        assert probe.open_errno(nodes["nvidia1"]) == errno.ENXIO  # every program allows it
        assert probe.open_errno(nodes["nvidia0"]) == errno.EPERM
        now = [i for i, _ in bpftool_progs(cg)]
        assert len(now) == 2 and not set(now) & set(ids), (now, ids)
        change.close()  # success path: the extended programs stay
        assert probe.open_errno(nodes["nvidia1"]) == errno.ENXIO


@pytest.mark.root
def test_v2_extends_every_attached_program() -> None:
    scenario(_two_programs)


def _single_mode(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    _, old_id = attach(libc, cg, allowlist_program(RUNC_LIKE), flags=0)
    with CgroupProbe(f"{cg}/cgroup.procs") as probe:
        change = allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 0)], libc)
        assert probe.open_errno(nodes["nvidia0"]) == errno.ENXIO
        assert len(bpftool_progs(cg)) == 1
        change.undo()
        assert [i for i, _ in bpftool_progs(cg)] == [old_id]
        assert probe.open_errno(nodes["nvidia0"]) == errno.EPERM


@pytest.mark.root
def test_v2_single_program_mode_is_replaced_too() -> None:
    scenario(_single_mode)


def _no_program(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    change = allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 0)], libc)
    assert "unchanged" in change.describe()
    assert bpftool_progs(cg) == []


@pytest.mark.root
def test_v2_no_program_means_nothing_to_do() -> None:
    scenario(_no_program)


def _rollback(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    ids = [attach(libc, cg, allowlist_program(RUNC_LIKE))[1] for _ in range(2)]
    real, calls = cgroup_bpf._replace, []

    def failing_second(*args: int) -> None:
        calls.append(args)
        if len(calls) == 2:
            raise OSError(errno.EIO, "injected")
        real(*args)  # type: ignore[arg-type]

    cgroup_bpf._replace = failing_second  # type: ignore[assignment]
    try:
        with CgroupProbe(f"{cg}/cgroup.procs") as probe:
            with pytest.raises(CgroupError, match=r"replace device program \d+ in cgroup"):
                allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 0)], libc)
            assert [i for i, _ in bpftool_progs(cg)] == ids  # the first swap was undone
            assert probe.open_errno(nodes["nvidia0"]) == errno.EPERM
            assert len(calls) == 3  # swap 1, failing swap 2, swap 1 back
    finally:
        cgroup_bpf._replace = real


@pytest.mark.root
def test_v2_failure_swaps_back_what_was_replaced() -> None:
    scenario(_rollback)


def _helper_program(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    save, restore = Insn(0xBF, dst=6, src=1), Insn(0xBF, dst=1, src=6)  # mov r6,r1; mov r1,r6
    prog = (save, Insn(0x85, imm=5), restore, *allowlist_program(RUNC_LIKE))  # ktime_get_ns
    _, old_id = attach(libc, cg, prog)
    with pytest.raises(CgroupError, match=r"extend device program \d+ .*calls a function"):
        allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 0)], libc)
    assert [i for i, _ in bpftool_progs(cg)] == [old_id]


@pytest.mark.root
def test_v2_refuses_program_it_cannot_reload() -> None:
    scenario(_helper_program)


def _stage_caps_only(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    from nvmount import privileges as P

    attach(libc, cg, allowlist_program(RUNC_LIKE))
    with P.stage(P.Stage.CGROUP):
        assert P.effective() == frozenset(P.STAGE_CAPS[P.Stage.CGROUP])
        allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 0)], libc).undo()
        with v1_cgroup() as v1:
            allow_devices(CgroupTarget(1, v1), [DeviceRule(195, 0)], libc).undo()


@pytest.mark.root
def test_cgroup_stage_capabilities_suffice() -> None:
    """v1 and v2 work with only the CGROUP stage's effective set (nvmount.privileges)."""
    require_v1_devices()
    scenario(_stage_caps_only)


def _zero_memlock(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    attach(libc, cg, allowlist_program(RUNC_LIKE))
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))  # lowering needs no capability
    change = allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 0)], libc)
    assert "extended with c 195:0 rw" in change.describe()
    change.undo()


@pytest.mark.root
def test_v2_needs_no_memlock_rlimit() -> None:
    """Kernel >= 5.11 charges bpf memory to the memory cgroup: RLIMIT_MEMLOCK = 0 is fine,
    so the missing CAP_SYS_RESOURCE (clients.md §9) does not matter."""
    scenario(_zero_memlock)


def _extend_twice(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    attach(libc, cg, allowlist_program(RUNC_LIKE))
    with CgroupProbe(f"{cg}/cgroup.procs") as probe:
        first = allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 0)], libc)
        first.close()
        (after_first,) = bpftool_progs(cg)
        second = allow_devices(CgroupTarget(2, cg), [DeviceRule(195, 1)], libc)
        assert probe.open_errno(nodes["nvidia0"]) == errno.ENXIO
        assert probe.open_errno(nodes["nvidia1"]) == errno.ENXIO
        second.undo()
        assert bpftool_progs(cg) == [after_first]
        assert probe.open_errno(nodes["nvidia0"]) == errno.ENXIO
        assert probe.open_errno(nodes["nvidia1"]) == errno.EPERM


@pytest.mark.root
def test_v2_extended_program_can_be_extended_again() -> None:
    """The kernel's xlated form of our own output reloads (a second hook run, or a restart)."""
    scenario(_extend_twice)


MANY = {"cap-first": (237, 0), "cap-last": (237, 8999), "cap-past": (237, 9000)}


def _many_rules(libc: L.Libc, cg: str, nodes: dict[str, str]) -> None:
    attach(libc, cg, allowlist_program(RUNC_LIKE))
    tmp = os.path.dirname(nodes["null"])
    caps = make_nodes(tmp, MANY)
    rules = [DeviceRule(195, 0), *(DeviceRule(237, m) for m in range(9000))]
    with CgroupProbe(f"{cg}/cgroup.procs") as probe:
        change = allow_devices(CgroupTarget(2, cg), rules, libc)
        assert probe.open_errno(caps["cap-first"]) == errno.ENXIO
        assert probe.open_errno(caps["cap-last"]) == errno.ENXIO
        assert probe.open_errno(caps["cap-past"]) == errno.EPERM
        assert probe.open_errno(nodes["null"]) == 0
        change.undo()
        assert probe.open_errno(caps["cap-last"]) == errno.EPERM


def test_v2_verifier_takes_nine_thousand_rules() -> None:
    """64 GPUs x 7 MIG with mig-config (issue 19, class 5): ~8800 rules. One check per
    field was refused by the verifier ("The sequence of 8193 jumps is too complex")."""
    scenario(_many_rules)
