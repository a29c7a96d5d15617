"""nvmount.ldcache.seccomp: the deny-list program (pure; the sandbox test runs it for real)."""

from __future__ import annotations

import struct

import pytest

from nvmount.ldcache import seccomp


def _insns(prog: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack_from("=HBBI", prog, i) for i in range(0, len(prog), 8)]


@pytest.mark.parametrize(("machine", "arch"), [("x86_64", 0xC000003E), ("aarch64", 0xC00000B7)])
def test_program_checks_the_architecture_first(machine: str, arch: int) -> None:
    prog = seccomp.denylist_program(machine)
    assert prog is not None and len(prog) % 8 == 0
    insns = _insns(prog)
    assert insns[0] == (0x20, 0, 0, 4)  # load seccomp_data.arch
    assert insns[1] == (0x15, 1, 0, arch)
    assert insns[2] == (0x06, 0, 0, seccomp.RET_KILL_PROCESS)
    assert insns[-1] == (0x06, 0, 0, seccomp.RET_ALLOW)
    assert len(insns) < 4096


def test_every_jump_stays_inside_the_program() -> None:
    prog = seccomp.denylist_program("x86_64")
    assert prog is not None
    insns = _insns(prog)
    for pc, (code, jt, jf, _) in enumerate(insns):
        if code & 0x07 == 0x05:  # BPF_JMP
            assert pc + 1 + max(jt, jf) < len(insns), pc


@pytest.mark.parametrize(("nr", "name"), [(272, "unshare"), (165, "mount"), (250, "keyctl"),
                                          (321, "bpf"), (101, "ptrace")])
def test_x86_64_denies_by_number(nr: int, name: str) -> None:
    prog = seccomp.denylist_program("x86_64")
    assert prog is not None
    insns = _insns(prog)
    hits = [pc for pc, i in enumerate(insns) if i[0] == 0x15 and i[3] == nr]
    assert hits, name
    assert insns[hits[0] + 1] == (0x06, 0, 0, seccomp.RET_ERRNO | 1)  # EPERM


def test_unknown_architecture_gets_no_program() -> None:
    assert seccomp.denylist_program("riscv64") is None
