"""JSON-RPC over one transport: request ids, the pending-call table, one reader task.

The dialect is JSON-RPC 2.0 without the ``"jsonrpc"`` member; the envelope
(classifying incoming frames, the outgoing message shapes) is the server's own,
``execserver.wire.envelope``.
Responses are matched by id, never by position (a server may answer out of
order). Notifications are handed to a synchronous callback straight from the
reader so that routing never waits on a consumer. When the transport ends,
every pending call fails with ``ExecServerTransportClosed`` and the owner is
told once through ``on_lost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

import msgspec

from execserver.aio.tasks import TaskSet
from execserver.client.errors import (
    ExecServerTimeout,
    ExecServerTransportClosed,
    rpc_error,
)
from execserver.client.transport import NotSent, Transport
from execserver.wire import errors as codes
from execserver.wire.envelope import (
    ErrorMessage,
    ErrorObject,
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    MalformedMessage,
    NotificationMessage,
    RequestId,
    RequestMessage,
    ResponseMessage,
    decode_error_object,
    decode_incoming,
    encode_message,
)

__all__ = [
    "NOT_HANDLED",
    "LostHandler",
    "NotificationHandler",
    "RequestHandler",
    "RpcConnection",
    "encode_params",
]

__all__ = ["NOT_HANDLED", "RpcConnection"]

log = logging.getLogger(__name__)

NotificationHandler = Callable[[str, msgspec.Raw], None]
LostHandler = Callable[["RpcConnection", str], None]
# Server -> client requests (network/policyRequest): returns the result to
# send, or NOT_HANDLED to refuse the method; raising answers an error.
RequestHandler = Callable[[str, msgspec.Raw], Awaitable[object]]
NOT_HANDLED: object = object()

_NO_PARAMS = msgspec.Raw(b"{}")
_NULL = msgspec.Raw(b"null")
_encoder = msgspec.json.Encoder()


def encode_params(params: object) -> msgspec.Raw:
    """Params as raw JSON, so a request is encoded once and can be re-sent as is."""
    if params is None:
        return _NO_PARAMS
    if isinstance(params, msgspec.Raw):
        return params
    return msgspec.Raw(_encoder.encode(params))


class RpcConnection:
    """One live transport with its reader task. Not reusable after loss: make a new one."""

    def __init__(
        self,
        transport: Transport,
        *,
        ids: Iterator[int] | None = None,
        on_notification: NotificationHandler,
        on_lost: LostHandler | None = None,
        on_request: RequestHandler | None = None,
    ) -> None:
        self.transport = transport
        self._ids = ids if ids is not None else itertools.count(1)
        self._on_notification = on_notification
        self._on_request = on_request
        self._on_lost = on_lost
        self._pending: dict[int, asyncio.Future[msgspec.Raw]] = {}
        self._send_lock = asyncio.Lock()
        self._lost: str | None = None
        self._closing = False
        self._closed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        # The reader and the answers to server requests: they end with the
        # connection (close() cancels and awaits them).
        self._tasks = TaskSet("execserver-client-rpc", logger=log)

    def start(self) -> None:
        """Start reading. Must run before the first request (a resumed session can
        push notifications ahead of the initialize answer)."""
        if self._reader is None:
            self._reader = self._tasks.spawn(self._read_loop(), name="reader")

    @property
    def is_lost(self) -> bool:
        return self._lost is not None

    @property
    def lost_reason(self) -> str | None:
        return self._lost

    async def wait_lost(self) -> None:
        await self._closed.wait()

    async def wait_reader(self) -> None:
        """Until the reader task has ended (and ``on_lost`` has run)."""
        if self._reader is not None and not self._reader.done():
            await asyncio.wait([self._reader])

    async def request(
        self, method: str, params: object = None, *, timeout: float | None = None
    ) -> msgspec.Raw:
        """Send one request and wait for its result (raw JSON)."""
        if self._lost is not None:
            raise ExecServerTransportClosed(f"JSON-RPC transport closed: {self._lost}")
        request_id = next(self._ids)
        future: asyncio.Future[msgspec.Raw] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            frame = encode_message(RequestMessage(request_id, method, encode_params(params)))
            try:
                await self._send(frame)
            except NotSent as exc:
                # Closed under us (a server's 1012 arrives between two sends): the
                # reader has not seen the end yet, but nothing of this request left,
                # so it may be sent again once the session is resumed. The loss is
                # recorded now, so that the caller waits for the recovery instead of
                # finding this connection still "up".
                self._mark_lost(f"{exc}")
                raise ExecServerTransportClosed(
                    f"JSON-RPC transport closed: {exc}", unexecuted=True
                ) from exc
            except (ConnectionError, RuntimeError, OSError) as exc:
                raise ExecServerTransportClosed(
                    f"JSON-RPC transport closed: {exc}", unexecuted=self.restarting
                ) from exc
            try:
                async with asyncio.timeout(timeout):
                    return await future
            except TimeoutError as exc:
                raise ExecServerTimeout("request", f"{method} timed out after {timeout} s") from exc
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: object = None) -> None:
        if self._lost is not None:
            raise ExecServerTransportClosed(f"JSON-RPC transport closed: {self._lost}")
        try:
            await self._send(encode_message(NotificationMessage(method, encode_params(params))))
        except (ConnectionError, RuntimeError, OSError) as exc:
            raise ExecServerTransportClosed(f"JSON-RPC transport closed: {exc}") from exc

    async def close(self) -> None:
        """Close the transport and wait for the reader to finish failing pending calls."""
        self._closing = True
        self._mark_lost("closed by client")
        with contextlib.suppress(Exception):
            await self.transport.close()
        current = asyncio.current_task()
        if current in set(self._tasks):
            # Closed from one of its own tasks (a server-request handler): it
            # cannot wait for itself, so the others are only asked to stop.
            for task in self._tasks:
                if task is not current:
                    task.cancel()
        else:
            await self._tasks.aclose()
        self._fail_pending()

    def abort(self, reason: str = "aborted") -> None:
        """Drop the transport without a goodbye; the reader notices and reports the loss."""
        self.transport.abort()
        self._mark_lost(reason)

    async def _send(self, frame: bytes) -> None:
        async with self._send_lock:
            await self.transport.send(frame)

    async def _read_loop(self) -> None:
        reason = "connection closed by server"
        try:
            while True:
                data = await self.transport.receive()
                if data is None:
                    if self.restarting:
                        reason = "server restarting (websocket close 1012)"
                    break
                message = decode_incoming(data)
                if isinstance(message, MalformedMessage):
                    # A frame we cannot understand means we may have lost a
                    # response or an event: drop the transport and recover.
                    reason = f"undecodable message from server: {message.reason}"
                    log.warning("%s", reason)
                    self.transport.abort()
                    break
                self._dispatch(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = f"transport error: {exc!r}"
            log.debug("reader stopped", exc_info=True)
        finally:
            self._mark_lost(reason)
            self._fail_pending()
            if not self._closing and self._on_lost is not None:
                self._on_lost(self, self._lost or reason)

    def _dispatch(self, message: IncomingRequest | IncomingNotification | IncomingResponse) -> None:
        if isinstance(message, IncomingNotification):
            try:
                self._on_notification(message.method, message.params)
            except Exception:
                log.exception("notification handler failed for %s", message.method)
            return
        if isinstance(message, IncomingRequest):
            if self._on_request is not None:
                self._spawn(
                    self._answer_server_request(message.id, message.method, message.params),
                    f"answer {message.method}",
                )
            else:
                self._refuse_server_request(message.id, message.method)
            return
        if message.error:
            try:
                error = decode_error_object(message.error)
            except ValueError as exc:
                log.warning("server sent an error that is not an error object: %s", exc)
                return
        else:
            error = None
        if not isinstance(message.id, int):
            # A string id is never ours.
            if error is not None:
                log.warning("server error without a request: %s", error.message)
            return
        future = self._pending.get(message.id)
        if future is None or future.done():
            # Parse errors come back with id -1, which is never ours either.
            log.debug("response for unknown or abandoned request id %s", message.id)
            return
        if error is not None:
            data = msgspec.json.decode(error.data) if error.data else None
            future.set_exception(rpc_error(error.code, error.message, data))
        else:
            future.set_result(message.result if message.result else _NULL)

    async def _answer_server_request(
        self, request_id: RequestId, method: str, params: msgspec.Raw
    ) -> None:
        """Answer exactly once: the handler's result, or an error object (the
        server drops the connection on a reply it did not ask for)."""
        assert self._on_request is not None
        reply: ResponseMessage | ErrorMessage
        try:
            result = await self._on_request(method, params)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("handler for server request %s failed: %s", method, exc)
            reply = ErrorMessage(ErrorObject(codes.INTERNAL_ERROR, str(exc)), request_id)
        else:
            if result is NOT_HANDLED:
                self._refuse_server_request(request_id, method)
                return
            reply = ResponseMessage(request_id, result)
        with contextlib.suppress(Exception):
            await self._send(encode_message(reply))

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        if not self._tasks.closed:  # a closed connection answers nothing
            self._tasks.spawn(coro, name=name)
        else:
            coro.close()

    def _refuse_server_request(self, request_id: RequestId, method: str) -> None:
        # Nobody handles this method (no handler registered for the server's
        # network/policyRequest, the only request 0.169.0 sends). Answering
        # with an error denies at once and keeps the connection;
        # leaving it unanswered would make the server wait for its timeout.
        reply = ErrorMessage(
            ErrorObject(codes.METHOD_NOT_FOUND, f"client does not handle `{method}`"),
            request_id,
        )

        async def send() -> None:
            with contextlib.suppress(Exception):
                await self._send(encode_message(reply))

        self._spawn(send(), f"refuse {method}")

    @property
    def restarting(self) -> bool:
        """The server closed this connection with 1012 (it hands over to a successor):
        every request left unanswered was never executed."""
        return self.transport.restarting

    def _mark_lost(self, reason: str) -> bool:
        if self._lost is not None:
            return False
        self._lost = reason
        self._closed.set()
        return True

    def _fail_pending(self) -> None:
        reason = self._lost or "closed"
        unexecuted = self.restarting
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    ExecServerTransportClosed(
                        f"JSON-RPC transport closed: {reason}", unexecuted=unexecuted
                    )
                )
