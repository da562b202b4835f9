"""Sessions: what survives a dropped connection.

A session owns its processes (through its ScopedState). When its connection
closes it is *detached* for ``ttl`` seconds, during which ``initialize`` with
``resumeSessionId`` re-attaches it; when the TTL runs out its state is closed
(processes killed).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from execserver.aio.tasks import TaskSet
from execserver.kernel.scoped import ScopedState
from execserver.tenancy.directory import TenantDirectory
from execserver.tenancy.seat import TenantSeat
from execserver.wire.errors import SESSION_ALREADY_ATTACHED, RpcError

__all__ = ["AttachedConnection", "Session", "SessionRegistry"]

log = logging.getLogger(__name__)


class AttachedConnection(Protocol):
    """What a session needs of the connection it is attached to (the server's
    ``Connection``, which imports this module: a Protocol keeps the two acyclic)."""

    async def send_notification(self, method: str, params: Any) -> None: ...

    async def send_notifications(self, notes: Sequence[tuple[str, Any]]) -> None: ...

    async def request(self, method: str, params: Any, timeout: float | None) -> Any: ...


class Session:
    def __init__(
        self,
        session_id: str,
        principal: str | None = None,
        tenants: TenantDirectory | None = None,
    ) -> None:
        self.id = session_id
        # The tenant that created it (None without --tenants); only it may resume it.
        self.principal = principal
        self.state = ScopedState(f"session {session_id}")
        if principal is not None:
            # Where services find the principal (execserver.tenancy.seat.tenant_of).
            self.state.get(TenantSeat, lambda: TenantSeat(principal, tenants))
        self.connection: AttachedConnection | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self.closed = False
        # Hooks run when a connection (re)attaches, e.g. to resume notification routing.
        self.on_attach: list[Callable[[Session], Awaitable[None]]] = []

    @property
    def attached(self) -> bool:
        return self.connection is not None

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification to the attached connection; dropped while detached.

        The reference does not queue notifications for a detached session: what
        happened meanwhile is read back with process/read.
        """
        conn = self.connection
        if conn is not None:
            await conn.send_notification(method, params)

    async def notify_many(self, notes: Sequence[tuple[str, Any]]) -> None:
        """``notify`` for several, written out together (a process's output chunks)."""
        conn = self.connection
        if conn is not None:
            await conn.send_notifications(notes)

    async def request(self, method: str, params: Any, timeout: float | None) -> Any:
        """Send a server->client request on the attached connection."""
        conn = self.connection
        if conn is None:
            raise ConnectionError("session is detached")
        return await conn.request(method, params, timeout)

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._expiry is not None:
            self._expiry.cancel()
        await self.state.aclose()


class SessionRegistry:
    def __init__(self, ttl_s: float, tenants: TenantDirectory | None = None) -> None:
        self._ttl_s = ttl_s
        # --tenants: the live table a tenant session's seat reads its profile from.
        self.tenants = tenants
        self._sessions: dict[str, Session] = {}
        # The closes of expired sessions (started from a timer callback).
        self._closing = TaskSet("session expiry", logger=log)
        # The principals of sessions being closed: their processes' last audit
        # records still name them.
        self._closing_principals: dict[str, str | None] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def create(self, conn: AttachedConnection, principal: str | None = None) -> Session:
        session = Session(str(uuid.uuid4()), principal, self.tenants)
        self._sessions[session.id] = session
        session.connection = conn
        log.info("session %s opened", session.id)
        return session

    def resume(
        self, session_id: str, conn: AttachedConnection, principal: str | None = None
    ) -> Session:
        session = self._sessions.get(session_id)
        # Another principal's session is refused exactly as one that does not exist
        # (same text, before the attached check): its existence is not told.
        if session is None or session.closed or session.principal != principal:
            raise RpcError.invalid_request(f"unknown session id {session_id}")
        if session.connection is not None:
            raise RpcError(
                SESSION_ALREADY_ATTACHED,
                f"session {session_id} is already attached to another connection",
            )
        if session._expiry is not None:
            session._expiry.cancel()
            session._expiry = None
        session.connection = conn
        log.info("session %s resumed", session.id)
        return session

    def restore(self, session: Session) -> Session:
        """A session an earlier daemon left in --state-dir (server/runner.py),
        registered detached: its TTL runs from now, as if its connection had just
        dropped."""
        self._sessions[session.id] = session
        loop = asyncio.get_running_loop()
        session._expiry = loop.call_later(self._ttl_s, self._expire, session)
        log.info("session %s restored; expires in %.0f s", session.id, self._ttl_s)
        return session

    def detach(self, session: Session, conn: AttachedConnection) -> None:
        if session.connection is not conn:
            return
        session.connection = None
        if session.closed:
            return
        loop = asyncio.get_running_loop()
        session._expiry = loop.call_later(self._ttl_s, self._expire, session)
        log.info("session %s detached; expires in %.0f s", session.id, self._ttl_s)

    def count(self, principal: str) -> int:
        """The sessions (attached or detached) of ``principal``."""
        return sum(1 for s in self._sessions.values() if s.principal == principal)

    def principal_of(self, session_id: str | None) -> str | None:
        if session_id is None:
            return None
        session = self._sessions.get(session_id)
        if session is not None:
            return session.principal
        return self._closing_principals.get(session_id)

    def _close(self, session: Session) -> None:
        self._closing_principals[session.id] = session.principal

        async def close() -> None:
            try:
                await session.aclose()
            finally:
                self._closing_principals.pop(session.id, None)

        self._closing.spawn(close(), name=session.id)

    def end(self, session: Session) -> None:
        """Close ``session`` now (its tenant was removed): as an expiry, not waited for."""
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        if session._expiry is not None:
            session._expiry.cancel()
            session._expiry = None
        log.info("session %s ended", session.id)
        self._close(session)

    def _expire(self, session: Session) -> None:
        if session.connection is not None:
            return
        log.info("session %s expired", session.id)
        self._sessions.pop(session.id, None)
        self._close(session)

    async def aclose(self) -> None:
        sessions = list(self._sessions.values())
        self._sessions.clear()
        await asyncio.gather(*(s.aclose() for s in sessions), return_exceptions=True)
        # Expiries already closing finish their clean-up (wait), then none may start.
        await self._closing.wait()
        await self._closing.aclose()
