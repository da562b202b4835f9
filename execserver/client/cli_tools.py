"""``execserver run`` and ``execserver shell``: a person's way to drive an exec-server.

``run`` starts one remote command, streams its stdout/stderr to ours and exits
with its exit code. ``shell`` attaches an interactive PTY: the local terminal
goes raw and keystrokes are written to the remote terminal, ^C included: the
remote pty's line discipline turns it into SIGINT for the foreground job, as
over ssh. (Sending ``process/signal interrupt`` as well would deliver a second
SIGINT to whatever is in the foreground by then, e.g. the shell's prompt, which
then discards what was typed after the ^C.)

Exit codes: the remote process's code; 255 when the client itself failed
(connection refused, process lost), like ssh.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import termios
import tty
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from execserver.client.connection import ExecServerClient
from execserver.client.errors import ExecServerError
from execserver.client.events import Closed, Exited, Failed, Output
from execserver.client.process import RemoteProcess
from execserver.wire.process import ExecEnvPolicy

CLIENT_ERROR_EXIT = 255
CTRL_D = b"\x04"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``run`` and ``shell`` to the ``execserver`` command line."""
    run = subparsers.add_parser(
        "run",
        help="run a command on an exec-server and stream its output",
        description="Run ARGV on the exec-server at URL; exits with the remote exit code.",
    )
    _common_options(run)
    run.add_argument("--tty", action="store_true", help="run under a remote pseudo-terminal")
    run.add_argument(
        "--stdin",
        action="store_true",
        help="forward local stdin to the command (without --tty the remote stdin "
        "cannot be closed, so use this only for commands that stop by themselves)",
    )
    run.add_argument("argv", nargs="+", help="the command, after --")
    run.set_defaults(func=_cmd_run)

    shell = subparsers.add_parser(
        "shell",
        help="open an interactive shell on an exec-server",
        description="Attach an interactive remote PTY running the server's shell (or ARGV).",
    )
    _common_options(shell)
    shell.add_argument("argv", nargs="*", help="program to run instead of the login shell")
    shell.set_defaults(func=_cmd_shell)


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="ws://HOST:PORT of the exec-server")
    parser.add_argument("--cwd", help="remote working directory (default: the server's)")
    parser.add_argument(
        "--token",
        default=os.environ.get("EXECSERVER_TOKEN"),
        help="bearer token for an authenticated server (default $EXECSERVER_TOKEN)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable in the remote environment (repeatable)",
    )


def _cmd_run(args: argparse.Namespace) -> int:
    return asyncio.run(
        _guard(
            run_command(
                args.url,
                args.argv,
                token=args.token,
                cwd=args.cwd,
                tty=args.tty,
                forward_stdin=args.stdin or args.tty,
                env=_parse_env(args.env),
            )
        )
    )


def _cmd_shell(args: argparse.Namespace) -> int:
    return asyncio.run(
        _guard(
            run_shell(args.url, args.argv, token=args.token, cwd=args.cwd, env=_parse_env(args.env))
        )
    )


async def _guard(main: Any) -> int:
    try:
        code: int = await main
    except (ExecServerError, OSError) as exc:
        sys.stderr.write(f"execserver: {exc}\n")
        sys.stderr.flush()
        return CLIENT_ERROR_EXIT
    return code


def _parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"execserver: --env expects NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


def _inherit_server_env(extra: dict[str, str]) -> tuple[ExecEnvPolicy, dict[str, str]]:
    # A person running a command expects the server's usual environment (PATH,
    # HOME...), not the empty one a bare `env` map would give (protocol §8.4.2).
    policy = ExecEnvPolicy(
        inherit="all", ignore_default_excludes=False, exclude=[], set={}, include_only=[]
    )
    return policy, extra


async def run_command(
    url: str,
    argv: Sequence[str],
    *,
    token: str | None = None,
    cwd: str | None = None,
    tty: bool = False,
    forward_stdin: bool = False,
    env: dict[str, str] | None = None,
) -> int:
    extra = dict(env or {})
    if tty:
        extra.setdefault("TERM", os.environ.get("TERM", "xterm-256color"))
    policy, overlay = _inherit_server_env(extra)
    async with await ExecServerClient.connect(url, token=token, client_name="execserver run") as c:
        proc = await c.start_process(
            argv,
            cwd=cwd,
            env=overlay,
            env_policy=policy,
            tty=tty,
            pipe_stdin=forward_stdin and not tty,
        )
        raw = tty and os.isatty(0)
        with _raw_terminal(raw), _forward_sigint(proc):
            pump = (
                asyncio.create_task(_pump_stdin(proc, eof=CTRL_D if tty else None))
                if forward_stdin
                else None
            )
            try:
                return await _stream_output(proc)
            finally:
                if pump is not None:
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pump


async def run_shell(
    url: str,
    argv: Sequence[str] = (),
    *,
    token: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
) -> int:
    extra = dict(env or {})
    extra.setdefault("TERM", os.environ.get("TERM", "xterm-256color"))
    policy, overlay = _inherit_server_env(extra)
    async with await ExecServerClient.connect(
        url, token=token, client_name="execserver shell"
    ) as c:
        if not argv:
            info = c.environment_info
            argv = [info.shell.path if info is not None and info.shell.path else "/bin/sh"]
        proc = await c.start_process(argv, cwd=cwd, env=overlay, env_policy=policy, tty=True)
        raw = os.isatty(0)
        with _raw_terminal(raw), _forward_sigint(proc):
            pump = asyncio.create_task(_pump_stdin(proc, eof=CTRL_D))
            try:
                return await _stream_output(proc)
            finally:
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump


async def _stream_output(proc: RemoteProcess) -> int:
    out = sys.stdout.buffer
    err = sys.stderr.buffer
    code = CLIENT_ERROR_EXIT
    async for event in proc:
        if isinstance(event, Output):
            target = err if event.stream == "stderr" else out
            target.write(event.data)
            target.flush()
        elif isinstance(event, Exited):
            code = event.exit_code
        elif isinstance(event, Failed):
            sys.stderr.write(f"execserver: {event.message}\n")
            return CLIENT_ERROR_EXIT
        elif isinstance(event, Closed):
            break
    return code


async def _pump_stdin(proc: RemoteProcess, *, eof: bytes | None) -> None:
    """Copy local stdin to the remote process until EOF (then send ``eof`` if given).

    Errors end the copy quietly: the output stream reports what happened to the
    process, and the exit code must come from there.
    """
    try:
        async for data in _read_stdin():
            await proc.write(data)
        if eof is not None:
            await proc.write(eof)
    except ExecServerError:
        return


async def _read_stdin() -> Any:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    fd = sys.stdin.fileno()

    def readable() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
        queue.put_nowait(data)

    try:
        loop.add_reader(fd, readable)
    except (PermissionError, ValueError, OSError):
        # A regular file cannot be polled; read it in a worker thread instead.
        while data := await asyncio.to_thread(os.read, fd, 65536):
            yield data
        return
    try:
        while data := await queue.get():
            yield data
    finally:
        loop.remove_reader(fd)


@contextlib.contextmanager
def _raw_terminal(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    # TCSANOW, not the default TCSAFLUSH: keep what was typed ahead.
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _forward_sigint(proc: RemoteProcess) -> Iterator[None]:
    """A local SIGINT (when the terminal is not raw) interrupts the remote process."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def on_sigint() -> None:
        task = loop.create_task(_quiet(proc.interrupt))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _quiet(call: Callable[[], Any]) -> None:
    with contextlib.suppress(ExecServerError):
        await call()
