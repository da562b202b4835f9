"""Tiny launcher: restrict this process, then exec the command.

Run as ``python -I -S launcher.py [options] -- PROGRAM ARGS...`` (stdlib only,
no site, no execserver import: it must start fast and must not need anything
that the restriction could make unreadable). Used where bwrap is not:

* policies with full filesystem access (``unrestricted``, ``external``,
  ``:root`` write): capability drop + ``PR_SET_NO_NEW_PRIVS`` + the daemon's
  seccomp program;
* the Landlock fallback backend: capability drop + Landlock rules +
  no_new_privs + seccomp.

With ``--namespaces`` (full filesystem access on a host with user namespaces)
the command runs in namespaces of its own instead of losing every capability:

* a mount and a cgroup namespace made with the daemon's own privilege (host
  root, else a first user namespace mapping only the daemon's uid): every
  cgroup file system in view is covered by a read-only bind of this process's
  own cgroup, so no ``cgroup.procs`` or limit file of any cgroup (its own
  included) is writable, and the cgroup namespace belongs to a user namespace
  in which the command has no capability, so it cannot mount a cgroup file
  system of its own either (the seccomp program refuses a nested cgroup
  namespace, where it could);
* a pid namespace, whose init is a fork of this launcher: the daemon and every
  host process are not in it, so they cannot be named to ``kill`` or
  ``ptrace``, and ``/proc`` is that namespace's own;
* then a user namespace mapping exactly the daemon's uid and gid to
  themselves (written by this launcher from outside, so uid 0 stays uid 0 and
  host files keep their owners) and a second mount namespace: every mount
  above is copied into it *locked* (the kernel forbids unmounting or
  remounting read-write what a more privileged namespace mounted). Inside it
  the command holds the capabilities of its own user namespace only (a root
  daemon's command may mount a tmpfs or make nested namespaces, as the
  reference's can, and nothing on the host).

This process stays outside as the daemon's child: it reports the command's
exit (status or signal, re-raised on itself) as soon as the command ends; the
namespace's init stays behind to reap what the command left running (its
background jobs live on, as without namespaces) and dies with the last of them.

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
  --namespaces          run the command in its own user/mount/pid/cgroup namespaces (above)
  --scope-signals       Landlock (ABI 6) scope: no signal reaches a process outside the
                        command's own tree, the daemon included
  --fail MESSAGE        print MESSAGE to stderr and exit 101 without running anything
  --unset NAME          remove NAME from the environment before exec (repeatable): the
                        interpreter's C-locale coercion (PEP 538) adds LC_CTYPE to our own
                        environment, and the command must see exactly the request's env
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import struct
import sys

# typing and json cost ~4 and ~7 ms to import, on every launch: typing is for the
# checker only, json is imported where --landlock needs it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

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

_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_SLAVE = 1 << 19
_PR_SET_PDEATHSIG = 1
_CAP_SETGID, _CAP_SETUID, _CAP_SYS_ADMIN = 6, 7, 21
# What the daemon's process-group signals must not do to the launcher or the
# namespace's init (only the command acts on them, as it would without them).
_SHIELDED = (
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGHUP,
    signal.SIGTERM,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
)


def _options(argv: list[str]) -> list[str]:
    return argv[: argv.index("--")] if "--" in argv else argv


# The daemon signals the whole process group, and the command may be running
# (and signalled) before this process has shielded itself: a SIGINT then raised
# KeyboardInterrupt here and the launcher exited 130 in place of the command's
# own status. So in namespaces mode the shielded signals are blocked as soon as
# this module runs; from then on each is either ignored here (dropped) or, in
# the command's process, delivered once its own dispositions are back (main).
_MASK_AT_START = (
    signal.pthread_sigmask(signal.SIG_BLOCK, _SHIELDED)
    if __name__ == "__main__" and "--namespaces" in _options(sys.argv[1:])
    else None
)

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


def _landlock_abi(libc: ctypes.CDLL) -> int:
    """The kernel's Landlock ABI version; 0 or less when there is none."""
    return int(
        libc.syscall(
            _SYS_LANDLOCK_CREATE_RULESET,
            None,
            ctypes.c_size_t(0),
            ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
        )
    )


