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
import fcntl
import os
import pwd
import struct
import subprocess
import termios
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from execserver.containment import Placement
from execserver.processes.exec_as import EXEC_AS_PROGRAM, ExecAs
from execserver.processes.released_spawn import ReleasedSpawner, released_spawner
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
    # None for a child started by posix_spawn (execserver/processes/released_spawn.py).
    popen: subprocess.Popen[bytes] | None
    stdin_fd: int | None
    # (fd, stream) of every output the daemon reads: stdout+stderr, or the pty master.
    outputs: list[tuple[int, str]]
    pty_master: int | None
    # The child's start (clock ticks since boot, /proc/PID/stat), when read where it
    # was spawned (a spawn thread: ProcessTable); None: the supervisor reads it.
    start: int | None = None


def _daemon_home() -> str:
    home = os.environ.get("HOME")
    if home:
        return home
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return "/"


def _login_shell(credentials: Credentials | None) -> str:
    """The login shell of the account the child runs as: a tenant's own, never
    the daemon's (whose SHELL says nothing about the tenant's account)."""
    uid = os.getuid() if credentials is None else credentials.uid
    try:
        return pwd.getpwuid(uid).pw_shell or "/bin/sh"
    except KeyError:
        return os.environ.get("SHELL", "/bin/sh") if credentials is None else "/bin/sh"


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
            cwd = _daemon_home() if request.credentials is None else request.credentials.home
        env.setdefault("SHELL", _login_shell(request.credentials))
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


def spawn(
    plan: LaunchPlan,
    place: Placement | None = None,
    *,
    exec_as_program: str | None = EXEC_AS_PROGRAM,
) -> Spawned:
    """Start the child. Raises RpcError (the reference's spawn error) on failure.

    ``place``: the child's resource-limit cgroup (execserver.containment), entered
    before exec. Only given when limits are configured: entering it, like a
    tenant's account switch, costs subprocess its vfork fast path, which
    ``exec-as`` gives back (``execserver/processes/exec_as.py``);
    ``exec_as_program`` None spawns without it.
    """
    try:
        if plan.tty:
            return _spawn_pty(plan, place)
        return _spawn_pipes(plan, place, exec_as_program)
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


def _spawn_pipes(plan: LaunchPlan, place: Placement | None, program: str | None) -> Spawned:
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    parent_fds = [out_r, err_r]
    child_fds = [out_w, err_w]
    stdin_arg: int = subprocess.DEVNULL
    stdin_fd: int | None = None
    child_stdin: int | None = None  # None: /dev/null
    if plan.pipe_stdin:
        in_r, in_w = os.pipe2(os.O_CLOEXEC)
        stdin_arg, stdin_fd, child_stdin = in_r, in_w, in_r
        parent_fds.append(in_w)
        child_fds.append(in_r)
    shim = _through_exec_as(plan, place, program)
    released = _released_spawner(plan, place)
    popen: subprocess.Popen[bytes] | None = None
    try:
        if released is not None and released.accepts(
            plan.executable, plan.env, [*parent_fds, *child_fds, *plan.pass_fds]
        ):
            pid = released.spawn(
                plan.executable,
                plan.argv,
                plan.env,
                plan.cwd,
                stdin=child_stdin,
                stdout=out_w,
                stderr=err_w,
                pass_fds=plan.pass_fds,
            )
        else:
            # Through exec-as: its argv, and it enters the cgroups and switches the
            # account; else subprocess does both (and forks instead of vforking).
            argv, executable, pass_fds, switch = (
                (shim.argv, shim.argv[0], (*plan.pass_fds, *shim.pass_fds), {})
                if shim is not None
                else (
                    plan.argv,
                    plan.executable,
                    plan.pass_fds,
                    {"preexec_fn": place.preexec if place is not None else None, **_identity(plan)},
                )
            )
            popen = subprocess.Popen(
                argv,
                executable=executable,
                stdin=stdin_arg,
                stdout=out_w,
                stderr=err_w,
                cwd=plan.cwd,
                env=plan.env,
                start_new_session=True,
                pass_fds=pass_fds,
                **switch,
            )
            pid = popen.pid
    except BaseException:
        if shim is not None:
            shim.close()
        _close_all(parent_fds + child_fds)
        raise
    _close_all(child_fds)
    if shim is not None and popen is not None:
        failure = shim.outcome()
        if failure is not None:
            popen.wait()  # exec-as exited 127 without running anything
            _close_all(parent_fds)
            raise failure
    for fd in parent_fds:
        os.set_blocking(fd, False)
    return Spawned(pid, popen, stdin_fd, [(out_r, "stdout"), (err_r, "stderr")], None)


def _released_spawner(plan: LaunchPlan, place: Placement | None) -> ReleasedSpawner | None:
    """posix_spawn for a child subprocess would vfork anyway: the daemon's own
    account, no cgroup to enter (exec-as or subprocess do those)."""
    if plan.credentials is not None or place is not None:
        return None
    return released_spawner()


def _through_exec_as(
    plan: LaunchPlan, place: Placement | None, program: str | None
) -> ExecAs | None:
    """The exec-as spawn of a plan that changes account or enters a cgroup, when the
    program is there (else None: subprocess does both, without vfork)."""
    if plan.credentials is None and place is None:
        return None  # subprocess vforks already
    if program is None:
        return None
    fds = place.fds if place is not None else ()
    return ExecAs(program, plan.credentials, fds, plan.executable, plan.argv, plan.env)


def _terminal_name(slave: int) -> str | None:
    """The path the child opens its terminal by; None where it has none (a devpts
    the daemon cannot name: subprocess then hands the descriptor over)."""
    try:
        return os.ttyname(slave)
    except OSError:
        return None


def _spawn_pty(plan: LaunchPlan, place: Placement | None) -> Spawned:
    def child_setup() -> None:  # pragma: no cover - runs in the forked child
        if place is not None:
            place.preexec()
        _acquire_controlling_tty()

    master, slave = os.openpty()
    # posix_spawn as for pipes; subprocess for an account switch or a cgroup, which
    # it does in its pre-exec hook.
    released = _released_spawner(plan, place)
    popen: subprocess.Popen[bytes] | None = None
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", PTY_ROWS, PTY_COLS, 0, 0))
        terminal = _terminal_name(slave) if released is not None else None
        if (
            released is not None
            and terminal is not None
            and released.accepts(plan.executable, plan.env, [master, slave, *plan.pass_fds])
        ):
            pid = released.spawn(
                plan.executable,
                plan.argv,
                plan.env,
                plan.cwd,
                terminal=terminal,
                pass_fds=plan.pass_fds,
            )
        else:
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
            pid = popen.pid
    except BaseException:
        _close_all([master, slave])
        raise
    os.close(slave)
    os.set_blocking(master, False)
    return Spawned(pid, popen, master, [(master, "pty")], master)
