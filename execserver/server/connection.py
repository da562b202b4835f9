"""One client connection, independent of its transport (websocket or stdio).

The transport feeds frames in with :meth:`Connection.handle_frame` and gives
a ``send_frame`` coroutine for the way out (and, when it can write without
waiting, a plain ``write_now`` as well). Everything written goes through
one bounded outbound queue and one writer task, so frames never interleave
and a slow peer applies backpressure to producers (e.g. process output).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, NamedTuple

import msgspec

from execserver.aio.eager import start_eagerly
from execserver.aio.tasks import TaskSet
from execserver.kernel.context import RequestContext
from execserver.kernel.limits import LimitExceeded, PolicyRefusal
from execserver.kernel.methods import MUST_WAIT, MethodSpec
from execserver.kernel.scoped import ScopedState
from execserver.server.metrics import UNKNOWN_METHOD
from execserver.server.runtime import ServerRuntime
from execserver.server.session_audit import session_attached, session_detached
from execserver.server.sessions import Session
from execserver.wire import methods as m
from execserver.wire.envelope import (
    PARSE_ERROR_ID,
    ErrorMessage,
    ErrorObject,
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    MalformedMessage,
    NotificationMessage,
    RequestMessage,
    ResponseMessage,
    decode_incoming,
    encode_error,
    encode_message,
)
from execserver.wire.errors import INTERNAL_ERROR, METHOD_NOT_FOUND, RpcError

__all__ = ["Connection", "ProtocolViolation"]

log = logging.getLogger(__name__)

SendFrame = Callable[[bytes], Awaitable[None]]
# Several frames written at once, in order (one system call where the transport can).
SendFrames = Callable[[Sequence[bytes]], Awaitable[None]]
# Writes one frame at once and returns True, or returns False without writing when the
# peer is behind (then ``send_frame``, which waits, takes it).
WriteNow = Callable[[bytes], bool]


class Lifecycle(enum.Enum):
    NEW = "new"
    INITIALIZING = "initializing"  # initialize answered, initialized not yet received
    READY = "ready"


_READY = Lifecycle.READY
# No params decoded yet (the handler's path decodes them).
_UNDECODED: Any = object()


class _ForHandler(NamedTuple):
    """An at-once attempt that has to wait: its handler serves it, with these params."""

    params: Any


# A module-level name for the at-once path, which runs once per polling round trip.
_clock = time.perf_counter


class ProtocolViolation(Exception):
    """The peer sent something after which the reference drops the connection."""


class Connection:
    def __init__(
        self,
        runtime: ServerRuntime,
        send_frame: SendFrame,
        *,
        peer: str,
        parse_error_prefix: str,
        write_now: WriteNow | None = None,
        send_frames: SendFrames | None = None,
        principal: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.peer = peer
        # The tenant its credential named at the upgrade (None without --tenants):
        # the only principal its initialize may create or resume a session for.
        self.principal = principal
        self._send_frame = send_frame
        self._send_frames = send_frames
        self._write_now = write_now
        self._parse_error_prefix = parse_error_prefix
        self.lifecycle = Lifecycle.NEW
        self.session: Session | None = None
        self.state = ScopedState(f"connection {peer}")
        self._outbound: asyncio.Queue[bytes] = asyncio.Queue(runtime.config.outbound_queue_messages)
        self._slots = asyncio.Semaphore(runtime.config.concurrent_requests)
        # The requests in flight (and an answer's wait for the peer to read).
        self._tasks = TaskSet(f"connection {peer}", logger=log)
        self._initialize_task: asyncio.Task[None] | None = None
        self._server_request_ids = itertools.count(1)
        self._pending_server_requests: dict[int, asyncio.Future[Any]] = {}
        self._loop = asyncio.get_running_loop()
        # Apart from the requests: "no request in flight" must not count the writer.
        self._writing = TaskSet(f"connection {peer} writer", logger=log)
        self._writing.spawn(self._write_loop(), name="write loop")
        self.closed = False
        # Handover: requests read from now on are dropped unexecuted (settle_for_restart).
        self._holding = False
        self.close_reason: str | None = None
        self._closed_event = asyncio.Event()
        runtime.metrics.connections.inc()
        runtime.metrics.connections_opened.inc()
        self._meter = runtime.metrics.requests
        self._known_methods = runtime.methods.methods
        self._max_frame = runtime.config.limits.max_frame_bytes
        self._max_inflight = runtime.config.limits.max_inflight_requests
        # One context for every at_once call: they cannot wait, so none outlives its call.
        self._at_once_context = RequestContext(self, runtime, self._slots)

    # ---- outbound -------------------------------------------------------------

    async def _write_loop(self) -> None:
        try:
            while True:
                frame = await self._outbound.get()
                self._meter.outbound_bytes += len(frame)
                try:
                    await self._send_frame(frame)
                finally:
                    self._outbound.task_done()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the transport is gone
            log.debug("connection %s: write failed: %r", self.peer, exc)
            self.abort("write failed")

    async def _enqueue(self, frame: bytes) -> None:
        if self.closed:
            return
        if self._outbound.empty():
            # Nothing is waiting to go out, so writing now keeps the order and saves
            # the hop through the writer task (two task switches per message). The
            # frame's bytes reach the transport synchronously; only the drain that
            # may follow suspends, which is the same backpressure the writer has.
            await self._write_inline(len(frame), self._send_frame(frame))
            return
        await self._outbound.put(frame)

    async def _enqueue_all(self, frames: Sequence[bytes]) -> None:
        """``_enqueue`` for several, written together when the transport can and
        nothing is queued before them: a streaming process's chunks one by one cost
        a send each (on loopback, the receiver's network stack too), 40% of the
        daemon's time."""
        if self._send_frames is None or len(frames) == 1 or not self._outbound.empty():
            for frame in frames:
                await self._enqueue(frame)
            return
        if not self.closed:
            size = sum(len(frame) for frame in frames)
            await self._write_inline(size, self._send_frames(frames))

    async def _write_inline(self, size: int, write: Awaitable[None]) -> None:
        self._meter.outbound_bytes += size
        try:
            await write
        except Exception as exc:  # the transport is gone
            log.debug("connection %s: write failed: %r", self.peer, exc)
            self.abort("write failed")

    async def send_notification(self, method: str, params: Any) -> None:
        await self._enqueue(encode_message(NotificationMessage(method, params)))

    async def send_notifications(self, notes: Sequence[tuple[str, Any]]) -> None:
        """Several notifications in order, written together (``_enqueue_all``)."""
        await self._enqueue_all(
            [encode_message(NotificationMessage(method, params)) for method, params in notes]
        )

    async def request(self, method: str, params: Any, timeout: float | None) -> Any:
        """Send a server->client request and wait for its result (raises RpcError on error)."""
        request_id = next(self._server_request_ids)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending_server_requests[request_id] = future
        try:
            await self._enqueue(encode_message(RequestMessage(request_id, method, params)))
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending_server_requests.pop(request_id, None)

    # ---- inbound --------------------------------------------------------------

    async def handle_frame(self, frame: bytes | str) -> None:
        """Process one inbound frame. Raises ProtocolViolation when the connection must drop."""
        rest = self.receive(frame)
        if rest is not None:
            await rest

    def receive(self, frame: bytes | str) -> Coroutine[Any, Any, None] | None:
        """``handle_frame`` for a transport that calls in from a plain callback: what
        needs no wait is done before it returns (a request is answered or started), and
        what is left to await comes back (a refusal or notification; None, usually).
        Raises ProtocolViolation when the connection must drop, now or from what it
        returns."""
        self._meter.inbound_bytes += len(frame)
        # ops: --max-frame-bytes (below the transport's hard limit) answers instead of dropping.
        max_frame = self._max_frame
        if max_frame is not None and len(frame) > max_frame:
            what = f"message of {len(frame)} bytes is too large"
            refusal = LimitExceeded("max_frame_bytes", max_frame, what)
            return self._refuse(_frame_id(frame), "", refusal)
        message = decode_incoming(frame)
        if isinstance(message, IncomingRequest):
            if self._holding:
                return None  # handover: never executed, never answered (close_for_restart)
            # ops: --max-inflight-requests bounds the tasks one connection can pile up.
            max_inflight = self._max_inflight
            if (
                max_inflight is not None
                and len(self._tasks) >= max_inflight
                and self._in_flight() >= max_inflight
            ):
                what = "too many requests in flight on this connection"
                refusal = LimitExceeded("max_inflight_requests", max_inflight, what)
                return self._refuse(message.id, message.method, refusal)
            spec = self._known_methods.get(message.method)
            # Only when no earlier request is in flight: one that has not run its first
            # step yet must not be overtaken (a process/read right behind the
            # process/start of the same process must find it). A finished task may
            # still be in the set (see _in_flight): the request right after an answer
            # written by a task (the first after initialize) once went to a task, and
            # an fs/readFile of a cached file to a worker, whenever the client was
            # scheduled before the daemon's next round.
            if (
                spec is not None
                and spec.at_once is not None
                and (not self._tasks or not self._in_flight())
            ):
                answer = self._answer_at_once(message, spec)
                if isinstance(answer, bytes):
                    self._write_eagerly(answer)
                    return None
                # It has to wait: its handler takes the params decoded for the attempt
                # (a sandboxed fs call's context is not decoded twice).
                self._start_request(message, answer.params)
                return None
            self._start_request(message)
        elif isinstance(message, IncomingNotification):
            return self._handle_notification(message)
        elif isinstance(message, IncomingResponse):
            self._handle_response(message)
        elif isinstance(message, MalformedMessage):
            text = f"{self._parse_error_prefix}{message.reason}"
            return self._enqueue(encode_error(PARSE_ERROR_ID, -32600, text))
        return None

    def _start_request(self, request: IncomingRequest, params: Any = _UNDECODED) -> None:
        task = self._tasks.spawn(self._serve_request(request, params), name=request.method)
        if request.method == m.INITIALIZE:
            self._initialize_task = task

    def _in_flight(self) -> int:
        """Requests still running. A finished task leaves ``_tasks`` in a done callback,
        which can run after the next frame is handled when the transport calls in from
        its I/O callback (picows), so finished ones are not counted."""
        return sum(1 for task in self._tasks if not task.done())

    def _answer_at_once(
        self, request: IncomingRequest, spec: MethodSpec[Any]
    ) -> bytes | _ForHandler:
        """The answer frame when the method's ``at_once`` gives it without waiting (or a
        check refuses the request); else the decoded params, for the handler that has
        to serve it in a task.

        ``_serve_request`` minus the task and the coroutines: this is the whole request
        on a polling round trip, with the same checks (``_admit``). No request slot is
        taken because nothing waits, and every slot is free (no request is in flight
        when this runs)."""
        started = _clock()
        try:
            params = self._admit(request, spec, _UNDECODED)
            assert spec.at_once is not None
            result = spec.at_once(self._at_once_context, params)
            if result is MUST_WAIT:
                return _ForHandler(params)
            frame = encode_message(ResponseMessage(request.id, result))
            outcome = "ok"
        except Exception as exc:
            frame, outcome = self._error_answer(request, exc)
        # A method with a spec is known: no need for _observe's label check.
        self._meter.observe(request.method, outcome, _clock() - started)
        return frame

    def _write_eagerly(self, frame: bytes) -> None:
        """Write ``frame`` now; when the transport makes us wait for it to drain, that
        wait goes on in a task, as a request's would, and the reader carries on."""
        write_now = self._write_now
        if write_now is not None and self._outbound.empty() and not self.closed:
            if write_now(frame):
                self._meter.outbound_bytes += len(frame)
                return
        writing = start_eagerly(self._loop, self._enqueue(frame))
        if writing is not None:
            self._tasks.adopt(writing)

    async def _handle_notification(self, note: IncomingNotification) -> None:
        if note.method != m.INITIALIZED:
            raise ProtocolViolation(f"unexpected notification {note.method!r}")
        # A client may pipeline initialize + initialized; let initialize finish first.
        pending = self._initialize_task
        if pending is not None and not pending.done():
            await asyncio.shield(pending)
        if self.lifecycle is Lifecycle.NEW:
            raise ProtocolViolation("initialized before initialize")
        self.lifecycle = Lifecycle.READY

    def _handle_response(self, response: IncomingResponse) -> None:
        future = (
            self._pending_server_requests.pop(response.id, None)
            if isinstance(response.id, int)
            else None
        )
        if future is None:
            raise ProtocolViolation(f"response to unknown server request id {response.id!r}")
        if future.done():
            return
        if len(response.error):
            try:
                err = msgspec.json.decode(response.error, type=ErrorObject)
                future.set_exception(RpcError(err.code, err.message))
            except msgspec.ValidationError:
                future.set_exception(RpcError(INTERNAL_ERROR, "malformed error response"))
        else:
            future.set_result(msgspec.json.decode(response.result))

    async def _serve_request(self, request: IncomingRequest, params: Any = _UNDECODED) -> None:
        started = time.perf_counter()
        try:
            result = await self._dispatch(request, params)
            frame = encode_message(ResponseMessage(request.id, result))
            outcome = "ok"
        except Exception as exc:
            frame, outcome = self._error_answer(request, exc)
        self._observe(request.method, outcome, started)
        await self._enqueue(frame)

    def _error_answer(self, request: IncomingRequest, exc: Exception) -> tuple[bytes, str]:
        """The error frame for a request that raised, and its metric outcome."""
        if isinstance(exc, RpcError):
            if isinstance(exc, LimitExceeded):
                self.runtime.metrics.limit_rejections.labels(exc.limit).inc()
            elif isinstance(exc, PolicyRefusal):
                self._audit_refusal(request.method, exc)
            error = ErrorMessage(ErrorObject(exc.code, exc.message), request.id)
            return encode_message(error), str(exc.code)
        log.error("internal error serving %s (id %r)", request.method, request.id, exc_info=exc)
        return encode_error(request.id, INTERNAL_ERROR, "internal error"), str(INTERNAL_ERROR)

    def _audit_refusal(self, method: str, refusal: PolicyRefusal) -> None:
        """Every ceiling a tenant runs into is on the record, with the line of its
        profile that said no (before initialize there is no session yet), and
        counted for its principal (execserver_tenant_refusals_total)."""
        self.runtime.metrics.principal_refused(refusal.principal)
        session = self.session.id if self.session is not None else None
        self.runtime.audit.emit(
            "tenant.refuse",
            session=session,
            peer=self.peer,
            principal=refusal.principal,
            method=method,
            reason=refusal.reason,
        )

    def _observe(self, method: str, outcome: str, started: float) -> None:
        # Unknown names share one label so clients cannot grow the metric without bound.
        label = method if method in self._known_methods else UNKNOWN_METHOD
        self._meter.observe(label, outcome, time.perf_counter() - started)

    async def _refuse(self, request_id: Any, method: str, refusal: LimitExceeded) -> None:
        self.runtime.metrics.limit_rejections.labels(refusal.limit).inc()
        self._observe(method, str(refusal.code), time.perf_counter())
        await self._enqueue(encode_error(request_id, refusal.code, refusal.message))

    async def _dispatch(self, request: IncomingRequest, params: Any = _UNDECODED) -> Any:
        # Order of checks as the reference: method known -> params -> lifecycle.
        spec = self.runtime.methods.get(request.method)
        if spec is None:
            raise RpcError(
                METHOD_NOT_FOUND, f"exec-server stub does not implement `{request.method}` yet"
            )
        async with self._slots:
            # In the slot: the lifecycle is the one when the request runs (an
            # initialized may arrive while it waits for a slot).
            params = self._admit(request, spec, params)
            ctx = RequestContext(self, self.runtime, self._slots)
            return await spec.handler(ctx, params)

    def _admit(self, request: IncomingRequest, spec: MethodSpec[Any], params: Any) -> Any:
        """The checks of a known method's request, for the at-once path and the task
        path alike, in the reference's order: params decode (unless the at-once
        attempt decoded them already), then the lifecycle (``initialize`` is what
        starts it). Returns the params; raises RpcError for the refusal."""
        if params is _UNDECODED:
            params = spec.decoder.decode(request.params)
        if self.lifecycle is not _READY and request.method != m.INITIALIZE:
            self._check_lifecycle(spec.family)
        return params

    def _check_lifecycle(self, family: str) -> None:
        if self.lifecycle is Lifecycle.NEW:
            raise RpcError.invalid_request(
                f"client must call initialize before using {family} methods"
            )
        if self.lifecycle is Lifecycle.INITIALIZING:
            raise RpcError.invalid_request(
                f"client must send initialized before using {family} methods"
            )

    # ---- session binding (used by the initialize handler) -----------------------

    def bind_session(self, session: Session) -> None:
        self.session = session
        self.lifecycle = Lifecycle.INITIALIZING
        session_attached(self.runtime, session, self.peer)

    # ---- teardown ---------------------------------------------------------------

    def abort(self, reason: str) -> None:
        """Mark the connection dead; the transport notices via wait_closed()."""
        if self.close_reason is None:
            self.close_reason = reason
        self._closed_event.set()

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    async def aclose(self) -> None:
        """Tear down after the transport closed: detach the session, cancel work."""
        if self.closed:
            return
        self.closed = True
        self._closed_event.set()
        self._tasks.cancel()
        for future in self._pending_server_requests.values():
            if not future.done():
                future.set_exception(ConnectionError("connection closed"))
        # Unblock producers waiting for queue space; nothing more will be written.
        while not self._outbound.empty():
            self._outbound.get_nowait()
            self._outbound.task_done()
        await self._writing.aclose()
        # Cancelled above (once: a second cancel would cut their clean-up short); wait
        # for them to unwind, then close the set (it cancels nothing more).
        await self._tasks.wait()
        await self._tasks.aclose()
        await self.state.aclose()
        self.runtime.metrics.connections.dec()
        if self.session is not None:
            self.runtime.sessions.detach(self.session, self)
            session_detached(self.runtime, self.session, self.peer)

    async def settle_for_restart(self, timeout: float) -> bool:
        """Handover: execute no request read from now on, answer the ones in flight
        and let the queue drain, up to ``timeout``; True when nothing was left over.

        A waiting ``process/read`` is cut at once instead of waited for: it changes
        nothing, so the client may repeat it, and its ``waitMs`` (seconds, at times)
        would hold the handover up. A request still running after ``timeout`` is
        cut too, and then False: the transport must not promise that every
        unanswered request was left unexecuted."""
        self._holding = True
        for task in self._tasks:
            if task.get_name() == m.PROCESS_READ:
                task.cancel()
        # One deadline for both: the answers, then their way out.
        deadline = asyncio.get_running_loop().time() + timeout
        settled = await self._tasks.wait(timeout)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await self._outbound.join()
        return settled and self._outbound.empty()

    async def finish(self, timeout: float) -> None:
        """Let in-flight requests answer and the queue drain (stdio EOF), up to ``timeout``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._tasks.wait()
                await self._outbound.join()


class _FrameId(msgspec.Struct, forbid_unknown_fields=False):
    id: int | str | None = None


def _frame_id(frame: bytes | str) -> int | str:
    """The id of an oversized request, so its refusal reaches the caller waiting for it
    (the transport's hard limit already bounds what is parsed here)."""
    try:
        found = msgspec.json.decode(frame, type=_FrameId).id
    except (msgspec.DecodeError, msgspec.ValidationError):
        return PARSE_ERROR_ID
    return PARSE_ERROR_ID if found is None else found
