"""The seccomp-BPF program the daemon builds for every sandboxed child.

Why hand-assembled classic BPF instead of libseccomp: the filter is a short,
fixed list (about 30 instructions), the daemon runs in a venv where Debian's
``python3-seccomp`` bindings (system python only) are not importable, and a
pure-Python builder needs no shared library at all. The program is handed to
the kernel by someone else: bwrap applies it with ``--seccomp FD`` right before
exec, and ``launcher.py`` applies it with ``prctl(PR_SET_SECCOMP)`` on hosts or
policies where bwrap is not used. Both set ``PR_SET_NO_NEW_PRIVS`` first.

What it denies (errno EPERM, matching codex 0.169.0, sandbox.md §1.4):

* network restricted: ``connect accept accept4 bind listen getpeername
  getsockname shutdown sendto sendmmsg recvmmsg getsockopt setsockopt``,
  ``socket``/``socketpair`` for every domain except AF_UNIX, ``ptrace``,
  ``process_vm_readv/writev``, ``io_uring_*``. ``sendmsg``/``recvmsg``/
  ``recvfrom`` stay allowed so inherited pipes/socketpairs keep working.
  ``getpeername``/``getsockname`` are denied for parity even though they only
  query existing fds (consequence: Debian's bash then sources ``~/.bashrc`` for
  ``bash -c``, exactly as under codex).
* network enabled: only ``io_uring_*`` and AF_VSOCK sockets (VM sockets reach
  host services that no filesystem or network namespace covers).

A syscall from a foreign architecture (e.g. i386 via ``int 0x80`` on x86_64)
kills the process: those numbers are not covered by the table. x32 syscall
numbers (bit 30 set) get EPERM.
"""

from __future__ import annotations

import errno
import os
import struct
from typing import Final

from execserver.wire.errors import RpcError

_BPF_LD_W_ABS: Final = 0x20
_BPF_JEQ_K: Final = 0x15
_BPF_JGE_K: Final = 0x35
_BPF_RET_K: Final = 0x06
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000
_RET_KILL_PROCESS: Final = 0x80000000
_AF_UNIX: Final = 1
_AF_VSOCK: Final = 40
# struct seccomp_data: nr @0, arch @4, instruction_pointer @8, args[6] @16 (u64 each)
_OFF_NR: Final = 0
_OFF_ARCH: Final = 4
_OFF_ARG0_LO: Final = 16  # little-endian: low 32 bits of args[0]
_X32_SYSCALL_BIT: Final = 0x40000000

_ARCHES: Final[dict[str, tuple[int, dict[str, int]]]] = {
    "x86_64": (
        0xC000003E,
        {
            "socket": 41,
            "connect": 42,
            "accept": 43,
            "sendto": 44,
            "shutdown": 48,
            "bind": 49,
            "listen": 50,
            "getsockname": 51,
            "getpeername": 52,
            "socketpair": 53,
            "setsockopt": 54,
            "getsockopt": 55,
            "ptrace": 101,
            "accept4": 288,
            "recvmmsg": 299,
            "sendmmsg": 307,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198,
            "socketpair": 199,
            "bind": 200,
            "listen": 201,
            "accept": 202,
            "connect": 203,
            "getsockname": 204,
            "getpeername": 205,
            "sendto": 206,
            "setsockopt": 208,
            "getsockopt": 209,
            "shutdown": 210,
            "ptrace": 117,
            "accept4": 242,
            "recvmmsg": 243,
            "sendmmsg": 269,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
        },
    ),
}

_IO_URING: Final = ("io_uring_setup", "io_uring_enter", "io_uring_register")
_RESTRICTED_DENY: Final = (
    "connect",
    "accept",
    "accept4",
    "bind",
    "listen",
    "getpeername",
    "getsockname",
    "shutdown",
    "sendto",
    "sendmmsg",
    "recvmmsg",
    "getsockopt",
    "setsockopt",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    *_IO_URING,
)


