"""The websocket transport (picows): the HTTP surface and one Connection per socket.

picows parses frames in Cython and hands each to ``on_ws_frame``, a plain
callback. The frame goes straight into ``Connection.handle_frame``, driven
inline: a request answered at once (``process/read``, ``fs/getMetadata``)
is decoded, served and written before the callback returns, with no task,
queue or event-loop round in between (against aiohttp's reader task and
``receive()``, ~15 µs less of the daemon's CPU per polling round trip).
When handling a frame has to wait (rarely: a notification waiting for its
``initialize``, a write waiting for the peer to read), it goes on in a task,
later frames queue behind it in order, and the socket stops reading until
they are done, so a peer cannot pile up frames in memory.

Only a connection whose first request asks for a websocket upgrade is picows';
every other one is handed to aiohttp's HTTP server (server/http_plain.py), so
health probes and other plain requests get full HTTP/1.x (other methods, HEAD,
HTTP/1.0, keep-alive) as from the reference. What each path answers is decided
in server/http_surface.py.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import struct
from collections.abc import Coroutine, Sequence
from typing import Any, cast

from picows import (
    WSAutoPingStrategy,
    WSCloseCode,
    WSFrame,
    WSListener,
    WSMsgType,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
)
from picows.picows import WSProtocol  # type: ignore[attr-defined]  # not in its stubs

from execserver.aio.eager import resumed
from execserver.aio.tasks import TaskSet
from execserver.server.coalesce import Cork
from execserver.server.connection import Connection, ProtocolViolation
from execserver.server.http_plain import PlainHttp
from execserver.server.http_surface import HttpRequest, HttpSurface, UpgradeCheck
from execserver.server.runtime import ServerRuntime

__all__ = ["WebsocketServer", "format_peer"]

log = logging.getLogger(__name__)

# picows logs every connection and every peer's protocol error; our own log lines
# say what matters (a dropped connection, a refused upgrade).
_picows_log = logging.getLogger("execserver.server.picows")
_picows_log.setLevel(logging.ERROR)


class _FramesRefusedByPicows(logging.Filter):
    """Of picows' own lines only one matters: a frame it refused from its header
    (past the 64 MiB message limit, so never read), which it answers with a
    close frame and a disconnect. That becomes our warning; the rest is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith("WS parser error"):
            # e.g. "(<WSCloseCode.MESSAGE_TOO_BIG: 1009>, 'Received frame with payload
            # size exceeding max allowed size, N > 67108864')"
            log.warning("closing a connection: %s", record.getMessage())
        return False


_picows_log.addFilter(_FramesRefusedByPicows())

# While writing is paused, how often to check whether the socket's buffer drained.
DRAIN_CHECK_S = 0.05
# A first request head longer than this is not an upgrade we serve: aiohttp answers it.
SNIFF_LIMIT = 16 * 1024
# --max-frame-bytes: a message at most this much over the limit is still answered
# (with its id: the connection lives on); one further over is a peer that ignores
# the limit, and the connection is closed with 1009, message too big.
OVERSIZE_ANSWERED_BYTES = 1024 * 1024
# After our close frame, how long the peer has to read it and answer before the
# socket is dropped. Meanwhile its frames are read and thrown away: closing with
# unread data would send a reset, and the peer might never see the 1009.
CLOSE_LINGER_S = 2.0
# The same for a handover's 1012, longer: the 1012 is what lets the client send
# its unanswered requests again, and a client starved of CPU (a loaded machine)
# reading it after 2 s found the socket dropped instead ("closed without 1012",
# under two CPU hogs and a full test run). The successor waits for this.
RESTART_LINGER_S = 10.0


