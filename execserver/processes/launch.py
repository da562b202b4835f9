"""From ``process/start`` params to a running child: the three launch shapes.

``plan_launch`` is the one seam that turns params into what gets exec'd
(program, argv, env, cwd, extra fds); the sandbox planner plugs in there.
``spawn`` then starts it with pipes (stdin writable or /dev/null) or under a
pseudo-terminal. Every child is the leader of a new session (and so of its own
process group), which is what lets the daemon signal or kill its group.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import struct
import subprocess
import termios
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from execserver.processes.envpolicy import build_environment
from execserver.wire.errors import RpcError, os_error_text
from execserver.wire.process import ExecParams, SandboxType

__all__ = ["LaunchPlan", "Spawned", "plan_launch", "spawn"]

# The reference's pseudo-terminal is 24 rows x 80 columns and cannot be resized.
PTY_ROWS = 24
PTY_COLS = 80


@dataclass
class LaunchPlan:
    program: str  # what execve gets (a path, or a bare name resolved against PATH)
    argv: list[str]  # what the program sees, argv[0] included
    env: dict[str, str]
    cwd: str
    tty: bool
    pipe_stdin: bool
    pass_fds: tuple[int, ...] = ()
    sandbox_type: SandboxType = "none"
    # Releases planner resources (e.g. a seccomp program fd) once the child is spawned.
    release: Callable[[], None] = field(default=lambda: None)


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


def _search_path(name: str, path: str, cwd: str) -> str | None:
    for entry in path.split(os.pathsep):
        candidate = os.path.join(cwd, entry or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _resolve_pipe_program(name: str, env: Mapping[str, str], cwd: str) -> str:
    """Non-tty lookup: the child's PATH when it has one, else the daemon's (as Rust's Command)."""
    if "/" in name:
        return name
    path = env.get("PATH")
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    found = _search_path(name, path, cwd)
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
    found = _search_path(name, path, cwd)
    if found is None:
        raise RpcError.internal(
            f'Unable to spawn {name} because:\nNo viable candidates found in PATH "{path}"'
        )
    return found


def plan_launch(params: ExecParams, cwd: str, daemon_env: Mapping[str, str]) -> LaunchPlan:
    """What to exec for an unsandboxed ``process/start`` (argv already checked non-empty).

    Raises RpcError (the reference's spawn error) when the program cannot be found."""
    env = build_environment(params.env, params.env_policy, daemon_env)
    argv = list(params.argv)
    if params.tty:
        # The reference's pty path resolves *and shows* arg0 in place of argv[0].
        if params.arg0 is not None:
            argv[0] = params.arg0
        # A tty child whose cwd is not a directory starts in the home directory instead.
        if not os.path.isdir(cwd):
            cwd = _daemon_home()
        env.setdefault("SHELL", _login_shell())
        program = _resolve_pty_program(argv[0], env, cwd)
    else:
        program = _resolve_pipe_program(argv[0], env, cwd)
        if params.arg0 is not None:
            argv[0] = params.arg0
    return LaunchPlan(
        program=program,
        argv=argv,
        env=env,
        cwd=cwd,
        tty=params.tty,
        pipe_stdin=params.pipe_stdin,
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
        plan.release()


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
    try:
        popen = subprocess.Popen(
            plan.argv,
            executable=plan.program,
            stdin=stdin_arg,
            stdout=out_w,
            stderr=err_w,
            cwd=plan.cwd,
            env=plan.env,
            start_new_session=True,
            pass_fds=plan.pass_fds,
            preexec_fn=place,
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
            executable=plan.program,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=plan.cwd,
            env=plan.env,
            start_new_session=True,
            pass_fds=plan.pass_fds,
            preexec_fn=child_setup,
        )
    except BaseException:
        _close_all([master, slave])
        raise
    os.close(slave)
    os.set_blocking(master, False)
    return Spawned(popen.pid, popen, master, [(master, "pty")], master)
