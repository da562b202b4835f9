"""A JSON-RPC session with an exec-server on a blocking websocket, for one-shot
commands that make a few calls one after the other (``execserver patch``).

No event loop, no msgspec: params and results are plain JSON values
(``json``), so a short command does not pay for importing the async client.
The session is the one :class:`execserver.client.ExecServerClient` opens
(``initialize`` with the same client name, then ``initialized``), and errors
are the same exception classes: a JSON-RPC error object becomes
:func:`execserver.client.errors.rpc_error`'s class, a lost connection
:class:`ExecServerTransportClosed`, a call that does not finish in time
:class:`ExecServerTimeout`.

A coroutine written against an async API (the patch engine's
``PatchFileSystem``) runs on it through :func:`run_blocking`: the methods that
implement that API are ``async def`` but never suspend, so the coroutine runs to
its end in one step.
"""

from __future__ import annotations

import json
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from execserver.client.blocking_websocket import BlockingWebSocket, WebSocketClosed
from execserver.client.defaults import (
    CONNECT_TIMEOUT,
    DEFAULT_CLIENT_NAME,
    INITIALIZE_TIMEOUT,
    REQUEST_TIMEOUT,
)
from execserver.client.errors import ExecServerTimeout, ExecServerTransportClosed, rpc_error
from execserver.wire import errors as codes

__all__ = ["BlockingRpcSession", "run_blocking"]

T = TypeVar("T")


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (every await ends in a blocking
    call) to its end, without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
    coroutine.close()
    raise RuntimeError("run_blocking: the coroutine awaited something that suspends")


class BlockingRpcSession:
    """One exec-server session over a :class:`BlockingWebSocket`; use as a
    context manager (closing detaches the session, as the async client does)."""

    def __init__(self, websocket: BlockingWebSocket, url: str) -> None:
        self._ws = websocket
        self._url = url
        self._next_id = 1
        self.session_id = ""

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        token: str | None = None,
        client_name: str = DEFAULT_CLIENT_NAME,
        timeout: float = CONNECT_TIMEOUT,
    ) -> BlockingRpcSession:
        """Open a websocket to ``url`` and initialize a new session. ``token``
        goes in ``Authorization: Bearer``."""
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        websocket = BlockingWebSocket.connect(url, headers=headers, timeout=timeout)
        session = cls(websocket, url)
        try:
            try:
                init = session.call(
                    "initialize",
                    {"clientName": client_name, "resumeSessionId": None},
                    timeout=INITIALIZE_TIMEOUT,
                )
            except ExecServerTimeout as exc:
                raise ExecServerTimeout("initialize", "timed out waiting for initialize") from exc
            session.session_id = str(init["sessionId"])
            session.notify("initialized", {})
        except BaseException:
            websocket.abort()
            raise
        return session

    def __enter__(self) -> BlockingRpcSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._ws.close()

    @property
    def websocket(self) -> BlockingWebSocket:
        return self._ws

    def notify(self, method: str, params: object) -> None:
        self._send({"method": method, "params": params})

    def call(
        self, method: str, params: Mapping[str, Any], *, timeout: float | None = REQUEST_TIMEOUT
    ) -> Any:
        """Send one request and wait for its answer; notifications that arrive
        meanwhile are dropped (a one-shot command starts no process)."""
        request_id = self._next_id
        self._next_id += 1
        self._ws.settimeout(timeout)
        self._send({"id": request_id, "method": method, "params": params})
        while True:
            message = self._receive(method, timeout)
            if "method" in message:
                if "id" in message:
                    self._refuse(message["id"], str(message["method"]))
                continue
            if message.get("id") != request_id:
                continue  # an answer to nothing we are waiting for
            error = message.get("error")
            if error is not None:
                raise rpc_error(int(error["code"]), str(error["message"]), error.get("data"))
            return message.get("result")

    def _send(self, message: Mapping[str, Any]) -> None:
        try:
            self._ws.send_text(_encode(message).encode("utf-8"))
        except (OSError, WebSocketClosed) as exc:
            self._ws.abort()
            raise ExecServerTransportClosed(f"JSON-RPC transport closed: {exc}") from exc

    def _receive(self, method: str, timeout: float | None) -> dict[str, Any]:
        try:
            frame = self._ws.receive()
        except TimeoutError as exc:
            self._ws.abort()
            raise ExecServerTimeout("request", f"{method} timed out after {timeout} s") from exc
        except (OSError, WebSocketClosed) as exc:
            self._ws.abort()
            raise ExecServerTransportClosed(f"JSON-RPC transport closed: {exc}") from exc
        try:
            message = json.loads(frame)
        except ValueError as exc:
            self._ws.abort()
            raise ExecServerTransportClosed(
                f"JSON-RPC transport closed: the server sent a frame that is not JSON: {exc}"
            ) from exc
        if not isinstance(message, dict):
            self._ws.abort()
            raise ExecServerTransportClosed(
                "JSON-RPC transport closed: the server sent a frame that is not a JSON object"
            )
        return message

    def _refuse(self, request_id: object, method: str) -> None:
        # As the async client does for a server request nobody handles (the
        # server's network/policyRequest): deny at once instead of letting the
        # server wait for its timeout.
        self._send(
            {
                "error": {
                    "code": codes.METHOD_NOT_FOUND,
                    "message": f"client does not handle `{method}`",
                },
                "id": request_id,
            }
        )