def format_peer(peername: Any) -> str:
    """``host:port``, ``[v6 host]:port``, or ``unknown``."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = peername[0], peername[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return "unknown"


def _text_frame_header(size: int) -> bytes:
    """The header of one unmasked, final text frame of ``size`` payload bytes.
    Frames are written with the socket transport's own ``write`` rather than
    picows' ``send``: picows writes straight to the socket when uvloop's buffer
    looks empty, and streaming 200 MB of output that way stalled now and then
    (bytes missing at the client, ~1 run in 20)."""
    if size < 126:
        return bytes((0x81, size))
    if size < 65536:
        return _header_16(0x81, 126, size)
    return _header_64(0x81, 127, size)


# From this size on the header and payload go out as two buffers (a writev)
# instead of one joined copy: a 70 MB readFile answer copied once less, ~17 000
# page faults of fresh memory on the benchmark VM.
SEPARATE_HEADER_FROM = 1 << 20


_header_16 = struct.Struct("!BBH").pack
_header_64 = struct.Struct("!BBQ").pack
# Looked up once per frame; module names are cheaper than the enum's attributes.
_TEXT = WSMsgType.TEXT
_BINARY = WSMsgType.BINARY
_CONTINUATION = WSMsgType.CONTINUATION
_CLOSE = WSMsgType.CLOSE


class WebsocketServer:
    """The listening sockets and every websocket on them."""

    def __init__(
        self,
        runtime: ServerRuntime,
        upgrade_checks: Sequence[UpgradeCheck] = (),
        metrics_checks: Sequence[UpgradeCheck] = (),
    ) -> None:
        self.runtime = runtime
        self.surface = HttpSurface(runtime, upgrade_checks, metrics_checks)
        self.plain_http = PlainHttp(
            self.surface,
            metrics=runtime.config.metrics,
            head_timeout_s=runtime.config.http_head_timeout_s,
        )
        # One asyncio.Server per listening socket (several when inherited).
        self._servers: list[asyncio.Server] = []
        # Websockets not yet closed down (Connection.aclose done); shutdown waits for them.
        self._live: set[_Socket] = set()
        self._none_live = asyncio.Event()
        self._none_live.set()
        # Each disconnected websocket's close-down (its Connection.aclose).
        self.closing = TaskSet("websocket close-down", logger=log)

    async def start(
        self, host: str, port: int, inherited: Sequence[socket.socket] = ()
    ) -> list[tuple[str, int]]:
        """Listen (on ``inherited`` listening sockets when given: a predecessor's or
        systemd's, already bound); returns every listening socket's (host, port)."""
        loop = asyncio.get_running_loop()
        await self.plain_http.start()
        if inherited:
            for sock in inherited:
                sock.setblocking(False)
                self._servers.append(await loop.create_server(self._new_protocol, sock=sock))
        else:
            server = await loop.create_server(
                self._new_protocol, host=host, port=port, reuse_address=True
            )
            self._servers.append(server)
        return [sock.getsockname()[:2] for server in self._servers for sock in server.sockets]

    def listening_fds(self) -> list[int]:
        """The listening sockets' fds (for a successor: SCM_RIGHTS copies them)."""
        return [sock.fileno() for server in self._servers for sock in server.sockets]

    def stop_listening(self) -> None:
        """Accept no more. Our fds close; a successor's copies keep the sockets open,
        so a client connecting now waits in the backlog instead of being refused."""
        for server in self._servers:
            server.close()

    async def restart_connections(self, grace_s: float) -> bool:
        """Handover: every websocket finishes the requests it has read and closes
        with 1012 (service restart); True when all did within ``grace_s`` (a
        request still running then is cut, and its websocket closes with 1001)."""
        sockets = list(self._live)
        results = await asyncio.gather(
            *(sock.close_for_restart(grace_s) for sock in sockets), return_exceptions=True
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._none_live.wait(), RESTART_LINGER_S)
        return all(result is True for result in results)

    async def close(self, grace_s: float) -> None:
        """Stop listening and wait (up to ``grace_s``) for the websockets, aborted by the
        caller, to finish closing down."""
        self.stop_listening()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._none_live.wait(), grace_s)
        # Past the grace, what is still closing down is cancelled (and awaited).
        await self.closing.aclose()
        await self.plain_http.close()

    def _new_protocol(self) -> asyncio.Protocol:
        return _FirstRequest(self)

    def websocket_protocol(self, handshake_timeout_s: float) -> WSProtocol:
        return _Protocol(self, handshake_timeout_s)

    def route(self, request: WSUpgradeRequest, peer: Any) -> Any:
        """What picows does with an HTTP request: our listener (upgrade) or a response."""
        path = request.path.split(b"?", 1)[0].decode("latin-1")
        remote = peer[0] if isinstance(peer, tuple) and peer else None
        http_request = HttpRequest(path, request.headers, remote)
        response = self.surface.answer(http_request)
        if response is None:
            return _Socket(self, format_peer(peer), http_request.admission.principal)
        if response.status >= 400:
            reply = WSUpgradeResponse.create_error_response(
                response.status, response.body, response.headers
            )
        else:
            reply = WSUpgradeResponse.create_ok_response(response.body, response.headers)
            if not response.body:
                del reply.headers["Content-Type"]
        return WSUpgradeResponseWithListener(reply, None)

    @property
    def live_sockets(self) -> frozenset[_Socket]:
        """The websockets not yet closed down (read by tests of their bounds)."""
        return frozenset(self._live)

    def opened(self, sock: _Socket) -> None:
        self._live.add(sock)
        self._none_live.clear()

    def closed(self, sock: _Socket) -> None:
        self._live.discard(sock)
        if not self._live:
            self._none_live.set()


