"""Byte-message transports under the JSON-RPC layer: a websocket and a child's stdio.

A transport moves whole messages (one JSON object each) and knows nothing
about JSON-RPC. ``receive`` returns ``None`` once the peer is gone, however it
went (close frame, reset, EOF), because the layer above treats every loss the
same way: fail what is pending and maybe resume.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any, Protocol

import picows

from execserver.aio.tasks import TaskSet
from execserver.client.errors import ExecServerConnectError, ExecServerTimeout

__all__ = ["QUIET", "NotSent", "QuietStderr", "StdioTransport", "Transport", "WebSocketTransport"]

log = logging.getLogger(__name__)

# picows logs every connection's start and end at INFO; a host that logs at INFO
# would get those lines for each connection, while what matters reaches it as
# this module's errors. Its warnings (a peer's protocol errors) still show.
_picows_log = logging.getLogger("execserver.client.picows")
_picows_log.setLevel(logging.WARNING)

# A line from a stdio server can be a whole base64 file; never cut it.
_STDIO_LINE_LIMIT = 1 << 31
# A quiet stdio server's stderr: how much of its end is kept for an error, and
# how long to wait for the rest of it once the server has gone.
_STDERR_TAIL_BYTES = 8192
_STDERR_SETTLE = 2.0


class QuietStderr:
    """``StdioTransport.spawn(stderr=QUIET)``: keep the server's log out of ours."""

    def __repr__(self) -> str:
        return "QUIET"


QUIET = QuietStderr()


class Transport(Protocol):
    async def send(self, message: bytes) -> None: ...

    async def receive(self) -> bytes | None: ...

    async def close(self) -> None: ...

    def abort(self) -> None:
        """Drop the connection at once, without a goodbye (used on decode errors)."""

    @property
    def restarting(self) -> bool:
        """The server ended the connection saying it hands over to a successor
        (websocket close 1012), after answering every request it executed."""


class NotSent(ConnectionResetError):
    """The connection was closed or closing before the message was handed to it:
    none of it reached the server (so a request sent so was never executed)."""


# The websocket close code of a server handing over to its successor.
SERVICE_RESTART = 1012
# How long close() waits for the server to answer our close frame (aiohttp's
# default was 10 s; a server that does not answer is dropped after this).
_CLOSE_TIMEOUT = 5.0
# The server does not bound outbound messages (a 3 MiB file read is one ~4 MiB
# frame), so neither do we.
_NO_FRAME_LIMIT = sys.maxsize

_DATA_FRAMES = (picows.WSMsgType.TEXT, picows.WSMsgType.BINARY)
# The largest frame we send; a longer message is split into continuation frames
# (the reference accepts frames below 16 MiB and messages up to 64 MiB).
_FRAME_BYTES = 4 * 1024 * 1024


class _Inbox(picows.WSListener):
    """picows calls this from the socket's read callback, one frame at a time:
    it joins fragments into messages and queues them for ``receive``, answers
    the server's close frame, and remembers when the socket may take more."""

    def __init__(self) -> None:
        self.transport: picows.WSTransport | None = None
        self.messages: collections.deque[bytes] = collections.deque()
        self.ended = False
        self._fragments: list[bytes] | None = None
        self._waiter: asyncio.Future[None] | None = None
        # The code of the server's close frame (1012: it restarts, see ``restarting``).
        self.close_code: int | None = None
        self.writable = asyncio.Event()
        self.writable.set()

    def on_ws_connected(self, transport: picows.WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: picows.WSTransport, frame: picows.WSFrame) -> None:
        kind = frame.msg_type
        if kind in _DATA_FRAMES:
            if frame.fin:
                self._deliver(frame.get_payload_as_bytes())
            else:
                self._fragments = [frame.get_payload_as_bytes()]
        elif kind == picows.WSMsgType.CONTINUATION:
            if self._fragments is None:
                raise picows.WSProtocolError(
                    picows.WSCloseCode.PROTOCOL_ERROR, "continuation frame without a start"
                )
            self._fragments.append(frame.get_payload_as_bytes())
            if frame.fin:
                message, self._fragments = b"".join(self._fragments), None
                self._deliver(message)
        elif kind == picows.WSMsgType.CLOSE:
            self.close_code = int(frame.get_close_code().value)
            # Complete the close handshake (with 1000, as aiohttp's client did) and
            # hang up: whatever the server's code, this socket is done.
            transport.send_close(picows.WSCloseCode.OK)
            transport.disconnect()
            self._end()
        # PING is answered by picows itself (enable_auto_pong); PONG needs nothing.

    def on_ws_disconnected(self, transport: picows.WSTransport) -> None:
        self._end()
        self.writable.set()  # a paused sender finds out at its next send

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def _deliver(self, message: bytes) -> None:
        self.messages.append(message)
        self._wake()

    def _end(self) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_message(self) -> bytes | None:
        while not self.messages:
            if self.ended:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self.messages.popleft()