def _create_ruleset(libc: ctypes.CDLL, attr: bytes, what: str) -> int:
    attr_buf = ctypes.create_string_buffer(attr, len(attr))
    return _check(
        libc.syscall(
            _SYS_LANDLOCK_CREATE_RULESET, attr_buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)
        ),
        what,
    )


def _restrict_self(libc: ctypes.CDLL, ruleset: int, what: str) -> None:
    _no_new_privs(libc)
    _check(libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), what)


def _apply_landlock(libc: ctypes.CDLL, read: list[str], write: list[str]) -> None:
    abi = _landlock_abi(libc)
    if abi < 1:
        raise OSError(errno.ENOSYS, "Landlock is not available on this kernel")
    handled = _handled_fs(abi)
    if abi >= 6:
        # Scopes: no signals to, and no abstract unix sockets of, processes outside
        # the sandbox (the daemon included). TCP stays seccomp's job (handled_net 0).
        attr = struct.pack("=QQQ", handled, 0, _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
    else:
        attr = struct.pack("=Q", handled)
    ruleset = _create_ruleset(libc, attr, "landlock_create_ruleset")
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
        _restrict_self(libc, ruleset, "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _scope_signals(libc: ctypes.CDLL) -> None:
    """A Landlock domain that restricts no file access, only signals: none reaches
    a process outside this one's descendants. Needs ABI 6; older kernels get
    nothing here (the pid namespace, where there is one, is the line that holds)."""
    if _landlock_abi(libc) < 6:
        return
    ruleset = _create_ruleset(
        libc, struct.pack("=QQQ", 0, 0, _SCOPE_SIGNAL), "landlock_create_ruleset(scope)"
    )
    try:
        _restrict_self(libc, ruleset, "landlock_restrict_self(scope)")
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


def _restrict(
    seccomp_fd: int | None, landlock: dict[str, list[str]] | None, scope_signals: bool
) -> None:
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
    elif scope_signals:
        _scope_signals(libc)
    _no_new_privs(libc)
    _apply_seccomp(libc, program)


# ---- --namespaces ----------------------------------------------------------------


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(root, mount point, fstype, super options) of every mount in view."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            found.append(
                (_unescape(fields[3]), _unescape(fields[4]), tail[0], set(tail[2].split(",")))
            )
    return found


def _own_cgroups() -> list[tuple[set[str], str]]:
    """(controllers, path) per line of /proc/self/cgroup (v2: an empty set)."""
    found = []
    with open("/proc/self/cgroup", encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3:
                found.append(({c for c in parts[1].split(",") if c}, parts[2]))
    return found


def _cgroup_covers(
    mounts: list[tuple[str, str, str, set[str]]], own: list[tuple[set[str], str]]
) -> list[tuple[str, str | None]]:
    """(mount point, what to bind read-only over it) for every cgroup file system:
    this process's own cgroup in that hierarchy, or None (an empty tmpfs) when
    its cgroup is not below the mount's root. Deepest mount points first."""
    covers: list[tuple[str, str | None]] = []
    for root, point, fstype, options in mounts:
        if fstype not in ("cgroup", "cgroup2"):
            continue
        path: str | None = None
        for controllers, own_path in own:
            v2_line = not controllers
            if (fstype == "cgroup2") == v2_line and (v2_line or controllers <= options):
                path = own_path
                break
        source: str | None = None
        if path is not None and (path + "/").startswith(root.rstrip("/") + "/"):
            source = os.path.join(point, path[len(root.rstrip("/")) :].lstrip("/"))
        covers.append((point, source))
    covers.sort(key=lambda c: c[0].count("/"), reverse=True)
    return covers


def _mount(
    libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int
) -> None:
    _check(
        libc.mount(
            source.encode() if source is not None else None,
            target.encode(),
            fstype.encode() if fstype is not None else None,
            ctypes.c_ulong(flags),
            None,
        ),
        f"mount {target}",
    )


def _write_file(path: str, data: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


def _outer_namespaces(libc: ctypes.CDLL) -> None:
    """The mount and cgroup namespaces, made with the daemon's privilege, and the
    cgroup file systems covered in them (see the module docstring)."""
    mounts, own = _mounts(), _own_cgroups()
    effective = _status_caps().get("CapEff", 0)
    if all(effective & (1 << c) for c in (_CAP_SYS_ADMIN, _CAP_SETUID, _CAP_SETGID)):
        _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWCGROUP), "unshare(mount, cgroup)")
    else:
        uid, gid = os.geteuid(), os.getegid()
        _check(
            libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWCGROUP),
            "unshare(user, mount, cgroup)",
        )
        _write_file("/proc/self/setgroups", "deny")
        _write_file("/proc/self/uid_map", f"{uid} {uid} 1")
        _write_file("/proc/self/gid_map", f"{gid} {gid} 1")
    # Nothing done here may reach the host's mount table.
    _mount(libc, None, "/", None, _MS_REC | _MS_SLAVE)
    sealed = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    for point, source in _cgroup_covers(mounts, own):
        if source is not None and os.path.isdir(source):
            _mount(libc, source, point, None, _MS_BIND)
            _mount(libc, None, point, None, sealed)
        else:
            _mount(libc, "none", point, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def _read_exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _setup_error(message: str) -> None:
    sys.stderr.write(f"execserver-sandbox: cannot apply sandbox restrictions: {message}\n")
    sys.stderr.flush()


def _init(
    libc: ctypes.CDLL,
    proc_points: list[str],
    to_init: int,
    from_init: int,
    run: Callable[[], int],
) -> NoReturn:  # pragma: no cover - the namespace's pid 1
    """pid 1 of the command's pid namespace: its /proc, the inner user and mount
    namespaces, then the command as its child; reports the command's wait status
    to the launcher and reaps the rest until nothing is left."""
    code = EXIT_SETUP_FAILED
    try:
        for sig in _SHIELDED:
            signal.signal(sig, signal.SIG_IGN)
        _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
        # The new /proc in a mount namespace of its own: the launcher, outside the
        # pid namespace, still needs the host's (its own status, our uid_map).
        _check(libc.unshare(_CLONE_NEWNS), "unshare(mount)")
        flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        _mount(libc, "proc", "/proc", "proc", flags)
        for point in proc_points:
            _mount(libc, "/proc", point, None, _MS_BIND | _MS_REC)
        _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(user, mount)")
        os.write(from_init, b"u")
        if _read_exactly(to_init, 1) != b"m":
            os._exit(EXIT_SETUP_FAILED)  # the launcher is gone or could not map us
        os.close(to_init)
        command = os.fork()
        if command == 0:
            os.close(from_init)
            os._exit(run())
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                code = 0
                break
            if pid == command:
                # From here on the launcher may go: the rest lives on without it.
                libc.prctl(_PR_SET_PDEATHSIG, 0, 0, 0, 0)
                alone = _reap_exited()
                os.write(from_init, struct.pack("=ii", status, alone))
                os.close(from_init)
                if alone:
                    # Nothing left in the namespace: the launcher reaps us (we are
                    # not handed to the daemon as an orphan).
                    os._exit(0)
    except BaseException as exc:
        try:
            _setup_error(str(exc) if isinstance(exc, OSError) else repr(exc))
        finally:
            os._exit(EXIT_SETUP_FAILED)
    os._exit(code)


def _reap_exited() -> bool:
    """Reap what has exited; True when no child is left (the namespace is empty)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] != 0:
            pass
    except ChildProcessError:
        return True
    return False


def _exit_like(status: int) -> int:
    """Leave as the command did: its exit code, or death by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the command's dump, not ours
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught anyway
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else EXIT_SETUP_FAILED


def _run_in_namespaces(run: Callable[[], int], mask: set[int | signal.Signals]) -> int:
    """Build the namespaces, run the command inside (``run`` applies its
    restrictions and execs), and exit as it does. The shielded signals arrive
    blocked (``main``); ``mask`` is the signal mask to go back to once they are
    ignored here."""
    libc = _libc()
    proc_points = [p for _, p, t, _ in _mounts() if t == "proc" and p != "/proc"]
    uid, gid = os.geteuid(), os.getegid()
    try:
        _outer_namespaces(libc)
        _check(libc.unshare(_CLONE_NEWPID), "unshare(pid)")
        to_init_r, to_init_w = os.pipe()
        from_init_r, from_init_w = os.pipe()
        init = os.fork()
    except OSError as exc:
        _setup_error(str(exc))
        return EXIT_SETUP_FAILED
    if init == 0:
        os.close(to_init_w)
        os.close(from_init_r)
        _init(libc, proc_points, to_init_r, from_init_w, run)
    os.close(to_init_r)
    os.close(from_init_w)
    try:
        if _read_exactly(from_init_r, 1) == b"u":
            _write_file(f"/proc/{init}/uid_map", f"{uid} {uid} 1")
            _write_file(f"/proc/{init}/gid_map", f"{gid} {gid} 1")
            os.write(to_init_w, b"m")
        os.close(to_init_w)
        # Out here nothing is needed any more: no capability, no copy of the
        # command's stdio (its end of file is the command's alone).
        _drop_capabilities(libc)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        for sig in _SHIELDED:
            signal.signal(sig, signal.SIG_IGN)  # also drops any that came while blocked
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    except OSError as exc:
        _setup_error(str(exc))
        os.kill(init, signal.SIGKILL)
        os.waitpid(init, 0)
        return EXIT_SETUP_FAILED
    reported = _read_exactly(from_init_r, 8)
    if len(reported) == 8:
        status, alone = struct.unpack("=ii", reported)
        if alone:
            os.waitpid(init, 0)
        return _exit_like(status)
    # The init died before the command ended (killed, or its set-up failed).
    _, status = os.waitpid(init, 0)
    return _exit_like(status)


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
    namespaces = False
    scope_signals = False
    i = 0
    while i < len(options):
        name, value = options[i], options[i + 1] if i + 1 < len(options) else ""
        if name == "--seccomp-fd":
            seccomp_fd = int(value)
        elif name == "--landlock":
            import json

            landlock = json.loads(value)
        elif name == "--path":
            search_path = value
        elif name == "--argv0":
            argv0 = value
        elif name in ("--exec-only", "--namespaces", "--scope-signals"):
            exec_only = exec_only or name == "--exec-only"
            namespaces = namespaces or name == "--namespaces"
            scope_signals = scope_signals or name == "--scope-signals"
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
    if namespaces:
        if seccomp_fd is None:
            return _fail("execserver-sandbox: no seccomp program given")
        seccomp_program = _read_all(seccomp_fd)
        # Blocked since the module ran (_MASK_AT_START), or from here when main
        # is called by other means; ``mask`` is the mask from before.
        mask = _MASK_AT_START
        if mask is None:
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SHIELDED)
        initial = {sig: signal.getsignal(sig) for sig in _SHIELDED}

        def run() -> int:  # pragma: no cover - the command's process, before exec
            for sig, handler in initial.items():
                keep = handler is signal.SIG_IGN
                signal.signal(sig, signal.SIG_IGN if keep else signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            try:
                libc = _libc()
                if scope_signals:
                    _scope_signals(libc)
                _no_new_privs(libc)
                _apply_seccomp(libc, seccomp_program)
            except (OSError, ValueError) as exc:
                _setup_error(str(exc))
                return EXIT_SETUP_FAILED
            return _exec(program, command)

        code = _run_in_namespaces(run, mask)
        # Nothing to flush (stdio is /dev/null by now) and the daemon sees the
        # command's exit only when we are gone: skip the interpreter's shutdown.
        os._exit(code)
    try:
        if not exec_only:
            _restrict(seccomp_fd, landlock, scope_signals)
    except (OSError, ValueError) as exc:
        # Fail closed: the command must not run without its restrictions.
        sys.stderr.write(f"execserver-sandbox: cannot apply sandbox restrictions: {exc}\n")
        return EXIT_SETUP_FAILED
    return _exec(program, command)


def _exec(program: str, command: list[str]) -> int:
    try:
        os.execv(program, command)
    except OSError as exc:
        return _fail(f"execserver-sandbox: failed to execvp {command[0]}: {_os_error_text(exc)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
