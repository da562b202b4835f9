"""``client.http``: the executor's HTTP client (``http/request``) with a typed
response and typed errors.

The request is made *by the executor*, from its network. Any HTTP status is a
response, not an error. What the wire does not tell: both servers answer a
refused connection, a name that does not resolve and an expired
``timeoutMs`` with the same -32603 text (``http/request failed: error sending
request for url (...)``) and no data. So the client tells them apart itself:

* an error that arrives once the request's ``timeout`` has (nearly) run out is
  :class:`HttpTimeout`;
* otherwise it asks the executor (one short command, like ``run``): does the
  host resolve (``getent``), and does a TCP connection to it get refused
  (bash's ``/dev/tcp``)? That gives :class:`HttpNameResolutionError` or
  :class:`HttpConnectionRefused`. When the executor cannot say (no ``getent``
  or ``bash``, the port accepts now), the plain :class:`HttpRequestError`
  remains. ``diagnose=False`` skips the command.

There is no cancel method for a request, so a request without ``timeout``
holds the server's request slot until the peer answers; pass one.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from execserver.client.errors import (
    ExecServerError,
    HttpConnectionRefused,
    HttpInvalidRequest,
    HttpNameResolutionError,
    HttpRequestError,
    HttpTimeout,
    InternalError,
    InvalidParams,
)
from execserver.client.params import b64encode, wire_bytes
from execserver.wire import methods
from execserver.wire.http import HttpHeader, HttpRequestParams

if TYPE_CHECKING:
    from execserver.client.commands import CommandClient

__all__ = ["HttpResponse", "RemoteHttp"]

# An error this close to the request's timeout is the timeout.
TIMEOUT_MARGIN: Final = 0.9
# The RPC itself may take the request's timeout plus this.
RPC_SLACK: Final = 10.0
DIAGNOSE_TIMEOUT: Final = 10.0
# $1 host, $2 port. Prints one word: dns, refused, connected or unknown.
DIAGNOSE_SCRIPT: Final = r"""
if command -v getent >/dev/null 2>&1; then
  getent ahosts "$1" >/dev/null 2>&1 || { echo dns; exit 0; }
fi
command -v bash >/dev/null 2>&1 || { echo unknown; exit 0; }
if out=$(bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>&1); then echo connected; exit 0; fi
case $out in
  *refused*) echo refused ;;
  *"not known"*|*resolution*) echo dns ;;
  *) echo unknown ;;
esac
"""


@dataclass(frozen=True)
class HttpResponse:
    """What the executor received. ``headers`` keeps the wire order and
    repeated names (names lower-cased by the server)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    url: str
    method: str
    elapsed: float = field(default=0.0)

    @property
    def ok(self) -> bool:
        """Status below 400."""
        return self.status < 400

    @property
    def text(self) -> str:
        """The body as UTF-8 (invalid bytes replaced)."""
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str, default: str | None = None) -> str | None:
        """The first value of header ``name`` (case-insensitive)."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), default)

    def header_values(self, name: str) -> list[str]:
        wanted = name.lower()
        return [value for key, value in self.headers if key.lower() == wanted]


Headers = Mapping[str, str] | Sequence[tuple[str, str]]


class RemoteHttp:
    """``client.http``: ``request(method, url, ...)``, ``get``, ``post``."""

    def __init__(self, client: CommandClient) -> None:
        # Calls, and a command on the executor to tell a failure's cause.
        self.client = client

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Headers | None = None,
        body: bytes | str | None = None,
        timeout: float | None = None,
        follow_redirects: bool = True,
        diagnose: bool = True,
    ) -> HttpResponse:
        """One request made by the executor; any status is a response.

        Raises :class:`HttpConnectionRefused`, :class:`HttpNameResolutionError`,
        :class:`HttpTimeout` (all :class:`HttpRequestError`), or
        :class:`HttpInvalidRequest` (a ``ValueError``) for what the server
        refuses to send (scheme, URL, method, header name)."""
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])
        data = body.encode() if isinstance(body, str) else body
        params = HttpRequestParams(
            method=method,
            url=url,
            request_id=f"http-{uuid.uuid4().hex}",
            # Always a list: the reference refuses "headers": null (-32602).
            headers=[HttpHeader(name=name, value=value) for name, value in pairs],
            body_base64=None if data is None else b64encode(data),
            timeout_ms=None if timeout is None else max(1, round(timeout * 1000)),
            redirect_policy="follow" if follow_redirects else "stop",
        )
        started = time.monotonic()
        try:
            result = await self.client.call(
                methods.HTTP_REQUEST,
                params,
                timeout=None if timeout is None else timeout + RPC_SLACK,
            )
        except InvalidParams as exc:
            raise HttpInvalidRequest(method, url, exc.message) from exc
        except InternalError as exc:
            elapsed = time.monotonic() - started
            raise await self._classify(exc, method, url, timeout, elapsed, diagnose) from exc
        return HttpResponse(
            status=result.status,
            headers=[(h.name, h.value) for h in result.headers],
            body=wire_bytes(result.body_base64),
            url=url,
            method=method,
            elapsed=time.monotonic() - started,
        )

    async def get(self, url: str, **options: Any) -> HttpResponse:
        return await self.request("GET", url, **options)

    async def post(self, url: str, **options: Any) -> HttpResponse:
        return await self.request("POST", url, **options)

    async def _classify(
        self,
        exc: InternalError,
        method: str,
        url: str,
        timeout: float | None,
        elapsed: float,
        diagnose: bool,
    ) -> HttpRequestError:
        if timeout is not None and elapsed >= timeout * TIMEOUT_MARGIN:
            return HttpTimeout(method, url, exc.message, timeout)
        verdict = await self._diagnose(url) if diagnose else "unknown"
        if verdict == "dns":
            return HttpNameResolutionError(method, url, exc.message)
        if verdict == "refused":
            return HttpConnectionRefused(method, url, exc.message)
        return HttpRequestError(method, url, exc.message)

    async def _diagnose(self, url: str) -> Literal["dns", "refused", "connected", "unknown"]:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        if not host:
            return "unknown"
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return "unknown"
        from execserver.client.commands import run_command

        try:
            result = await run_command(
                self.client,
                ["/bin/sh", "-c", DIAGNOSE_SCRIPT, "diagnose", host, str(port)],
                cwd="/",
                env=None,
                inherit_env=True,
                env_policy=None,
                timeout=DIAGNOSE_TIMEOUT,
                check=False,
                stdin=None,
                tty=False,
                sandbox=None,
                text=True,
                arg0=None,
                process_id=None,
            )
        except (ExecServerError, OSError):
            return "unknown"
        word = str(result.stdout).strip()
        if word in ("dns", "refused", "connected"):
            return word  # type: ignore[return-value]
        return "unknown"
