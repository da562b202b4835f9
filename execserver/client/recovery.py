"""Resuming a session after its transport was lost: the retry loop and its deadline.

When ``ExecServerClient`` loses its connection it hands the session to its
``SessionRecovery``. One attempt runs at a time, as a task the recovery owns:
it keeps opening a connection that resumes the session until the deadline,
retrying what a server says while it has not yet noticed the old connection
is gone (``-32010``) or while it is briefly unreachable, then catches the live
processes up on the new connection. It ends by telling the client
``resumed()`` or ``give_up(message)``.

What the recovery needs from the client is the small ``Resumable`` protocol,
so the client keeps the connection, its state and the calls, and this module
keeps only the loop.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Final, Protocol

from execserver.aio.tasks import TaskSet
from execserver.client.errors import (
    ExecServerConnectError,
    ExecServerError,
    ExecServerTimeout,
    ExecServerTransportClosed,
    SessionAttached,
)
from execserver.client.rpc import RpcConnection

__all__ = [
    "RECOVERY_DEADLINE",
    "RECOVERY_RETRY_DELAY",
    "RECOVERY_RETRY_DELAY_MAX",
    "SESSION_TTL",
    "Resumable",
    "SessionRecovery",
]

# The client's logger: what the recovery says keeps the name it always had.
log = logging.getLogger("execserver.client.connection")

# How long both servers keep a detached session (and its processes) alive.
SESSION_TTL: Final = 80.0
# How long the client keeps resuming after the connection is lost: as long as the
# server can still hold the session.
RECOVERY_DEADLINE: Final = SESSION_TTL
RECOVERY_RETRY_DELAY: Final = 0.1
RECOVERY_RETRY_DELAY_MAX: Final = 2.0

# Retryable while resuming: the server may not have noticed the old connection
# is gone yet (-32010), or is briefly unreachable.
_RETRYABLE = (
    SessionAttached,
    ExecServerTransportClosed,
    ExecServerTimeout,
    ExecServerConnectError,
    TimeoutError,
)


class Resumable(Protocol):
    """What a recovery needs from the client whose session it resumes."""

    @property
    def session_id(self) -> str: ...

    @property
    def recovery_deadline(self) -> float:
        """How long, in seconds, to keep trying (read when an attempt starts)."""
        ...

    @property
    def give_up_when_refused(self) -> bool:
        """A refused connection ends the attempt at once (nothing listens there any more)."""
        ...

    async def open_resumed(self) -> RpcConnection:
        """A new connection, handshake done, attached to ``session_id``."""
        ...

    async def adopt(self, conn: RpcConnection) -> None:
        """Make ``conn`` the client's connection (closing the old one)."""
        ...

    async def catch_up(self, conn: RpcConnection) -> None:
        """Read on ``conn`` what the live processes printed meanwhile."""
        ...

    def resumed(self) -> None:
        """The session is back: calls may run again."""
        ...

    def give_up(self, message: str) -> None:
        """The session cannot be resumed: fail what waits for it."""
        ...


class SessionRecovery:
    """One client's recovery: at most one attempt at a time, owned here.

    ``start`` begins an attempt; ``wait`` waits for it to end (a waiter that is
    cancelled does not stop it); ``aclose`` cancels it and waits until it has stopped.
    """

    def __init__(self, client: Resumable) -> None:
        self._client = client
        self._tasks = TaskSet("execserver-recover", logger=log)
        self._attempt: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._attempt is not None and not self._attempt.done()

    def start(self, reason: str) -> None:
        """Resume the session, lost for ``reason``, for up to the client's
        ``recovery_deadline``."""
        self._attempt = self._tasks.spawn(self._run(reason), name="session")

    async def wait(self) -> None:
        """Until the current attempt (if any) has ended, however it ended."""
        attempt = self._attempt
        if attempt is not None and not attempt.done():
            await asyncio.wait([attempt])

    async def aclose(self) -> None:
        self._attempt = None
        await self._tasks.aclose()

    async def _run(self, reason: str) -> None:
        try:
            await self._recover(reason)
        except asyncio.CancelledError:
            # Cancelled from outside (its loop closing, not aclose: a closed client is
            # CLOSED already): a call waiting for it must not wait for nothing.
            self._client.give_up(f"recovery of session {self._client.session_id} was cancelled")
            raise
        except Exception as exc:
            # A bug, not a lost server: still end the recovery, so no call waits
            # for one that has stopped (the task set logs the traceback).
            self._client.give_up(f"recovery of session {self._client.session_id} failed: {exc!r}")
            raise

    async def _recover(self, reason: str) -> None:
        client = self._client
        loop = asyncio.get_running_loop()
        deadline = loop.time() + client.recovery_deadline
        last_error = reason
        delay = RECOVERY_RETRY_DELAY
        while loop.time() < deadline:
            try:
                async with asyncio.timeout(max(deadline - loop.time(), 0.01)):
                    conn = await client.open_resumed()
            except _RETRYABLE as exc:
                last_error = str(exc) or type(exc).__name__
                if client.give_up_when_refused and _refused(exc):
                    client.give_up(f"cannot resume exec-server session {client.session_id}: {exc}")
                    return
                await asyncio.sleep(min(delay, max(deadline - loop.time(), 0)))
                delay = min(delay * 2, RECOVERY_RETRY_DELAY_MAX)
                continue
            except ExecServerError as exc:
                client.give_up(f"cannot resume exec-server session {client.session_id}: {exc}")
                return
            await client.adopt(conn)
            try:
                await client.catch_up(conn)
            except (ExecServerTransportClosed, ExecServerTimeout) as exc:
                last_error = str(exc)
                continue
            if conn.is_lost:
                continue
            client.resumed()
            log.info("exec-server session %s resumed", client.session_id)
            return
        client.give_up(f"cannot resume exec-server session {client.session_id}: {last_error}")


def _refused(exc: BaseException) -> bool:
    """Nothing listens at the address (or the name no longer resolves): the
    server process that held the session is gone."""
    cause = exc.__cause__
    return (
        isinstance(exc, ExecServerConnectError)
        and exc.status is None
        and isinstance(cause, ConnectionRefusedError | socket.gaierror)
    )
