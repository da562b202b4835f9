"""One execserver daemon per test process (per pytest-xdist worker), for the tests
that a fresh session already isolates.

Starting a daemon costs about a third of a second and most integration tests need
one only to open a session on it: each connection gets a session of its own, with
its own processes, handles and watches. Those tests share this daemon; a test that
kills, limits, configures, restarts or measures the server is marked
``fresh_daemon`` and gets one of its own (tests/conftest.py).

The daemon keeps a detached session for its TTL (80 s by default) so a client can
resume it, with its processes still running. Shared, it runs with a TTL of zero:
a test's session ends with its connection, and its processes are killed then,
as a fresh daemon's are when it stops; the leak check sees them gone. A test that
resumes a session needs the default TTL, so it is ``fresh_daemon``.

The daemon is made on its own event loop (``asyncio.Runner``), which runs only
while it starts, is checked between tests and stops: the tests' loops come and
go with each test (pytest-asyncio's function scope).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager

import psutil

from tests.support.procinfo import ORPHAN_GUARD_NAME, is_zombie_or_gone
from tests.support.servers import RunningServer, start_server

__all__ = [
    "SHARED_DAEMON_FLAGS",
    "SharedDaemon",
    "SharedDaemonStopped",
    "helper_subtrees",
]

# A session ends with its connection (see above).
SHARED_DAEMON_FLAGS = ("--session-ttl", "0")

# Every sandboxed fs helper the daemon spawns carries this variable in its
# environment (execserver/sandbox/helper_pids.py, helper_environment).
_HELPER_ENV_PREFIX = b"EXECSERVER_HELPER="


class SharedDaemonStopped(AssertionError):
    """The shared daemon is gone after a test: that test stops or kills the server
    and must be marked ``fresh_daemon``."""


class SharedDaemon:
    """The per-process daemon: started on first use, started again if a test took
    it down (after failing that test), stopped at the end of the session.

    A module whose tests all need the same daemon setting (``extra`` flags, its
    ``env``) can share one such daemon of its own the same way: made by a
    module-scoped fixture, which pytest sets up before any test's leak check looks
    (so it is never a test's leftover: the fixture must start it, with ``get``),
    and closed by it."""

    def __init__(self, extra: Sequence[str] = (), env: Mapping[str, str] | None = None) -> None:
        self._extra = tuple(extra)
        self._env = None if env is None else dict(env)
        self._runner: asyncio.Runner | None = None
        self._context: AbstractAsyncContextManager[RunningServer] | None = None
        self._server: RunningServer | None = None

    @property
    def pid(self) -> int | None:
        """The running daemon's pid, None before the first use."""
        return None if self._server is None else self._server.process.pid

    def get(self) -> RunningServer:
        """The running daemon (started now when there is none, or it has exited).
        Called outside any running event loop (a synchronous fixture)."""
        if self._server is None or not self.alive():
            self.close()
            self._runner = asyncio.Runner()
            context = start_server(
                "execserver", extra=(*SHARED_DAEMON_FLAGS, *self._extra), env=self._env
            )
            self._server = self._runner.run(context.__aenter__())
            self._context = context
        return self._server

    def alive(self) -> bool:
        """Whether the daemon is still running. Asked of the kernel: its exit reaches
        its own loop (which runs only here) some turns after it happened, and a
        daemon killed just before a test then looked alive to it."""
        if self._server is None or self._runner is None:
            return False
        process = self._server.process
        if process.returncode is None and not is_zombie_or_gone(process.pid):
            return True
        self._runner.run(process.wait())  # its exit status, for the report
        return False

    def check_alive(self) -> None:
        """After a test that used the daemon: raise if it has gone."""
        if self._server is not None and not self.alive():
            code = self._server.process.returncode
            raise SharedDaemonStopped(
                f"the shared execserver daemon exited (status {code}) during this test; "
                "a test that stops, kills or restarts the server must be marked "
                "@pytest.mark.fresh_daemon"
            )

    def close(self) -> None:
        """Stop the daemon (SIGTERM, as any test daemon) and its loop."""
        context, runner = self._context, self._runner
        self._context = self._server = self._runner = None
        if runner is None:
            return
        with runner:
            if context is not None:
                runner.run(context.__aexit__(None, None, None))


def helper_subtrees(daemon_pid: int) -> set[int]:
    """The daemon's sandboxed fs helpers and everything under them, and its orphan
    guard: the daemon's own long-lived children (the persistent helper pool outlives
    the session that first needed it), which are not a test's leftovers."""
    found: set[int] = set()
    try:
        children = psutil.Process(daemon_pid).children()
    except psutil.NoSuchProcess:
        return found
    for child in children:
        try:
            if child.name() == ORPHAN_GUARD_NAME:
                found.add(child.pid)
                continue
            if not any(entry.startswith(_HELPER_ENV_PREFIX) for entry in _environ(child.pid)):
                continue
            found.add(child.pid)
            found.update(p.pid for p in child.children(recursive=True))
        except psutil.NoSuchProcess:
            continue
    return found


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []
