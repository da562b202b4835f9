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

    def __init__(self, runtime: ServerRuntime, session_id: str) -> None:
        self._runtime = runtime
        self._session_id = session_id

    async def aclose(self) -> None:
        reason = "shutdown" if self._runtime.shutting_down else "expired"
        if reason == "expired":
            self._runtime.metrics.sessions_expired.inc()
        self._runtime.audit.emit("session.close", session=self._session_id, reason=reason)


def session_attached(runtime: ServerRuntime, session: Session, peer: str) -> None:
    resumed = session.state.peek(_SessionWatch) is not None
    if resumed:
        runtime.metrics.sessions_resumed.inc()
        runtime.audit.emit("session.resume", session=session.id, peer=peer)
        return
    session.state.get(_SessionWatch, lambda: _SessionWatch(runtime, session.id))
    runtime.metrics.sessions_opened.inc()
    runtime.audit.emit("session.open", session=session.id, peer=peer)


def session_detached(runtime: ServerRuntime, session: Session, peer: str) -> None:
    if not runtime.shutting_down and not session.closed:
        runtime.audit.emit("session.detach", session=session.id, peer=peer)
