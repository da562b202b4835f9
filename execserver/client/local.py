"""``serve_local``: a private execserver daemon on 127.0.0.1 for tests, notebooks
and local use, with a client already connected to it.

    async with execserver.serve_local() as client:
        print((await client.run(["uname", "-a"], cwd="/tmp", text=True)).stdout)

The daemon is a child process (``python -m execserver serve``) listening on a
free loopback port; it is stopped, with every process it started, when the
block ends, and also when the process that started it ends without leaving
the block (killed, crashed): its stdin is a pipe only the owner holds, and it
runs with ``--exit-on-stdin-close``. The client package never imports the
server in-process.

``start_daemon`` is the starter underneath: it runs any exec-server command that
prints its ws:// URL as the first stdout line (ours, or the reference ``codex
exec-server``) and stops it afterwards. The tests and benchmarks start their
servers with it too (scripts/servers.py), so there is one way to start a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from execserver.client.connection import ExecServerClient
from execserver.client.errors import ExecServerConnectError

STARTUP_TIMEOUT: Final = 60.0
STOP_TIMEOUT: Final = 10.0
LOOPBACK_ANY_PORT: Final = "ws://127.0.0.1:0"


__all__ = ["Daemon", "serve_local", "start_daemon", "stop_daemon"]


@contextlib.asynccontextmanager
async def serve_local(
    *,
    args: Sequence[str] = (),
    log_level: str = "WARNING",
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    startup_timeout: float = STARTUP_TIMEOUT,
    **client_options: Any,
) -> AsyncIterator[ExecServerClient]:
    """Start a daemon on a free loopback port and yield a client connected to it.

    ``args`` are extra ``execserver serve`` flags (e.g. ``["--session-ttl", "5"]``);
    ``client_options`` go to :meth:`ExecServerClient.connect` (``client.url`` is
    the daemon's URL, for a second client or the CLI).
    """
    # The daemon's stdin is a pipe only this process holds (asyncio closes other
    # fds in children): whenever this process ends, SIGKILL included, the pipe
    # closes and --exit-on-stdin-close stops the daemon with its processes. A
    # pipe rather than PR_SET_PDEATHSIG, which fires when the forking *thread*
    # exits (a short-lived asyncio.run thread) and not only the process.
    argv = [python, "-m", "execserver", "serve", "--listen", LOOPBACK_ANY_PORT,
            "--log-level", log_level, "--exit-on-stdin-close", *args]  # fmt: skip
    async with (
        start_daemon(
            argv, env=env, stdin=asyncio.subprocess.PIPE, startup_timeout=startup_timeout
        ) as daemon,
        await ExecServerClient.connect(daemon.url, **client_options) as client,
    ):
        yield client


@dataclass(frozen=True)
class Daemon:
    """A running exec-server child process and the ws:// URL it printed."""

    url: str
    process: asyncio.subprocess.Process


@contextlib.asynccontextmanager
async def start_daemon(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: int = asyncio.subprocess.DEVNULL,
    stderr: IO[bytes] | int | None = None,
    startup_timeout: float = STARTUP_TIMEOUT,
) -> AsyncIterator[Daemon]:
    """Run ``argv``, an exec-server that prints its ws:// URL as its first stdout
    line, and stop it when the block ends (:func:`stop_daemon`).

    ``stdin``: ``DEVNULL`` by default; ``PIPE`` keeps it open for the caller
    (``--exit-on-stdin-close``). ``stderr``: where the daemon's log goes (default:
    ours). :class:`ExecServerConnectError` if no URL comes within
    ``startup_timeout`` seconds.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env=None if env is None else dict(env),
        cwd=cwd,
    )
    try:
        url = await _first_line(proc, startup_timeout)
        yield Daemon(url, proc)
    finally:
        await stop_daemon(proc)


async def _first_line(proc: asyncio.subprocess.Process, timeout: float) -> str:
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(timeout):
            line = (await proc.stdout.readline()).decode().strip()
    except TimeoutError:
        raise ExecServerConnectError(
            f"the local execserver printed no URL within {timeout:g} s"
        ) from None
    if not line.startswith("ws://"):
        code = await proc.wait() if not line else None
        raise ExecServerConnectError(
            f"the local execserver did not start (exit code {code}); see its stderr above"
            if code is not None
            else f"the local execserver printed {line!r} instead of its URL"
        )
    return line


async def stop_daemon(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM (the daemon kills its processes and exits), SIGKILL after 10 s."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
