"""What ``execserver run`` and ``execserver shell`` do once their arguments are
parsed: connect, launch the remote command, stream it, and end it.

``run`` starts one remote command, streams its stdout/stderr to ours and exits
with its exit code. ``shell`` attaches an interactive PTY: the local terminal
goes raw and keystrokes are written to the remote terminal, ^C included: the
remote pty's line discipline turns it into SIGINT for the foreground job, as
over ssh. (Sending ``process/signal interrupt`` as well would deliver a second
SIGINT to whatever is in the foreground by then, e.g. the shell's prompt, which
then discards what was typed after the ^C.)

Whatever ends the local side — the remote command finishing, SIGTERM, SIGHUP,
our stdout closing (``| head``), a lost connection — the remote command is
terminated before we exit, so nothing keeps running on the executor.

Exit codes: see :mod:`execserver.client.cli_errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Final

from execserver.aio.tasks import TaskSet
from execserver.client.cli_errors import (
    EXIT_BROKEN_PIPE,
    EXIT_CONNECTION,
    EXIT_TIMEOUT,
    UsageError,
    report,
)
from execserver.client.cli_terminal import (
    forward_window_size,
    raw_terminal,
    read_stdin,
    read_stdin_to_end,
    window_size,
)
from execserver.client.commands import (
    INHERIT_ENV_POLICY,
    STDIN_STAGING_LIMIT,
    Launched,
    launch,
    remote_temp_path,
    terminate,
)
from execserver.client.connection import ExecServerClient
from execserver.client.errors import ExecServerError
from execserver.client.events import Closed, Exited, Output
from execserver.client.process import RemoteProcess

__all__ = ["run_command", "run_shell"]

CTRL_D: Final = b"\x04"
# Signals that end the local side; the remote command is terminated first.
ENDING_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP)


def _server_cwd(client: ExecServerClient, cwd: str | None) -> str:
    if cwd is not None:
        return posixpath.normpath(cwd)
    info = client.environment_info
    if info is None or not info.cwd:
        raise UsageError("the exec-server did not report its working directory; pass --cwd")
    return info.cwd


async def run_command(
    url: str,
    argv: Sequence[str],
    *,
    token: str | None = None,
    cwd: str | None = None,
    tty: bool = False,
    forward_stdin: bool = False,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> int:
    overlay = dict(env or {})
    if tty:
        overlay.setdefault("TERM", os.environ.get("TERM", "xterm-256color"))
    staged: bytes | None = None
    if forward_stdin and not tty:
        # A pipe's stdin cannot be closed through the protocol: read ours to its
        # end and let the command read it from a file on the executor.
        staged = await read_stdin_to_end(STDIN_STAGING_LIMIT)
    async with await ExecServerClient.connect(url, token=token, client_name="execserver run") as c:
        with _ending_signals() as ended:
            try:
                launched = await launch(
                    c,
                    list(argv),
                    cwd=_server_cwd(c, cwd),
                    env=overlay,
                    env_policy=INHERIT_ENV_POLICY,
                    tty=tty,
                    staged_stdin=staged,
                )
            except asyncio.CancelledError:
                return _signal_exit(ended)  # launch terminated what it started
            raw = tty and os.isatty(0)
            pump = forward_stdin and tty
            return await _attach(c, launched, ended, raw=raw, pump_stdin=pump, timeout=timeout)


async def run_shell(
    url: str,
    argv: Sequence[str] = (),
    *,
    token: str | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> int:
    overlay = dict(env or {})
    overlay.setdefault("TERM", os.environ.get("TERM", "xterm-256color"))
    async with await ExecServerClient.connect(
        url, token=token, client_name="execserver shell"
    ) as c:
        if not argv:
            info = c.environment_info
            argv = [info.shell.path if info is not None and info.shell.path else "/bin/sh"]
        size = window_size()
        command = list(argv)
        tty_file: str | None = None
        if size is not None:
            # The protocol has no resize: the remote pty starts at 24x80. Set our
            # size from inside the terminal before the program starts, and note
            # which pty it is so a later SIGWINCH can resize it (stty -F).
            rows, cols = size
            tty_file = remote_temp_path(c, "execserver-shell-tty")
            command = ["/bin/sh", "-c", _SIZED_START, "sh", str(rows), str(cols), tty_file, *argv]
        with _ending_signals() as ended:
            try:
                launched = await launch(
                    c, command, cwd=_server_cwd(c, cwd), env=overlay,
                    env_policy=INHERIT_ENV_POLICY, tty=True,
                )  # fmt: skip
            except asyncio.CancelledError:
                return _signal_exit(ended)  # launch terminated what it started
            raw = os.isatty(0)
            try:
                async with forward_window_size(c, tty_file):
                    return await _attach(c, launched, ended, raw=raw, pump_stdin=True)
            finally:
                if tty_file is not None:
                    with contextlib.suppress(ExecServerError, OSError):
                        await c.fs.remove(tty_file, recursive=False)


# $1 rows, $2 cols, $3 where to note the pty's name, the rest the program.
_SIZED_START: Final = (
    'stty rows "$1" cols "$2" 2>/dev/null; tty >"$3" 2>/dev/null; shift 3; exec "$@"'
)


def _signal_exit(ended: _Ended) -> int:
    if ended.signum is None:
        raise asyncio.CancelledError  # not ours: keep cancelling
    return 128 + ended.signum


class _Ended:
    """Which ending signal arrived (if any)."""

    signum: int | None = None


@contextlib.contextmanager
def _ending_signals() -> Iterator[_Ended]:
    """SIGTERM/SIGHUP cancel the current task; ``_attach`` then terminates the
    remote command and exits 128+N."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    ended = _Ended()

    def on_signal(signum: int) -> None:
        if ended.signum is None:
            ended.signum = signum
            if task is not None:
                task.cancel()

    for signum in ENDING_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        yield ended
    finally:
        for signum in ENDING_SIGNALS:
            loop.remove_signal_handler(signum)


