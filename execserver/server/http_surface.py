"""The daemon's HTTP surface, apart from the websocket library that carries it.

As the reference's: the websocket upgrade only on ``/``, ``GET /readyz`` 200
(503 once a drain or shutdown begins), any request carrying ``Origin`` refused
with 403 so no browser can drive the daemon, unknown paths an empty 404; plus
``GET /livez`` for orchestrators and, with --metrics, ``GET /metrics`` behind
the websocket's authentication. ``HttpSurface.answer`` decides; the transport
(server/transport_ws.py) only parses the request and writes what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from execserver.server.runtime import ServerRuntime

__all__ = ["Admission", "Headers", "HttpRequest", "HttpResponse", "HttpSurface", "UpgradeCheck"]

NOT_AN_UPGRADE = "Connection header did not include 'upgrade'"


class Headers(Protocol):
    """Case-insensitive request headers, repeated names kept (a multidict)."""

    def get(self, key: str, default: str, /) -> str: ...

    def getall(self, key: str, default: list[str], /) -> list[str]: ...

    def __contains__(self, key: object, /) -> bool: ...


@dataclass(slots=True)
class Admission:
    """What the upgrade checks learnt of the client, for the connection they admit:
    with --tenants, the principal its credential names (None: no tenants)."""

    principal: str | None = None


@dataclass(frozen=True, slots=True)
class HttpRequest:
    path: str  # without the query string
    headers: Headers
    remote: str | None  # the peer's address, for the audit log
    admission: Admission = field(default_factory=Admission)


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def text(cls, status: int, text: str, headers: dict[str, str] | None = None) -> HttpResponse:
        return cls(
            status, text.encode(), {"Content-Type": "text/plain; charset=utf-8", **(headers or {})}
        )


# A check a websocket upgrade must pass: None to let it through, else the refusal.
UpgradeCheck = Callable[[HttpRequest], HttpResponse | None]


class HttpSurface:
    def __init__(
        self,
        runtime: ServerRuntime,
        upgrade_checks: Sequence[UpgradeCheck] = (),
        metrics_checks: Sequence[UpgradeCheck] = (),
    ) -> None:
        self._runtime = runtime
        self._upgrade_checks = tuple(upgrade_checks)
        # Checks /metrics must pass: the websocket's authentication when --ws-auth is on
        # (the metrics name methods, sessions and failure reasons of every client).
        self._metrics_checks = tuple(metrics_checks)

    def answer(self, request: HttpRequest) -> HttpResponse | None:
        """The response to ``request``, or None: upgrade it to the websocket."""
        if "Origin" in request.headers:
            return HttpResponse(403)
        path = request.path
        if path == "/":
            if "upgrade" not in request.headers.get("Connection", "").lower():
                return HttpResponse.text(400, NOT_AN_UPGRADE)
            return self._first_refusal(self._upgrade_checks, request)
        if path == "/readyz":
            # 503 once a drain or shutdown begins, so a load balancer stops sending new clients.
            runtime = self._runtime
            return HttpResponse(503 if runtime.shutting_down or runtime.draining else 200)
        if path == "/livez":
            return HttpResponse(200)
        if path == "/metrics" and self._runtime.config.metrics:
            refusal = self._first_refusal(self._metrics_checks, request)
            if refusal is not None:
                return refusal
            metrics = self._runtime.metrics
            return HttpResponse(200, metrics.render(), {"Content-Type": metrics.content_type()})
        # The reference answers unknown paths with an empty 404.
        return HttpResponse(404)

    @staticmethod
    def _first_refusal(checks: Sequence[UpgradeCheck], request: HttpRequest) -> HttpResponse | None:
        for check in checks:
            refusal = check(request)
            if refusal is not None:
                return refusal
        return None