# netproxy (issue 13): the proxy-routed filter (see build_program).
_PROXY_ROUTED_DENY: Final = ("ptrace", "process_vm_readv", "process_vm_writev", *_IO_URING)
_ACCEPTING: Final = ("bind", "listen", "accept", "accept4")
_AF_INET: Final = 2
_AF_INET6: Final = 10


def supported_machine(machine: str | None = None) -> bool:
    return (machine or os.uname().machine) in _ARCHES


def build_program(
    *,
    network_restricted: bool,
    machine: str | None = None,
    proxy_routed: bool = False,
    allow_local_binding: bool = False,
) -> bytes:
    """The filter as an array of ``struct sock_filter`` (8 bytes each).

    ``proxy_routed`` (netproxy, issue 13): the child runs in a network namespace
    whose only reachable service is the bridge to its managed proxy, so it may
    create AF_INET/AF_INET6 sockets and connect; it may not accept connections
    (bind/listen/accept) unless ``allow_local_binding``. Everything else of the
    restricted filter (ptrace, process_vm_*, io_uring, other domains) stays."""
    machine = machine or os.uname().machine
    if machine not in _ARCHES:
        raise RpcError.invalid_params(
            "sandbox intent cannot be enforced on this executor: "
            f"no seccomp syscall table for architecture {machine}"
        )
    audit_arch, numbers = _ARCHES[machine]
    eperm = _RET_ERRNO | errno.EPERM
    code: list[tuple[int, int, int, int]] = []

    def op(opcode: int, k: int, jt: int = 0, jf: int = 0) -> None:
        code.append((opcode, jt, jf, k))

    op(_BPF_LD_W_ABS, _OFF_ARCH)
    op(_BPF_JEQ_K, audit_arch, 1, 0)
    op(_BPF_RET_K, _RET_KILL_PROCESS)
    op(_BPF_LD_W_ABS, _OFF_NR)
    if machine == "x86_64":
        op(_BPF_JGE_K, _X32_SYSCALL_BIT, 0, 1)
        op(_BPF_RET_K, eperm)
    if proxy_routed:
        denied = _PROXY_ROUTED_DENY + (() if allow_local_binding else _ACCEPTING)
    else:
        denied = _RESTRICTED_DENY if network_restricted else _IO_URING
    for name in denied:
        op(_BPF_JEQ_K, numbers[name], 0, 1)
        op(_BPF_RET_K, eperm)
    # socket()/socketpair(): decide on the domain in args[0].
    if proxy_routed:  # AF_UNIX/AF_INET/AF_INET6: allow; anything else: EPERM
        domains = [(_AF_UNIX, 3, 0), (_AF_INET, 2, 0), (_AF_INET6, 1, 0)]
    elif network_restricted:
        domains = [(_AF_UNIX, 1, 0)]  # AF_UNIX: allow; anything else: EPERM
    else:
        domains = [(_AF_VSOCK, 0, 1)]  # AF_VSOCK: EPERM; anything else: allow
    op(_BPF_JEQ_K, numbers["socket"], 1, 0)
    op(_BPF_JEQ_K, numbers["socketpair"], 0, len(domains) + 2)
    op(_BPF_LD_W_ABS, _OFF_ARG0_LO)
    for domain, jt, jf in domains:
        op(_BPF_JEQ_K, domain, jt, jf)
    op(_BPF_RET_K, eperm)
    op(_BPF_RET_K, _RET_ALLOW)
    return b"".join(struct.pack("=HBBI", c, jt, jf, k) for c, jt, jf, k in code)


def program_fd(program: bytes) -> int:
    """A readable fd holding ``program`` (a pipe: bwrap and the launcher read to EOF)."""
    read_end, write_end = os.pipe()
    try:
        # The program is far below the pipe buffer (64 KiB), so this cannot block.
        os.write(write_end, program)
    finally:
        os.close(write_end)
    return read_end
