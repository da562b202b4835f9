"""Tiny launcher: restrict this process, then exec the command.

Run as ``python -I -S launcher.py [options] -- PROGRAM ARGS...`` (stdlib only,
no site, no execserver import: it must start fast and must not need anything
that the restriction could make unreadable). Used where bwrap is not:

* policies with full filesystem access (``unrestricted``, ``external``,
  ``:root`` write): capability drop + ``PR_SET_NO_NEW_PRIVS`` + the daemon's
  seccomp program;
* the Landlock fallback backend: capability drop + Landlock rules +
  no_new_privs + seccomp.

The capability drop matters when the daemon runs as root: without a user
namespace (bwrap's ``--cap-drop ALL`` does it there) the command would keep
every capability (sethostname, raw /dev/kmsg, other processes' /proc files).
All capabilities go: effective, permitted, inheritable, ambient and the
bounding set, with the "root is not special" securebits locked, so exec'ing
even a setuid-root or file-capability binary gains nothing.

Why a separate process and not ``preexec_fn``: ``preexec_fn`` runs Python
between fork and exec inside the threaded asyncio daemon (documented as unsafe),
and every lazy import after restricting may fail.

The program is resolved *before* restricting. Failure modes:

* the restrictions cannot be applied -> exit 125 and a message (the command
  never runs: fail closed);
* the program cannot be executed -> exit 101 and ``execserver-sandbox: failed
  to execvp <cmd>: <os error>``, the reference helper's exit status for this case
  (its text mentions the sandbox, so it is classified ``sandboxDenied``).

Options:
  --seccomp-fd N        read a BPF program (struct sock_filter[]) from fd N
  --landlock JSON       {"read": [...], "write": [...]} allow-list (everything else denied)
  --path PATH           search path for PROGRAM when the environment has no PATH
  --argv0 NAME          exec PROGRAM with NAME as argv[0] (the request's `arg0`)
  --exec-only           apply nothing (already done by bwrap): only --argv0/--path handling
  --fail MESSAGE        print MESSAGE to stderr and exit 101 without running anything
  --unset NAME          remove NAME from the environment before exec (repeatable): the
                        interpreter's C-locale coercion (PEP 538) adds LC_CTYPE to our own
                        environment, and the command must see exactly the request's env
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
import sys

__all__ = ["main"]

_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, each with its lock.
_SECUREBITS_LOCKED_NOROOT = 0b11101111
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6
_FS_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
# Devices a fresh bwrap /dev also offers read-write.
_DEVICES_RW = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")

EXIT_SETUP_FAILED = 125
EXIT_EXEC_FAILED = 101


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _os_error_text(exc: OSError) -> str:
    err = exc.errno or errno.EIO
    return f"{exc.strerror or os.strerror(err)} (os error {err})"


def _no_new_privs(libc: ctypes.CDLL) -> None:
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _status_caps() -> dict[str, int]:
    caps: dict[str, int] = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Cap"):
                name, _, value = line.partition(":")
                caps[name] = int(value.strip(), 16)
    return caps


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 63


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Leave this process (and what it execs) with no capabilities at all.

    Without CAP_SETPCAP (a non-root daemon) the bounding set cannot shrink,
    which is fine as long as nothing is held: with no_new_privs exec cannot
    add any. Holding some capability without being able to drop it is a
    failure (fail closed)."""
    held = _status_caps()
    if held.get("CapEff", 0) & (1 << 8):  # CAP_SETPCAP
        _check(libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS_LOCKED_NOROOT, 0, 0, 0), "securebits")
        for cap in range(_last_cap() + 1):
            _check(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"PR_CAPBSET_DROP({cap})")
    # Ambient capabilities may be unsupported (EINVAL) on old kernels: nothing to clear.
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("=Ii", _LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two __user_cap_data_struct: effective, permitted, inheritable = 0
    number = _SYS_CAPSET.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, "no capset syscall number for this architecture")
    _check(
        libc.syscall(
            number,
            ctypes.create_string_buffer(header, len(header)),
            ctypes.create_string_buffer(data, len(data)),
        ),
        "capset",
    )
    left = _status_caps()
    if any(left.get(k, 0) for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")):
        raise OSError(errno.EPERM, f"capabilities left after dropping: {left}")


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _apply_seccomp(libc: ctypes.CDLL, program: bytes) -> None:
    if not program or len(program) % 8:
        raise OSError(errno.EINVAL, "seccomp program is empty or malformed")
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(
        libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )


def _handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def _apply_landlock(libc: ctypes.CDLL, read: list[str], write: list[str]) -> None:
    abi = libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET,
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    if abi < 1:
        raise OSError(errno.ENOSYS, "Landlock is not available on this kernel")
    handled = _handled_fs(abi)
    if abi >= 6:
        # Scopes: no signals to, and no abstract unix sockets of, processes outside
        # the sandbox (the daemon included). TCP stays seccomp's job (handled_net 0).
        attr = struct.pack("=QQQ", handled, 0, _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
    else:
        attr = struct.pack("=Q", handled)
    attr_buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(
        libc.syscall(
            _SYS_LANDLOCK_CREATE_RULESET, attr_buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)
        ),
        "landlock_create_ruleset",
    )
    try:

        def allow(path: str, rights: int) -> None:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                return  # a missing root grants nothing
            try:
                if not os.path.isdir(path):
                    rights &= _FILE_RIGHTS  # directory rights are invalid on files
                rule = struct.pack("=Qi", rights & handled, fd)  # packed u64 + s32
                rule_buf = ctypes.create_string_buffer(rule, len(rule))
                _check(
                    libc.syscall(
                        _SYS_LANDLOCK_ADD_RULE,
                        ruleset,
                        _LANDLOCK_RULE_PATH_BENEATH,
                        rule_buf,
                        ctypes.c_uint32(0),
                    ),
                    f"landlock_add_rule({path})",
                )
            finally:
                os.close(fd)

        for path in read:
            allow(path, _FS_READ)
        for path in write:
            allow(path, handled)
        for path in _DEVICES_RW:
            allow(path, _FS_READ_FILE | _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0))
        _no_new_privs(libc)
        _check(
            libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)


