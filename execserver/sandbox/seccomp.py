"""The seccomp-BPF program the daemon builds for every sandboxed child.

Why hand-assembled classic BPF instead of libseccomp: the filter is a short,
fixed list, the daemon runs in a venv where Debian's ``python3-seccomp``
bindings (system python only) are not importable, and a pure-Python builder
needs no shared library at all. The program is handed to the kernel by someone
else: bwrap applies it with ``--seccomp FD`` right before exec, and
``launcher.py`` applies it with ``prctl(PR_SET_SECCOMP)`` on hosts or policies
where bwrap is not used. Both set ``PR_SET_NO_NEW_PRIVS`` first.

What it denies (errno EPERM unless noted):

* always (every mode, beyond the reference):
  - host administration and kernel surface a sandboxed command never needs:
    ``mount umount2 pivot_root move_mount open_tree fs*`` (new mount API),
    ``(f)init_module delete_module kexec_* reboot swapon swapoff sethostname
    setdomainname acct settimeofday clock_settime clock_adjtime adjtimex
    syslog bpf perf_event_open userfaultfd quotactl open_by_handle_at
    iopl ioperm unshare setns``. Under bwrap the capability drop already makes
    most of them fail; the launcher backends (Landlock, seccomp-only) rely on
    this list as a second line behind the capability drop.
  - the kernel keyrings: ``keyctl add_key request_key`` (a sandbox must not
    read or plant keys in the daemon's session keyring).
  - setuid/setgid files: ``chmod fchmod fchmodat fchmodat2`` with S_ISUID or
    S_ISGID in the mode, and ``open openat creat mknod mknodat`` creating a
    file with those bits. ``openat2`` carries its mode in a struct seccomp
    cannot read: ENOSYS (libc and runtimes fall back to ``openat``).
  - io_uring (``io_uring_*``) and AF_VSOCK sockets (VM sockets reach host
    services that no filesystem or network namespace covers).
* network restricted (matching codex 0.169.0's network filter): ``connect
  accept accept4 bind listen getpeername getsockname shutdown sendto sendmmsg
  recvmmsg getsockopt setsockopt ptrace process_vm_readv/writev``, ``socket``
  for every domain except AF_UNIX. Beyond the reference: AF_UNIX *datagram*
  sockets (``socket`` and ``socketpair``) are refused too, because
  ``sendmsg`` with a destination address (``msg_name``, which seccomp cannot
  read) reaches host datagram sockets such as ``/dev/log`` or
  ``/run/systemd/notify`` without any ``connect``. Stream and seqpacket
  sockets stay (``socketpair`` pipes keep working; their ``sendmsg`` ignores
  or refuses an address).
* proxy-routed (managed network): like restricted, except that AF_INET and
  AF_INET6 sockets may connect (the namespace's only reachable service is the
  bridge to the proxy); no AF_UNIX ``socket`` at all, since ``connect`` is
  allowed and seccomp cannot see the path it names — host unix sockets are
  reachable only through the proxy's ``x-unix-socket`` policy. AF_UNIX stream
  ``socketpair`` stays. bind/listen/accept only with ``allowLocalBinding``.
* network enabled: only what "always" lists.
* nested namespaces (``nested_namespaces``: the launcher's ``--namespaces``
  mode, for policies without filesystem restriction): the command is in user,
  mount, pid and cgroup namespaces of its own, so the mount family,
  ``unshare``, ``setns``, ``sethostname`` and ``setdomainname`` act on
  namespaces it owns (or fail for lack of a capability in the host's) and are
  allowed, as the reference allows them. Except a nested **cgroup**
  namespace (``unshare``/``clone`` with CLONE_NEWCGROUP; ``clone3``, whose
  flags are in a struct, gets ENOSYS and the C libraries fall back to
  ``clone``): in a cgroup namespace of its own the command could mount a
  cgroup file system rooted at its own cgroup and rewrite its limits.

``getpeername``/``getsockname`` are denied in restricted mode for parity even
though they only query existing fds (consequence: Debian's bash then sources
``~/.bashrc`` for ``bash -c``, exactly as under codex).

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

__all__ = ["build_program", "program_fd", "supported_machine"]

_BPF_LD_W_ABS: Final = 0x20
_BPF_ALU_AND_K: Final = 0x54
_BPF_JEQ_K: Final = 0x15
_BPF_JGE_K: Final = 0x35
_BPF_JSET_K: Final = 0x45
_BPF_RET_K: Final = 0x06
_RET_ALLOW: Final = 0x7FFF0000
_RET_ERRNO: Final = 0x00050000
_RET_KILL_PROCESS: Final = 0x80000000
_AF_UNIX: Final = 1
_AF_INET: Final = 2
_AF_INET6: Final = 10
_AF_VSOCK: Final = 40
_SOCK_DGRAM: Final = 2
_CLONE_NEWCGROUP: Final = 0x02000000
_SOCK_TYPE_MASK: Final = 0xF  # the type without SOCK_NONBLOCK / SOCK_CLOEXEC
_SETID_BITS: Final = 0o6000  # S_ISUID | S_ISGID
# struct seccomp_data: nr @0, arch @4, instruction_pointer @8, args[6] @16 (u64 each)
_OFF_NR: Final = 0
_OFF_ARCH: Final = 4
_OFF_ARGS: Final = 16
_X32_SYSCALL_BIT: Final = 0x40000000


def _arg_lo(index: int) -> int:
    """Offset of the low 32 bits of args[index] (little-endian)."""
    return _OFF_ARGS + 8 * index


# Syscalls added since Linux 5.1 share one number on every architecture.
_UNIFIED_NUMBERS: Final[dict[str, int]] = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "openat2": 437,
    "fchmodat2": 452,
}

# Syscalls that appear on one architecture only are simply absent from the other.
_ARCHES: Final[dict[str, tuple[int, dict[str, int]]]] = {
    "x86_64": (
        0xC000003E,
        {
            "open": 2,
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
            "clone": 56,
            "creat": 85,
            "chmod": 90,
            "fchmod": 91,
            "ptrace": 101,
            "syslog": 103,
            "mknod": 133,
            "pivot_root": 155,
            "adjtimex": 159,
            "acct": 163,
            "settimeofday": 164,
            "mount": 165,
            "umount2": 166,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "sethostname": 170,
            "setdomainname": 171,
            "iopl": 172,
            "ioperm": 173,
            "init_module": 175,
            "delete_module": 176,
            "quotactl": 179,
            "clock_settime": 227,
            "kexec_load": 246,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "openat": 257,
            "mknodat": 259,
            "fchmodat": 268,
            "unshare": 272,
            "accept4": 288,
            "perf_event_open": 298,
            "recvmmsg": 299,
            "open_by_handle_at": 304,
            "clock_adjtime": 305,
            "sendmmsg": 307,
            "setns": 308,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "finit_module": 313,
            "kexec_file_load": 320,
            "bpf": 321,
            "userfaultfd": 323,
            **_UNIFIED_NUMBERS,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "mknodat": 33,
            "umount2": 39,
            "mount": 40,
            "pivot_root": 41,
            "fchmod": 52,
            "fchmodat": 53,
            "openat": 56,
            "quotactl": 60,
            "acct": 89,
            "unshare": 97,
            "kexec_load": 104,
            "init_module": 105,
            "delete_module": 106,
            "clock_settime": 112,
            "syslog": 116,
            "ptrace": 117,
            "reboot": 142,
            "sethostname": 161,
            "setdomainname": 162,
            "settimeofday": 170,
            "adjtimex": 171,
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
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "clone": 220,
            "swapon": 224,
            "swapoff": 225,
            "perf_event_open": 241,
            "accept4": 242,
            "recvmmsg": 243,
            "open_by_handle_at": 265,
            "clock_adjtime": 266,
            "setns": 268,
            "sendmmsg": 269,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "finit_module": 273,
            "bpf": 280,
            "userfaultfd": 282,
            "kexec_file_load": 294,
            **_UNIFIED_NUMBERS,
        },
    ),
}

_IO_URING: Final = ("io_uring_setup", "io_uring_enter", "io_uring_register")
_MOUNT_CALLS: Final = (
    "mount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
)
_HOST_NAMING: Final = ("sethostname", "setdomainname")
_NAMESPACE_CALLS: Final = ("unshare", "setns")
_ALWAYS_DENY: Final = (
    *_MOUNT_CALLS,
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    *_HOST_NAMING,
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "syslog",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "quotactl",
    "open_by_handle_at",
    "iopl",
    "ioperm",
    *_NAMESPACE_CALLS,
    "keyctl",
    "add_key",
    "request_key",
    *_IO_URING,
)
# What a command in namespaces of its own (nested_namespaces) may do: it acts on
# them, not on the host's.
_NESTED_ALLOWED: Final = frozenset({*_MOUNT_CALLS, *_NAMESPACE_CALLS, *_HOST_NAMING})
# (syscall, index of its mode argument): refused when the mode has S_ISUID/S_ISGID.
_MODE_ARG: Final = (
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    ("open", 2),
    ("openat", 3),
    ("creat", 1),
    ("mknod", 1),
    ("mknodat", 2),
)
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
)
# netproxy: the proxy-routed filter (see build_program).
_PROXY_ROUTED_DENY: Final = ("ptrace", "process_vm_readv", "process_vm_writev")
_ACCEPTING: Final = ("bind", "listen", "accept", "accept4")

Instruction = tuple[int, int, int, int]  # (opcode, jt, jf, k)


def supported_machine(machine: str | None = None) -> bool:
    return (machine or os.uname().machine) in _ARCHES


def _block(nr: int, body: list[Instruction]) -> list[Instruction]:
    """``if syscall == nr: body``. ``body`` ends in returns only, so whoever falls
    past the block still has the syscall number in A."""
    return [(_BPF_JEQ_K, 0, len(body), nr), *body]


def _ret(value: int) -> Instruction:
    return (_BPF_RET_K, 0, 0, value)


def _mode_body(arg: int, eperm: int) -> list[Instruction]:
    return [
        (_BPF_LD_W_ABS, 0, 0, _arg_lo(arg)),
        (_BPF_JSET_K, 0, 1, _SETID_BITS),
        _ret(eperm),
        _ret(_RET_ALLOW),
    ]


def _unix_non_dgram_body(eperm: int) -> list[Instruction]:
    """A = domain: AF_UNIX of a non-datagram type -> allow; anything else -> EPERM."""
    return [
        (_BPF_JEQ_K, 0, 4, _AF_UNIX),
        (_BPF_LD_W_ABS, 0, 0, _arg_lo(1)),
        (_BPF_ALU_AND_K, 0, 0, _SOCK_TYPE_MASK),
        (_BPF_JEQ_K, 1, 0, _SOCK_DGRAM),
        _ret(_RET_ALLOW),
        _ret(eperm),
    ]


def _socket_bodies(
    eperm: int, *, network_restricted: bool, proxy_routed: bool, allow_unix: bool
) -> tuple[list[Instruction], list[Instruction]]:
    """(socket body, socketpair body); both start by loading the domain."""
    load_domain = (_BPF_LD_W_ABS, 0, 0, _arg_lo(0))
    if proxy_routed and allow_unix:
        inet_or_unix = [
            load_domain,
            (_BPF_JEQ_K, 2, 0, _AF_INET),
            (_BPF_JEQ_K, 1, 0, _AF_INET6),
            (_BPF_JEQ_K, 0, 1, _AF_UNIX),
            _ret(_RET_ALLOW),
            _ret(eperm),
        ]
        return inet_or_unix, [
            load_domain,
            (_BPF_JEQ_K, 0, 1, _AF_UNIX),
            _ret(_RET_ALLOW),
            _ret(eperm),
        ]
    if proxy_routed:
        inet = [
            load_domain,
            (_BPF_JEQ_K, 1, 0, _AF_INET),
            (_BPF_JEQ_K, 0, 1, _AF_INET6),
            _ret(_RET_ALLOW),
            _ret(eperm),
        ]
        return inet, [load_domain, *_unix_non_dgram_body(eperm)]
    if network_restricted:
        unix = [load_domain, *_unix_non_dgram_body(eperm)]
        return unix, unix
    no_vsock = [load_domain, (_BPF_JEQ_K, 0, 1, _AF_VSOCK), _ret(eperm), _ret(_RET_ALLOW)]
    return no_vsock, no_vsock


def build_program(
    *,
    network_restricted: bool,
    machine: str | None = None,
    proxy_routed: bool = False,
    allow_local_binding: bool = False,
    allow_unix_sockets: bool = False,
    nested_namespaces: bool = False,
) -> bytes:
    """The filter as an array of ``struct sock_filter`` (8 bytes each).

    ``proxy_routed``: the child runs in a network namespace whose only
    reachable service is the bridge to its managed proxy, so it may create
    AF_INET/AF_INET6 sockets and connect; it may not accept connections
    (bind/listen/accept) unless ``allow_local_binding``, and may not create
    AF_UNIX sockets (only stream socketpairs) unless ``allow_unix_sockets``
    (the request's ``dangerouslyAllowAllUnixSockets``).

    ``nested_namespaces``: the command runs in namespaces of its own (see the
    module docstring): mount/unshare/setns/sethostname are allowed, a nested
    cgroup namespace is not."""
    machine = machine or os.uname().machine
    if machine not in _ARCHES:
        raise RpcError.invalid_params(
            "sandbox intent cannot be enforced on this executor: "
            f"no seccomp syscall table for architecture {machine}"
        )
    audit_arch, numbers = _ARCHES[machine]
    eperm = _RET_ERRNO | errno.EPERM
    code: list[Instruction] = [
        (_BPF_LD_W_ABS, 0, 0, _OFF_ARCH),
        (_BPF_JEQ_K, 1, 0, audit_arch),
        _ret(_RET_KILL_PROCESS),
        (_BPF_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if machine == "x86_64":
        code += [(_BPF_JGE_K, 0, 1, _X32_SYSCALL_BIT), _ret(eperm)]
    if proxy_routed:
        network_denied = _PROXY_ROUTED_DENY + (() if allow_local_binding else _ACCEPTING)
    elif network_restricted:
        network_denied = _RESTRICTED_DENY
    else:
        network_denied = ()
    always = [n for n in _ALWAYS_DENY if not (nested_namespaces and n in _NESTED_ALLOWED)]
    for name in (*always, *network_denied):
        if name in numbers:  # e.g. iopl/ioperm exist on x86_64 only
            code += [(_BPF_JEQ_K, 0, 1, numbers[name]), _ret(eperm)]
    if nested_namespaces:
        no_cgroup_ns = [
            (_BPF_LD_W_ABS, 0, 0, _arg_lo(0)),
            (_BPF_JSET_K, 0, 1, _CLONE_NEWCGROUP),
            _ret(eperm),
            _ret(_RET_ALLOW),
        ]
        code += _block(numbers["unshare"], no_cgroup_ns)
        code += _block(numbers["clone"], no_cgroup_ns)
        code += [(_BPF_JEQ_K, 0, 1, numbers["clone3"]), _ret(_RET_ERRNO | errno.ENOSYS)]
    code += [(_BPF_JEQ_K, 0, 1, numbers["openat2"]), _ret(_RET_ERRNO | errno.ENOSYS)]
    for name, arg in _MODE_ARG:
        if name in numbers:
            code += _block(numbers[name], _mode_body(arg, eperm))
    socket_body, socketpair_body = _socket_bodies(
        eperm,
        network_restricted=network_restricted,
        proxy_routed=proxy_routed,
        allow_unix=allow_unix_sockets,
    )
    code += _block(numbers["socket"], socket_body)
    code += _block(numbers["socketpair"], socketpair_body)
    code.append(_ret(_RET_ALLOW))
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