def _asks_for_upgrade(head: bytes) -> bool:
    """Whether a request head is a GET that asks to switch protocols (an ``Upgrade``
    header, or ``upgrade`` in ``Connection``): picows' to accept or refuse."""
    lines = head.split(b"\r\n")
    if not lines[0].startswith(b"GET "):
        return False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"upgrade" or (name == b"connection" and b"upgrade" in value.lower()):
            return True
    return False


class _FirstRequest(asyncio.Protocol):
    """Reads a connection's first request head, then hands the connection, with the
    bytes read so far, to picows (a websocket upgrade) or to aiohttp (anything else)."""

    def __init__(self, server: WebsocketServer) -> None:
        self._server = server
        self._head = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timeout: asyncio.TimerHandle | None = None
        self._deadline = 0.0  # loop time by which the first request head must be in

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have its methods.
        self._transport = cast(asyncio.Transport, transport)
        loop = asyncio.get_running_loop()
        # A connection's first request head has --http-head-timeout in all, whoever
        # reads the rest of it (http_plain bounds every later head the same way).
        self._deadline = loop.time() + self._server.runtime.config.http_head_timeout_s
        self._timeout = loop.call_at(self._deadline, self._transport.abort)

    def data_received(self, data: bytes) -> None:
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0 and len(self._head) <= SNIFF_LIMIT:
            return
        head = bytes(self._head[: end if end >= 0 else SNIFF_LIMIT])
        # A head longer than SNIFF_LIMIT is handed over unfinished: what is left of
        # the deadline goes with it, so the whole head never gets more than it.
        left = max(self._deadline - asyncio.get_running_loop().time(), 0.0)
        if _asks_for_upgrade(head):
            self._hand_over(self._server.websocket_protocol(left))
        else:
            self._hand_over(self._server.plain_http.protocol(left))

    def _hand_over(self, protocol: asyncio.BaseProtocol) -> None:
        transport = self._transport
        assert transport is not None
        self._cancel_timeout()
        received = bytes(self._head)
        self._head.clear()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if isinstance(protocol, asyncio.BufferedProtocol):
            view = memoryview(received)
            while view:
                buffer = memoryview(protocol.get_buffer(len(view)))
                size = min(len(buffer), len(view))
                buffer[:size] = view[:size]
                protocol.buffer_updated(size)
                view = view[size:]
        else:
            assert isinstance(protocol, asyncio.Protocol)
            protocol.data_received(received)

    def eof_received(self) -> bool:
        return False  # nothing to answer: close

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timeout()

    def _cancel_timeout(self) -> None:
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None


