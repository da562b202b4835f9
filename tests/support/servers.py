"""Start real exec-servers for tests: ours (``python -m execserver serve``) and the
reference ``codex exec-server`` 0.169.0 (installed, pinned and verified, by
``scripts/reference.py`` on first use).

Both are real child processes listening on 127.0.0.1; the first stdout line
of each is its ws:// URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from scripts import reference

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ReferenceUnavailable = reference.ReferenceUnavailable


@dataclass
class RunningServer:
    kind: str  # "execserver" | "reference"
    url: str
    process: asyncio.subprocess.Process

    @property
    def http_url(self) -> str:
        return "http://" + self.url.removeprefix("ws://")


def reference_binary() -> str:
    """Path of the reference codex binary (``$CODEX_BIN``, else installed on first use).

    Raises :class:`ReferenceUnavailable` when it cannot be had; the test
    conftest turns that into one skip reason (or an error under
    ``EXECSERVER_REQUIRE_REFERENCE=1``)."""
    return str(reference.reference_binary())


def execserver_command(extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "execserver", "serve", *extra]


def reference_command(extra: Sequence[str] = ()) -> list[str]:
    return [reference_binary(), "exec-server", *extra]


async def _read_url(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    url = line.decode().strip()
    if not url.startswith("ws://"):
        raise RuntimeError(f"server did not print a ws:// URL first, got {url!r}")
    return url


async def stop_process(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def start_server(
    kind: str,
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
    wrapper: Sequence[str] = (),
    stderr: IO[bytes] | None = None,
) -> AsyncIterator[RunningServer]:
    """Start one server on ws://127.0.0.1:<free port> and stop it afterwards.
    ``wrapper``: argv put in front of the server's command (it must exec the rest),
    e.g. a simulated host without user namespaces. ``stderr``: a file for the
    server's log (default: the test's own stderr)."""
    listen = ["--listen", "ws://127.0.0.1:0"]
    if kind == "execserver":
        cmd = execserver_command([*listen, *extra])
    elif kind == "reference":
        cmd = reference_command([*listen, *extra])
    else:
        raise ValueError(kind)
    cmd = [*wrapper, *cmd]
    full_env = dict(os.environ if env is None else env)
    # The start-up sandbox probe (tested in tests/unit/test_doctor.py) would briefly
    # add fds and children to every server the suite starts.
    full_env.setdefault("EXECSERVER_STARTUP_PROBE", "0")
    if kind == "reference":
        full_env.setdefault("CODEX_HOME", str(reference.codex_home()))
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env=full_env,
        cwd=str(PROJECT_ROOT),
    )
    try:
        url = await _read_url(proc)
        yield RunningServer(kind, url, proc)
    finally:
        await stop_process(proc)