def _resolve(program: str, search_path: str | None) -> str:
    if "/" in program:
        return program
    path = os.environ.get("PATH", search_path or os.defpath)
    denied: OSError | None = None
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory or ".", program)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            denied = OSError(errno.EACCES, os.strerror(errno.EACCES))
    raise denied or OSError(errno.ENOENT, os.strerror(errno.ENOENT))


def _restrict(seccomp_fd: int | None, landlock: dict[str, list[str]] | None) -> None:
    """Capability drop, Landlock (if asked), no_new_privs, then seccomp: the last
    things before exec."""
    if seccomp_fd is None:
        raise OSError(errno.EINVAL, "no seccomp program given")
    libc = _libc()
    program = _read_all(seccomp_fd)
    # Capabilities first: checking what is left reads /proc, which Landlock may hide.
    _drop_capabilities(libc)
    if landlock is not None:
        _apply_landlock(libc, landlock.get("read", []), landlock.get("write", []))
    _no_new_privs(libc)
    _apply_seccomp(libc, program)


def _fail(message: str) -> int:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    return EXIT_EXEC_FAILED


def main(args: list[str]) -> int:
    if "--" not in args:
        sys.stderr.write(__doc__ or "")
        return 2
    split = args.index("--")
    options, command = args[:split], args[split + 1 :]
    seccomp_fd: int | None = None
    landlock: dict[str, list[str]] | None = None
    search_path: str | None = None
    unset: list[str] = []
    argv0: str | None = None
    exec_only = False
    i = 0
    while i < len(options):
        name, value = options[i], options[i + 1] if i + 1 < len(options) else ""
        if name == "--seccomp-fd":
            seccomp_fd = int(value)
        elif name == "--landlock":
            landlock = json.loads(value)
        elif name == "--path":
            search_path = value
        elif name == "--argv0":
            argv0 = value
        elif name == "--exec-only":
            exec_only = True
            i += 1
            continue
        elif name == "--unset":
            unset.append(value)
        elif name == "--fail":
            return _fail(value)
        i += 2
    if not command:
        return _fail("execserver-sandbox: no command given")
    for variable in unset:
        os.environ.pop(variable, None)
    try:
        program = _resolve(command[0], search_path)
    except OSError as exc:
        return _fail(f"execserver-sandbox: failed to execvp {command[0]}: {_os_error_text(exc)}")
    if argv0 is not None:
        command = [argv0, *command[1:]]
    try:
        if not exec_only:
            _restrict(seccomp_fd, landlock)
    except (OSError, ValueError) as exc:
        # Fail closed: the command must not run without its restrictions.
        sys.stderr.write(f"execserver-sandbox: cannot apply sandbox restrictions: {exc}\n")
        return EXIT_SETUP_FAILED
    try:
        os.execv(program, command)
    except OSError as exc:
        return _fail(f"execserver-sandbox: failed to execvp {command[0]}: {_os_error_text(exc)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