async def _attach(
    client: ExecServerClient,
    launched: Launched,
    ended: _Ended,
    *,
    raw: bool,
    pump_stdin: bool,
    timeout: float | None = None,
) -> int:
    """Stream the process's output to ours (and our stdin to it) until it closes;
    terminate it when we end first, or when ``timeout`` expires (exit 124)."""
    proc = launched.process
    stdin_copy = TaskSet("execserver-run-stdin")
    try:
        with raw_terminal(raw):
            async with _forward_sigint(proc):
                if pump_stdin:
                    stdin_copy.spawn(_pump_stdin(proc, raw=raw), name=proc.process_id)
                async with asyncio.timeout(timeout) as scope:
                    return await _stream_output(proc)
    except TimeoutError:
        await terminate(client, proc)
        if not scope.expired():
            raise
        report(
            "execserver run", f"timed out after {timeout:g} s; the remote command was terminated"
        )
        return EXIT_TIMEOUT
    except BrokenPipeError:
        await terminate(client, proc)
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except asyncio.CancelledError:
        await terminate(client, proc)
        return _signal_exit(ended)
    except BaseException:
        await terminate(client, proc)
        raise
    finally:
        await stdin_copy.aclose()
        await launched.cleanup(client)


def _silence_stdout() -> None:
    """Our stdout reader went away: point fd 1 at /dev/null so the interpreter's
    final flush does not complain about the broken pipe."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


async def _stream_output(proc: RemoteProcess) -> int:
    out = sys.stdout.buffer
    err = sys.stderr.buffer
    code = EXIT_CONNECTION
    async for event in proc:
        if isinstance(event, Output):
            target = err if event.stream == "stderr" else out
            target.write(event.data)
            target.flush()
        elif isinstance(event, Exited):
            code = event.exit_code
        elif isinstance(event, Closed):
            break
    return code


async def _pump_stdin(proc: RemoteProcess, *, raw: bool) -> None:
    """Copy local stdin into the remote terminal until EOF, then end its input.

    Errors end the copy quietly: the output stream reports what happened to the
    process, and the exit code must come from there.
    """
    last = b"\n"
    try:
        async for data in read_stdin():
            await proc.write(data)
            last = data[-1:]
        if not raw:
            # ^D ends the input only at the start of a line; after a partial line
            # the first one just hands that line over.
            await proc.write(CTRL_D if last == b"\n" else CTRL_D * 2)
    except ExecServerError:
        return


@contextlib.asynccontextmanager
async def _forward_sigint(proc: RemoteProcess) -> AsyncIterator[None]:
    """A local SIGINT (when the terminal is not raw) interrupts the remote process;
    an interrupt still in flight when the command ends is cancelled and awaited."""
    loop = asyncio.get_running_loop()
    interrupts = TaskSet("execserver-run-interrupts")

    def on_sigint() -> None:
        if not interrupts.closed:
            interrupts.spawn(_quiet(proc.interrupt), name=proc.process_id)

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        await interrupts.aclose()


async def _quiet(call: Callable[[], Any]) -> None:
    with contextlib.suppress(ExecServerError):
        await call()