class WebSocketTransport:
    """One picows client websocket (a Cython websocket for asyncio: a frame costs
    a callback, not a task wake-up, and it imports in a fraction of aiohttp's
    client). Text and binary frames are both accepted."""

    def __init__(self, ws: picows.WSTransport, inbox: _Inbox) -> None:
        self._ws = ws
        self._inbox = inbox
        self._fragmenting = asyncio.Lock()

    @classmethod
    async def connect(
        cls, url: str, *, token: str | None = None, timeout: float | None = 10.0
    ) -> WebSocketTransport:
        headers: Mapping[str, str] = (
            {"Authorization": f"Bearer {token}"} if token is not None else {}
        )
        try:
            async with asyncio.timeout(timeout):
                # No client heartbeat (the reference does not need one); the
                # server's pings are answered by enable_auto_pong.
                ws, inbox = await picows.ws_connect(
                    _Inbox,
                    url,
                    extra_headers=headers,
                    max_frame_size=_NO_FRAME_LIMIT,
                    enable_auto_pong=True,
                    max_redirects=0,
                    websocket_handshake_timeout=None,
                    logger_name=_picows_log,
                )
        except TimeoutError as exc:
            raise ExecServerTimeout("connect", f"timed out connecting to {url}") from exc
        except picows.WSHandshakeError as exc:
            response = exc.response
            if response is None:  # not an HTTP answer at all
                raise ExecServerConnectError(f"cannot connect to {url}: {exc}") from exc
            raise ExecServerConnectError.upgrade_refused(
                url, int(response.status), exc.raw_body or b"", response.status.phrase
            ) from exc
        except (picows.WSError, OSError) as exc:
            raise ExecServerConnectError(f"cannot connect to {url}: {exc}") from exc
        if not isinstance(inbox, _Inbox):
            # picows returns without a listener when the peer hangs up before
            # answering the upgrade (aiohttp raised ServerDisconnectedError).
            raise ExecServerConnectError(
                f"cannot connect to {url}: connection closed during the websocket handshake"
            ) from ConnectionResetError("connection closed during the websocket handshake")
        return cls(ws, inbox)

    async def send(self, message: bytes) -> None:
        if len(message) > _FRAME_BYTES:
            async with self._fragmenting:
                await self._send_fragmented(message)
            return
        while True:
            if not self._inbox.writable.is_set():
                await self._inbox.writable.wait()
            if not self._fragmenting.locked():
                break
            # No frame of another message may come between a message's fragments.
            async with self._fragmenting:
                pass
        self._check_open()
        self._ws.send(picows.WSMsgType.TEXT, message)

    def _check_open(self) -> None:
        ws = self._ws
        # picows drops a frame sent after the close handshake began without a
        # word; the layer above must hear that the connection is gone.
        if (
            ws.is_disconnected
            or ws.is_close_frame_sent
            or self._inbox.ended
            or ws.underlying_transport.is_closing()
        ):
            raise NotSent("websocket is closed")

    async def _send_fragmented(self, message: bytes) -> None:
        # The reference drops a connection on any frame of 16 MiB or more (the
        # message may be 64 MiB): a large message goes as continuation frames.
        view = memoryview(message)
        for offset in range(0, len(message), _FRAME_BYTES):
            if not self._inbox.writable.is_set():
                await self._inbox.writable.wait()
            self._check_open()
            self._ws.send(
                picows.WSMsgType.TEXT if offset == 0 else picows.WSMsgType.CONTINUATION,
                view[offset : offset + _FRAME_BYTES],
                fin=offset + _FRAME_BYTES >= len(message),
            )

    async def receive(self) -> bytes | None:
        return await self._inbox.next_message()

    @property
    def restarting(self) -> bool:
        """The server closed with 1012 (service restart): execserver sends it when it
        hands over to its successor, after answering every request it executed."""
        return self._inbox.close_code == SERVICE_RESTART

    async def close(self) -> None:
        ws = self._ws
        if ws.is_disconnected:
            return
        if not ws.is_close_frame_sent:
            ws.send_close(picows.WSCloseCode.OK)
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT):
                await ws.wait_disconnected()
        except TimeoutError:
            ws.disconnect(graceful=False)
        except Exception:  # a failure picows recorded earlier; we are closing anyway
            log.debug("websocket ended with an error", exc_info=True)
            ws.disconnect(graceful=False)

    def abort(self) -> None:
        self._ws.disconnect(graceful=False)


