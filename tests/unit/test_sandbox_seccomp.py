"""The seccomp program builder (the kernel-side behaviour is tested in integration)."""

from __future__ import annotations

import os
import struct

import pytest

from execserver.sandbox import seccomp
from execserver.wire.errors import INVALID_PARAMS, RpcError


def _instructions(program: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
@pytest.mark.parametrize("restricted", [True, False])
def test_program_is_well_formed(machine: str, restricted: bool) -> None:
    program = seccomp.build_program(network_restricted=restricted, machine=machine)
    code = _instructions(program)
    assert code[0] == (0x20, 0, 0, 4)  # load arch first
    assert code[-1] == (0x06, 0, 0, 0x7FFF0000)  # default allow
    for opcode, jt, jf, _ in code:
        if opcode == 0x15:  # every jump lands inside the program
            assert jt < len(code) and jf < len(code)


def test_restricted_program_denies_connect_and_ptrace_with_eperm() -> None:
    code = _instructions(seccomp.build_program(network_restricted=True, machine="x86_64"))
    checked = {k for op, _, _, k in code if op == 0x15}
    assert {42, 101, 49, 425} <= checked  # connect, ptrace, bind, io_uring_setup
    assert (0x06, 0, 0, 0x00050000 | 1) in code


def test_enabled_program_denies_no_network_syscall_but_the_always_denied_list() -> None:
    code = _instructions(seccomp.build_program(network_restricted=False, machine="x86_64"))
    checked = {k for op, _, _, k in code if op == 0x15}
    assert 42 not in checked and 101 not in checked  # connect, ptrace stay allowed
    assert {425, 426, 427, 40} <= checked  # io_uring_*, AF_VSOCK
    assert {165, 175, 250, 272} <= checked  # mount, init_module, keyctl, unshare


def test_unknown_architecture_fails_closed() -> None:
    with pytest.raises(RpcError) as info:
        seccomp.build_program(network_restricted=True, machine="sparc64")
    assert info.value.code == INVALID_PARAMS


def test_program_fd_yields_the_program_then_eof() -> None:
    fd = seccomp.program_fd(b"12345678")
    try:
        assert os.read(fd, 100) == b"12345678"
        assert os.read(fd, 100) == b""
    finally:
        os.close(fd)
