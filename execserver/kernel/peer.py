"""What a service may do with the client side of a request: its connection and its session.

Services see these Protocols, never the server's concrete ``Connection`` and
``Session`` classes, so a service can be exercised with any object that has
these few members and the server can change how it keeps connections.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from execserver.kernel.scoped import ScopedState

__all__ = ["Notifier", "Peer", "SessionHandle"]


class Notifier(Protocol):
    """Where a long-lived piece of session state (a process) sends its events."""

    @property
    def attached(self) -> bool:
        """A connection is attached: notifications reach a client now."""
        ...

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification; dropped while no connection is attached."""
        ...

    async def notify_many(self, notes: Sequence[tuple[str, Any]]) -> None:
        """Send several notifications in order, written out together; dropped while
        no connection is attached."""
        ...


class SessionHandle(Notifier, Protocol):
    """A session: what survives a dropped connection (its processes, its proxies)."""

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> ScopedState:
        """Service state closed when the session ends (TTL expiry or shutdown)."""
        ...

    async def request(self, method: str, params: Any, timeout: float | None) -> Any:
        """Send a server->client request on the attached connection and wait for its result."""
        ...


class Peer(Protocol):
    """The connection a request arrived on."""

    @property
    def state(self) -> ScopedState:
        """Service state closed when the connection closes (fs handles, watches, streams)."""
        ...

    @property
    def session(self) -> SessionHandle | None:
        """The session bound by ``initialize`` (None before it)."""
        ...

    async def send_notification(self, method: str, params: Any) -> None:
        """Queue a notification on this connection (waits while its outbound queue is full)."""
        ...