class StdioTransport:
    """A child server speaking newline-delimited JSON on its stdin/stdout.

    The child belongs to the transport: closing it (or dropping the client)
    ends the child, as the reference client does.
    """

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._stderr_tail: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self._stderr_task: asyncio.Task[None] | None = None
        # The stderr reader lives as long as the transport; close() ends it.
        self._tasks = TaskSet("execserver-stdio", logger=log)
        if proc.stderr is not None:
            self._stderr_task = self._tasks.spawn(
                self._keep_stderr_tail(proc.stderr), name="stderr"
            )

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stderr: IO[Any] | int | QuietStderr | None = QUIET,
    ) -> StdioTransport:
        """Start ``argv``. ``stderr``: by default (``QUIET``) the server's log is
        kept out of ours; only its last lines are held, for the error when it
        ends. ``None`` passes it through to our stderr; a file or fd gets it."""
        target = asyncio.subprocess.PIPE if isinstance(stderr, QuietStderr) else stderr
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=target,
                env=None if env is None else dict(env),
                limit=_STDIO_LINE_LIMIT,
            )
        except OSError as exc:
            raise ExecServerConnectError(f"cannot start {argv[0]!r}: {exc}") from exc
        return cls(proc)

    async def _keep_stderr_tail(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self._stderr_tail.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size - len(self._stderr_tail[0]) >= _STDERR_TAIL_BYTES:
                self._stderr_size -= len(self._stderr_tail.popleft())

    async def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr (quiet mode only), once it
        has ended or after a short wait for what it is still writing."""
        if self._stderr_task is not None and not self._stderr_task.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), _STDERR_SETTLE)
        text = b"".join(self._stderr_tail)[-_STDERR_TAIL_BYTES:].decode("utf-8", "replace")
        return text.strip()

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def process(self) -> asyncio.subprocess.Process:
        return self._proc

    async def send(self, message: bytes) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(message + b"\n")
            await stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise ConnectionResetError("stdio server went away") from exc

    async def receive(self) -> bytes | None:
        stdout = self._proc.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readline()
            except (ConnectionError, ValueError):
                return None
            if not line:
                return None
            line = line.strip()
            if line:
                return line

    async def close(self) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        # EOF on stdin ends a stdio server (and its children); give it a moment.
        try:
            await asyncio.wait_for(self._proc.wait(), 5)
        except TimeoutError:
            self.abort()
            await self._proc.wait()
        if self._stderr_task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._stderr_task, _STDERR_SETTLE)
        await self._tasks.aclose()

    def abort(self) -> None:
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    @property
    def restarting(self) -> bool:
        return False  # a child server is ours alone: it never hands over
