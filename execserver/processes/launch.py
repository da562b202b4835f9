"""From a ``LaunchRequest`` to a running child.

``plan_unsandboxed`` is the plan of a start without a sandbox (the sandboxed
ones come from ``execserver.sandbox.plan_sandboxed``); both are the one
``LaunchPlan`` type and use the one program lookup (``sandbox.program``).
``spawn`` then starts a plan with pipes (stdin writable or /dev/null) or under
a pseudo-terminal. Every child is the leader of a new session (and so of its
own process group), which is what lets the daemon signal or kill its group.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import gc
import os
import platform
import pwd
import struct
import subprocess
import termios
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from execserver.sandbox.plan import Credentials, LaunchPlan, LaunchRequest
from execserver.sandbox.program import child_search_path, find_program
from execserver.wire.errors import RpcError, os_error_text

__all__ = ["PTY_COLS", "PTY_ROWS", "Spawned", "plan_unsandboxed", "spawn"]

# The reference's pseudo-terminal is 24 rows x 80 columns and cannot be resized.
PTY_ROWS = 24
PTY_COLS = 80


@dataclass
class Spawned:
    pid: int
    popen: subprocess.Popen[bytes]
    stdin_fd: int | None
    # (fd, stream) of every output the daemon reads: stdout+stderr, or the pty master.
    outputs: list[tuple[int, str]]
    pty_master: int | None


def _daemon_home() -> str:
    home = os.environ.get("HOME")
    if home:
        return home
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return "/"


def _login_shell() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
    except KeyError:
        return os.environ.get("SHELL", "/bin/sh")


def _resolve_pipe_program(name: str, env: Mapping[str, str], cwd: str) -> str:
    """Non-tty lookup: the child's PATH when it has one, else the daemon's (as Rust's Command)."""
    if "/" in name:
        return name
    found = find_program(name, child_search_path(env), cwd)
    if found is None:
        raise RpcError.internal(os_error_text(2))
    return found


def _resolve_pty_program(name: str, env: Mapping[str, str], cwd: str) -> str:
    """Tty lookup uses only the child's PATH, with the reference's (portable-pty) texts."""
    if "/" in name:
        return name
    path = env.get("PATH")
    if path is None:
        raise RpcError.internal(f"Unable to spawn {name} because:\nUnable to resolve the PATH")
    found = find_program(name, path, cwd)
    if found is None:
        raise RpcError.internal(
            f'Unable to spawn {name} because:\nNo viable candidates found in PATH "{path}"'
        )
    return found


def plan_unsandboxed(request: LaunchRequest) -> LaunchPlan:
    """What to exec for a ``process/start`` without a sandbox (argv already checked
    non-empty). Raises RpcError (the reference's spawn error) when the program
    cannot be found."""
    env = dict(request.env)
    argv = list(request.argv)
    cwd = request.cwd
    if request.tty:
        # The reference's pty path resolves *and shows* arg0 in place of argv[0].
        if request.arg0 is not None:
            argv[0] = request.arg0
        # A tty child whose cwd is not a directory starts in the home directory instead.
        if not os.path.isdir(cwd):
            cwd = _daemon_home()
        env.setdefault("SHELL", _login_shell())
        program = _resolve_pty_program(argv[0], env, cwd)
    else:
        program = _resolve_pipe_program(argv[0], env, cwd)
        if request.arg0 is not None:
            argv[0] = request.arg0
    return LaunchPlan(
        argv=argv,
        env=env,
        sandbox_type="none",
        program=program,
        cwd=cwd,
        tty=request.tty,
        pipe_stdin=request.pipe_stdin,
        credentials=request.credentials,
    )


def _acquire_controlling_tty() -> None:  # pragma: no cover - runs in the forked child
    # After setsid (start_new_session) the pty slave on fd 0 becomes our controlling tty.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def spawn(plan: LaunchPlan, place: Callable[[], None] | None = None) -> Spawned:
    """Start the child. Raises RpcError (the reference's spawn error) on failure.

    ``place`` runs in the forked child before exec: it puts the child into its
    resource-limit cgroup (execserver.containment). Only given when limits are
    configured, because any pre-exec hook costs the vfork fast path.
    """
    try:
        if plan.tty:
            return _spawn_pty(plan, place)
        return _spawn_pipes(plan, place)
    except OSError as exc:
        raise RpcError.internal(os_error_text(exc.errno or 5)) from None
    except subprocess.SubprocessError:
        # The placement failed in the child, which then never ran the command.
        raise RpcError.internal("cannot place the process in its resource-limit cgroup") from None
    finally:
        plan.close()


def _identity(plan: LaunchPlan) -> dict[str, Any]:
    """Popen's account switch for a plan that runs as another account (a tenant's):
    supplementary groups, then gid, then uid, in the forked child before exec."""
    creds = plan.credentials
    if creds is None:
        return {}
    return {"user": creds.uid, "group": creds.gid, "extra_groups": list(creds.groups)}


# ---- a tenant's spawn without fork ----------------------------------------------------
#
# Popen only uses vfork when it is given no user, group, extra_groups or preexec_fn:
# with them it fork()s, and fork() of a daemon this size (page tables copied, then
# copy-on-write faults in the daemon) made a tenant's spawn several times slower.
# Linux keeps credentials per *thread*, and the raw set*id system calls (unlike
# glibc's wrappers, which broadcast to every thread) change only the calling one;
# a vfork child starts with its calling thread's credentials. So the spawning thread
# takes the account's groups, gid and uid around a plain vfork Popen and gives its
# own back afterwards; the child execs with the account's identity, and everything
# Popen does in the child (chdir, exec, their error reports) is its unchanged code.
#
# The uid switch is setresuid(uid, uid, 0): real and effective uid the account's,
# the saved uid still root, which is what lets the thread switch back. It keeps the
# tenant out until the exec: the child shares the daemon's memory until then, and
# ptrace or /proc/<pid>/mem access needs every one of the target's uids (saved
# included) to be the caller's. execve(2) then sets the saved uid to the effective
# one and, the real and effective uid being non-zero, computes the permitted and
# effective capabilities from the file alone, so the program starts with uid, gid
# and groups all the account's and no capabilities, as after Popen's own switch.
# The one set that would survive the exec with a saved uid of 0 is the ambient one:
# a daemon started with ambient capabilities takes Popen's fork path instead.

# (setgroups, setresuid, setresgid) system call numbers; elsewhere: the fork path.
_SETID_CALLS: Final = {"x86_64": (116, 117, 119), "aarch64": (159, 147, 149)}
_CALLS = _SETID_CALLS.get(platform.machine())
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _no_ambient_capabilities() -> bool:
    try:
        with open("/proc/thread-self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapAmb:"):
                    return int(line.split()[1], 16) == 0
    except (OSError, ValueError):
        pass
    return False


# Only a root daemon (uid 0 real, effective and saved) switches this way; and only
# once the ambient set is known empty.
_THREAD_SWITCH: Final = (
    _CALLS is not None and os.getresuid() == (0, 0, 0) and _no_ambient_capabilities()
)


def _syscall(number: int, *args: Any) -> None:
    if _libc.syscall(number, *args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _set_thread_ids(
    groups: tuple[int, ...], gids: tuple[int, int, int], uids: tuple[int, int, int]
) -> None:
    assert _CALLS is not None
    setgroups, setresuid, setresgid = _CALLS
    array = (ctypes.c_uint * max(len(groups), 1))(*groups)
    _syscall(setgroups, ctypes.c_size_t(len(groups)), array)
    _syscall(setresgid, *(ctypes.c_uint(g) for g in gids))
    _syscall(setresuid, *(ctypes.c_uint(u) for u in uids))


@contextlib.contextmanager
def _as_account(creds: Credentials) -> Iterator[None]:
    """This thread with the account's identity (saved uid kept: see above)."""
    groups, gids, uids = tuple(os.getgroups()), os.getresgid(), os.getresuid()
    # No finaliser of the daemon's runs with the account's identity in this window.
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            # Groups and gid first, while the thread still has CAP_SETGID.
            _set_thread_ids(creds.groups, (creds.gid,) * 3, (creds.uid, creds.uid, 0))
        except OSError:
            _restore(groups, gids, uids)
            raise
        try:
            yield
        finally:
            _restore(groups, gids, uids)
    finally:
        if collecting:
            gc.enable()


def _restore(
    groups: tuple[int, ...], gids: tuple[int, int, int], uids: tuple[int, int, int]
) -> None:
    assert _CALLS is not None
    try:
        # The uid first: back to euid 0, the permitted capabilities are effective again.
        _syscall(_CALLS[1], *(ctypes.c_uint(u) for u in uids))
        _set_thread_ids(groups, gids, uids)
    except OSError:
        # A thread stuck with an account's identity would start other principals'
        # processes as that account: the daemon must not go on.
        os.abort()


def _spawn_pipes(plan: LaunchPlan, place: Callable[[], None] | None) -> Spawned:
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    parent_fds = [out_r, err_r]
    child_fds = [out_w, err_w]
    stdin_arg: int = subprocess.DEVNULL
    stdin_fd: int | None = None
    if plan.pipe_stdin:
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
        stdin_arg, stdin_fd = in_r, in_w
        parent_fds.append(in_w)
        child_fds.append(in_r)
    creds = plan.credentials
    fast = creds is not None and place is None and _THREAD_SWITCH
    try:
        with _as_account(creds) if fast and creds is not None else contextlib.nullcontext():
            popen = subprocess.Popen(
                plan.argv,
                executable=plan.executable,
                stdin=stdin_arg,
                stdout=out_w,
                stderr=err_w,
                cwd=plan.cwd,
                env=plan.env,
                start_new_session=True,
                pass_fds=plan.pass_fds,
                preexec_fn=place,
                **({} if fast else _identity(plan)),
            )
    except BaseException:
        _close_all(parent_fds + child_fds)
        raise
    _close_all(child_fds)
    for fd in parent_fds:
        os.set_blocking(fd, False)
    return Spawned(popen.pid, popen, stdin_fd, [(out_r, "stdout"), (err_r, "stderr")], None)


def _spawn_pty(plan: LaunchPlan, place: Callable[[], None] | None) -> Spawned:
    def child_setup() -> None:  # pragma: no cover - runs in the forked child
        if place is not None:
            place()
        _acquire_controlling_tty()

    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", PTY_ROWS, PTY_COLS, 0, 0))
        popen = subprocess.Popen(
            plan.argv,
            executable=plan.executable,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=plan.cwd,
            env=plan.env,
            start_new_session=True,
            pass_fds=plan.pass_fds,
            preexec_fn=child_setup,
            **_identity(plan),
        )
    except BaseException:
        _close_all([master, slave])
        raise
    os.close(slave)
    os.set_blocking(master, False)
    return Spawned(popen.pid, popen, master, [(master, "pty")], master)