class _Protocol(WSProtocol):  # type: ignore[misc]
    """picows' protocol, knowing its peer before the HTTP request is routed (the audit
    log names who was refused)."""

    def __init__(self, server: WebsocketServer, handshake_timeout_s: float) -> None:
        self._peer: Any = None
        super().__init__(
            host_port=None,
            ws_path=None,
            is_client_side=False,
            ws_listener_factory=lambda request: server.route(request, self._peer),
            logger=_picows_log,
            disconnect_on_exception=True,
            websocket_handshake_timeout=handshake_timeout_s,
            enable_auto_ping=False,  # ours: every ping_interval_s, a missing pong is not fatal
            auto_ping_idle_timeout=20,
            auto_ping_reply_timeout=20,
            auto_ping_strategy=WSAutoPingStrategy.PING_WHEN_IDLE,
            enable_auto_pong=True,
            max_frame_size=server.runtime.config.max_message_bytes,
            extra_headers=None,
            read_buffer_init_size=16 * 1024,
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._peer = transport.get_extra_info("peername")
        super().connection_made(transport)


class _Socket(WSListener):
    """One websocket: frames in to its Connection, frames out to the socket."""

    def __init__(self, server: WebsocketServer, peer: str, principal: str | None = None) -> None:
        super().__init__()
        self._server = server
        self._peer = peer
        self._principal = principal
        self._loop = asyncio.get_running_loop()
        self._max_message = server.runtime.config.max_message_bytes
        max_frame = server.runtime.config.limits.max_frame_bytes
        # Beyond this a message is not answered but closes the connection (1009).
        self._max_answered = (
            self._max_message
            if max_frame is None
            else min(self._max_message, max_frame + OVERSIZE_ANSWERED_BYTES)
        )
        self._closing_sent = False  # our close frame is out: ignore what still comes
        self._linger: asyncio.TimerHandle | None = None  # the disconnect after that close
        self._fragments: list[bytes] | None = None
        self._fragments_size = 0
        # Frames that arrived while an earlier one is still being handled (in order).
        self._backlog: collections.deque[bytes] | None = None
        self._can_write: asyncio.Event | None = None  # set: the peer reads again
        # The ping loop, the abort watch and a backlog's handling (one at a time; a
        # finished one leaves the set, so it does not grow with backpressure episodes).
        self._tasks = TaskSet(f"websocket {peer}", logger=log)

    @property
    def held_task_count(self) -> int:
        """How many tasks this websocket holds: at most the ping loop, the abort watch
        and one backlog (read by tests/integration/test_ws_backpressure_tasks.py)."""
        return len(self._tasks)

    @property
    def writing_paused(self) -> bool:
        """The socket's send buffer is over its high-water mark: writers wait."""
        return self._can_write is not None

    # ---- picows callbacks -------------------------------------------------------------

    def on_ws_connected(self, transport: WSTransport) -> None:
        self._transport = transport
        self._tcp = transport.underlying_transport
        runtime = self._server.runtime
        self._cork = Cork(self._tcp.get_extra_info("socket"))
        self._write = self._tcp.write
        self.conn = Connection(
            runtime,
            self._send_frame,
            write_now=self._write_now,
            send_frames=self._send_frames,
            peer=self._peer,
            principal=self._principal,
            parse_error_prefix=(
                "failed to parse websocket JSON-RPC message from exec-server websocket "
                f"{self._peer}: "
            ),
        )
        runtime.connections.add(self.conn)
        self._server.opened(self)
        self._tasks.spawn(self._ping_loop(runtime.config.ping_interval_s), name="ping")
        self._tasks.spawn(self._drop_when_aborted(), name="drop when aborted")

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        # More frames of this read follow: their answers leave together (server/coalesce.py).
        cork = self._cork
        if not frame.last_in_buffer:
            cork.hold()
            self._on_frame(transport, frame)
            return
        if not cork.held:  # a lone request: nothing to release
            self._on_frame(transport, frame)
            return
        try:
            self._on_frame(transport, frame)
        finally:
            cork.release()

    def _on_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if self._closing_sent and kind is not _CLOSE:
            return  # read and dropped until the peer answers our close
        if kind is _TEXT or kind is _BINARY:
            if frame.fin and self._fragments is None:
                if frame.payload_size > self._max_answered:
                    self._too_big(frame.payload_size)
                    return
                self._receive(frame.get_payload_as_bytes())
            else:
                self._fragments = []
                self._fragments_size = 0
                self._add_fragment(frame)
        elif kind is _CONTINUATION:
            if self._fragments is None:
                self._close(WSCloseCode.PROTOCOL_ERROR, "continuation without a start")
                return
            self._add_fragment(frame)
        elif kind is _CLOSE:
            if not self._closing_sent:
                code = frame.get_close_code()
                transport.send_close(WSCloseCode.OK if code is WSCloseCode.NO_INFO else code)
            transport.disconnect()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if self._linger is not None:
            self._linger.cancel()  # the peer answered (or left) before the linger ran out
        self._tasks.cancel()
        self.resume_writing()  # writers waiting for the peer find it gone
        self._server.runtime.connections.discard(self.conn)
        if self._server.closing.closed:  # shut down past its grace: the runtime closes the rest
            self._server.closed(self)
            return
        self._server.closing.spawn(self._close_down(), name=self._peer)

    async def _close_down(self) -> None:
        try:
            # Cancelled in on_ws_disconnected (once); they unwind before the
            # connection closes, then the set closes (cancelling nothing more).
            await self._tasks.wait()
            await self._tasks.aclose()
            await self.conn.aclose()
        finally:
            self._server.closed(self)

    def pause_writing(self) -> None:
        if self._can_write is None:
            self._can_write = asyncio.Event()
            self._loop.call_later(DRAIN_CHECK_S, self._check_drained)

    def resume_writing(self) -> None:
        if self._can_write is not None:
            self._can_write.set()
            self._can_write = None

    def _check_drained(self) -> None:
        # A writer must never wait forever for a resume_writing that does not come. It
        # went missing under load (streaming 200 MB of output) while frames went out
        # through picows' send, which writes past uvloop's buffer; frames now use the
        # transport's write, but picows' control frames (ping, pong, close) still do not.
        if self._can_write is None:
            return
        if self._transport.is_disconnected or not self._tcp.get_write_buffer_size():
            self.resume_writing()
            return
        self._loop.call_later(DRAIN_CHECK_S, self._check_drained)

    # ---- frames in ----------------------------------------------------------------------

    def _add_fragment(self, frame: WSFrame) -> None:
        assert self._fragments is not None
        self._fragments_size += frame.payload_size
        if self._fragments_size > self._max_answered:
            self._too_big(self._fragments_size)
            return
        self._fragments.append(frame.get_payload_as_bytes())
        if frame.fin:
            message = b"".join(self._fragments)
            self._fragments = None
            self._receive(message)

    def _receive(self, message: bytes) -> None:
        if self._backlog is not None:
            self._backlog.append(message)
            return
        try:
            rest = self.conn.receive(message)
            if rest is None:
                return
            awaiting = rest.send(None)
        except StopIteration:
            return
        except Exception as exc:
            self._failed(exc)
            return
        # It waits: it goes on in a task, later frames wait behind it, reading stops.
        self._backlog = collections.deque()
        self._tcp.pause_reading()
        backlog = self._handle_backlog(resumed(rest, awaiting))
        self._tasks.spawn(backlog, name="backlog")

    async def _handle_backlog(self, first: Coroutine[Any, Any, None]) -> None:
        try:
            await first
            assert self._backlog is not None
            while self._backlog:
                await self.conn.handle_frame(self._backlog.popleft())
        except Exception as exc:
            self._failed(exc)
            return
        self._backlog = None
        if not self._transport.is_disconnected:
            self._tcp.resume_reading()

    def _failed(self, exc: Exception) -> None:
        """Handling a frame raised (inline or in the backlog task): a protocol violation
        drops the connection as the reference does, anything else is our bug."""
        if isinstance(exc, ProtocolViolation):
            log.info("connection %s dropped: %s", self._peer, exc)
            self.conn.abort(str(exc))
        else:
            log.error("connection %s: handling a frame failed", self._peer, exc_info=exc)
            self.conn.abort("internal error")

    def _close(self, code: WSCloseCode, reason: str) -> None:
        self._fragments = None
        self._transport.send_close(code, reason.encode())
        self._transport.disconnect()

    async def close_for_restart(self, grace_s: float) -> bool:
        """Handover: execute nothing more that the peer sends, let what was read
        answer, then close with 1012. 1012 promises the peer that every request
        it got no answer to was never executed (the client may send it again to
        the next daemon); when a request outlives ``grace_s`` it is cut instead
        and the close is 1001, which promises nothing. True for a 1012."""
        settled = await self.conn.settle_for_restart(grace_s)
        if self._transport.is_disconnected or self._closing_sent:
            return settled
        code = WSCloseCode.SERVICE_RESTART if settled else WSCloseCode.GOING_AWAY
        self._close_lingering(code, b"service restart", RESTART_LINGER_S)
        return settled

    def _too_big(self, size: int) -> None:
        """Close with 1009 a message past what is answered: logged, and lingering
        so the peer reads the close frame instead of a reset."""
        limit = self._server.runtime.config.limits.max_frame_bytes
        if limit is not None and size <= self._max_message:
            bound = f"--max-frame-bytes={limit}"
        else:
            bound = f"the {self._max_message}-byte message limit"
        log.warning(
            "connection %s: closing with 1009 (message too big): a message of %s%d bytes "
            "is far over %s",
            self._peer,
            "at least " if self._fragments is not None else "",
            size,
            bound,
        )
        self._close_lingering(WSCloseCode.MESSAGE_TOO_BIG, b"message too big", CLOSE_LINGER_S)

    def _close_lingering(self, code: WSCloseCode, reason: bytes, linger_s: float) -> None:
        """Send our close frame and read (and drop) what the peer still sends until it
        answers (on_ws_frame then disconnects), or ``linger_s`` has passed."""
        self._fragments = None
        self._closing_sent = True
        self._transport.send_close(code, reason)
        self._linger = self._loop.call_later(linger_s, self._transport.disconnect)

    # ---- frames out ---------------------------------------------------------------------

    def _write_frame(self, payload: bytes) -> None:
        size = len(payload)
        if size < SEPARATE_HEADER_FROM:
            self._write(_text_frame_header(size) + payload)
        else:
            self._tcp.writelines((_text_frame_header(size), payload))

    def _write_now(self, frame: bytes) -> bool:
        if self._closing_sent:
            return True  # nothing goes after our close frame (a notification, caught up later)
        if self._can_write is not None or self._transport.is_disconnected:
            return False
        self._write_frame(frame)
        return True

    async def _send_frame(self, frame: bytes) -> None:
        await self._send_frames((frame,))

    async def _send_frames(self, frames: Sequence[bytes]) -> None:
        """Several frames in one write, then the wait while the peer reads slower
        than we write."""
        if self._closing_sent:
            return  # as in _write_now; an abort here would reset the close frame away
        if self._transport.is_disconnected:
            raise ConnectionResetError("the peer is gone")
        if len(frames) == 1:
            self._write_frame(frames[0])
        else:
            parts: list[bytes] = []
            for payload in frames:
                parts.append(_text_frame_header(len(payload)))
                parts.append(payload)
            self._tcp.writelines(parts)
        if self._can_write is not None:  # the peer reads slower than we write
            await self._can_write.wait()
            if self._transport.is_disconnected:
                raise ConnectionResetError("the peer is gone")

    async def _ping_loop(self, interval: float) -> None:
        """Ping every ``interval`` seconds (empty payload), as the reference does, so idle
        connections survive proxies. A missing pong is not fatal, as in the reference."""
        while True:
            await asyncio.sleep(interval)
            self._transport.send_ping(b"")

    async def _drop_when_aborted(self) -> None:
        await self.conn.wait_closed()
        # The reference drops the TCP connection without a close frame.
        self._tcp.abort()
