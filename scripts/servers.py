"""Start real exec-servers as child processes: ours (``python -m execserver serve``)
and the reference ``codex exec-server`` 0.169.0 (installed, pinned and verified
by ``scripts/reference.py`` on first use, or ``$CODEX_BIN``).

Shared by the tests (through tests/support/servers.py) and the benchmarks, so
neither imports the other. Both servers listen on 127.0.0.1 and print their ws://
URL first; :func:`execserver.client.local.start_daemon` starts and stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from execserver.client.local import start_daemon, stop_daemon
from scripts import reference

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ReferenceUnavailable = reference.ReferenceUnavailable

__all__ = [
    "PROJECT_ROOT",
    "ReferenceUnavailable",
    "RunningServer",
    "execserver_command",
    "reference_binary",
    "reference_command",
    "start_server",
    "stop_process",
]

stop_process = stop_daemon


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


@contextlib.asynccontextmanager
async def start_server(
    kind: str,
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
    wrapper: Sequence[str] = (),
    stderr: IO[bytes] | None = None,
    cwd: str | Path | None = None,
    serve: Sequence[str] | None = None,
) -> AsyncIterator[RunningServer]:
    """Start one server on ws://127.0.0.1:<free port> and stop it afterwards.
    ``wrapper``: argv put in front of the server's command (it must exec the rest),
    e.g. a simulated host without user namespaces. ``stderr``: a file for the
    server's log (default: our own stderr). ``cwd``: the daemon's working
    directory (default: the project root). ``serve``: for execserver, the argv that
    stands for ``python -m execserver serve`` (a test's own entry point, e.g.
    tests/support/netproxy_serve.py)."""
    listen = ["--listen", "ws://127.0.0.1:0"]
    if kind == "execserver":
        cmd = [*serve, *listen, *extra] if serve else execserver_command([*listen, *extra])
    elif kind == "reference":
        cmd = reference_command([*listen, *extra])
    else:
        raise ValueError(kind)
    full_env = dict(os.environ if env is None else env)
    # The start-up sandbox probe (tested in tests/unit/test_doctor.py) would briefly
    # add fds and children to every server started here.
    full_env.setdefault("EXECSERVER_STARTUP_PROBE", "0")
    own_home: tempfile.TemporaryDirectory[str] | None = None
    if kind == "reference" and "CODEX_HOME" not in full_env:
        # A $CODEX_HOME per server: codex keeps its sandbox helper's arg0 links under
        # $CODEX_HOME/tmp/arg0 and prunes the ones it takes for stale, so reference
        # servers sharing one home (parallel workers, two suites at once) could lose
        # their `codex-linux-sandbox` mid-run ("bwrap: execvp codex-linux-sandbox").
        own_home = tempfile.TemporaryDirectory(prefix="home-", dir=reference.codex_home())
        full_env["CODEX_HOME"] = own_home.name
    try:
        async with start_daemon(
            [*wrapper, *cmd],
            env=full_env,
            cwd=str(PROJECT_ROOT if cwd is None else cwd),
            # A pipe, so a test can close the server's stdin (--exit-on-stdin-close).
            stdin=asyncio.subprocess.PIPE,
            stderr=stderr,
        ) as daemon:
            yield RunningServer(kind, daemon.url, daemon.process)
    finally:
        if own_home is not None:
            own_home.cleanup()
