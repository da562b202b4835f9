"""``serve_local``: a private execserver daemon on 127.0.0.1 for tests, notebooks
and local use, with a client already connected to it.

    async with execserver.serve_local() as client:
        print((await client.run(["uname", "-a"], cwd="/tmp", text=True)).stdout)

The daemon is a child process (``python -m execserver serve``) listening on a
free loopback port; it is stopped, with every process it started, when the
block ends. The client package never imports the server in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

from execserver.client.connection import ExecServerClient
from execserver.client.errors import ExecServerConnectError

STARTUP_TIMEOUT: Final = 60.0
STOP_TIMEOUT: Final = 10.0
LOOPBACK_ANY_PORT: Final = "ws://127.0.0.1:0"


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
    proc = await asyncio.create_subprocess_exec(
        python, "-m", "execserver", "serve", "--listen", LOOPBACK_ANY_PORT,
        "--log-level", log_level, *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        env=None if env is None else dict(env),
    )  # fmt: skip
    try:
        url = await _first_line(proc, startup_timeout)
        async with await ExecServerClient.connect(url, **client_options) as client:
            yield client
    finally:
        await _stop(proc)


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


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()  # SIGTERM: the daemon kills its processes and exits
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
