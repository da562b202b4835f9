"""The session records of the audit log and the session metrics: opened, resumed,
detached, closed (with why).

Apart from execserver.server.audit, which writes lines and knows nothing of the
runtime, so that the runtime can own the log without an import back.
"""

from __future__ import annotations

from execserver.server.runtime import ServerRuntime
from execserver.server.sessions import Session

__all__ = ["session_attached", "session_detached"]


class _SessionWatch:
    """Lives in the session's scoped state; its ``aclose`` runs when the session ends
    (TTL expiry or shutdown), which is where the close is audited and counted."""

    def __init__(self, runtime: ServerRuntime, session_id: str, principal: str | None) -> None:
        self._runtime = runtime
        self._session_id = session_id
        self._principal = _principal(principal)

    async def aclose(self) -> None:
        reason = "shutdown" if self._runtime.shutting_down else "expired"
        if reason == "expired":
            self._runtime.metrics.sessions_expired.inc()
        self._runtime.audit.emit(
            "session.close", session=self._session_id, reason=reason, **self._principal
        )


def _principal(principal: str | None) -> dict[str, str]:
    """The record's principal field: absent without --tenants (records unchanged)."""
    return {} if principal is None else {"principal": principal}


def session_attached(runtime: ServerRuntime, session: Session, peer: str) -> None:
    who = _principal(session.principal)
    resumed = session.state.peek(_SessionWatch) is not None
    if resumed:
        runtime.metrics.sessions_resumed.inc()
        runtime.audit.emit("session.resume", session=session.id, peer=peer, **who)
        return
    session.state.get(_SessionWatch, lambda: _SessionWatch(runtime, session.id, session.principal))
    runtime.metrics.sessions_opened.inc()
    runtime.audit.emit("session.open", session=session.id, peer=peer, **who)


def session_detached(runtime: ServerRuntime, session: Session, peer: str) -> None:
    if not runtime.shutting_down and not session.closed:
        who = _principal(session.principal)
        runtime.audit.emit("session.detach", session=session.id, peer=peer, **who)
