"""RemoteProcess: one process on the exec-server, seen as an ordered event stream.

The client routes ``process/*`` notifications here (sync, straight from the
reader task); the ``SeqOrderer`` turns them into an in-order, exactly-once
stream. Holes are filled with ``process/read`` from the cursor: first after a
short grace period (the missing event is usually just behind on the wire),
and after a reconnect unconditionally, because events sent while no
connection was attached are never re-sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal, cast, overload

from execserver.aio.tasks import TaskSet
from execserver.client.calls import Caller
from execserver.client.errors import (
    ExecServerError,
    ExecServerTransportClosed,
    ExecServerUnavailable,
    ExpectEOF,
    ExpectTimeout,
    ProcessFailed,
)
from execserver.client.events import Closed, Exited, ExitStatus, Failed, ProcessEvent, SeqEvent
from execserver.client.expect import ExpectMatch, Pattern, find, held_output, split_at, wants_text
from execserver.client.ordering import SeqOrderer
from execserver.client.params import b64encode
from execserver.wire import methods
from execserver.wire.process import (
    ReadParams,
    ReadResponse,
    SignalParams,
    TerminateParams,
    WriteParams,
    WriteStatus,
)

__all__ = ["CATCH_UP_ATTEMPTS", "GAP_GRACE_SECONDS", "ReadFn", "RemoteProcess"]

__all__ = ["RemoteProcess"]

log = logging.getLogger(__name__)

# How long a hole may stay open before we ask the server, and how often we ask
# before declaring the output lost. Reordering on one connection resolves within
# a frame or two; the retries cover an exit whose seq is taken but whose flag the
# server has not published yet.
GAP_GRACE_SECONDS = 0.05
CATCH_UP_ATTEMPTS = 4

ReadFn = Callable[[ReadParams], Awaitable[ReadResponse]]


class RemoteProcess:
    """A process started by :meth:`ExecServerClient.start_process`.

    Iterate it (``async for event in proc``) to get ``Output``/``Exited``/``Closed``
    events in seq order; the iteration ends after ``Closed``, and raises
    :class:`ProcessFailed` instead when the stream cannot be completed (output
    lost, connection gone for good, client closed), so a loop never ends
    quietly with part of the output. ``events(raise_on_failure=False)`` yields
    a final ``Failed`` event instead. Only one consumer should iterate.
    ``wait()`` works with or without a consumer.

    Its events come from whoever routes the connection's notifications (the
    client's :class:`~execserver.client.router.ProcessRouter`) through
    :meth:`deliver`, :meth:`mark_started` and :meth:`fail`; ``on_finished`` is
    told once when no further event can come, so the router can drop the route.
    """

    def __init__(
        self,
        caller: Caller,
        process_id: str,
        *,
        tty: bool,
        on_finished: Callable[[RemoteProcess], None] | None = None,
    ) -> None:
        self._caller = caller
        self._on_finished = on_finished
        self.process_id = process_id
        self.tty = tty
        self.sandbox_type: str = "none"
        self._orderer = SeqOrderer()
        self._queue: asyncio.Queue[ProcessEvent] = asyncio.Queue()
        self._started = False
        self._exit: ExitStatus | None = None
        self._failure: str | None = None
        self._exit_known = asyncio.Event()
        self._finished = asyncio.Event()
        self._gap_task: asyncio.Task[None] | None = None
        # The gap filler runs while the stream is open; _finish cancels it.
        self._tasks = TaskSet(f"execserver-process {process_id}", logger=log)
        # Events taken from the queue by expect() and not consumed by a match:
        # the next expect() or iteration starts with them.
        self._held: deque[ProcessEvent] = deque()

    def __repr__(self) -> str:
        return f"RemoteProcess({self.process_id!r}, exit={self._exit}, failure={self._failure!r})"

    # -- consumer API ------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[ProcessEvent]:
        return self._iterate(raise_on_failure=True)

    def events(self, *, raise_on_failure: bool = True) -> AsyncIterator[ProcessEvent]:
        """The event stream; ``raise_on_failure=False`` ends a failed stream with
        a ``Failed`` event instead of raising :class:`ProcessFailed`."""
        return self._iterate(raise_on_failure=raise_on_failure)

    async def _iterate(self, *, raise_on_failure: bool) -> AsyncIterator[ProcessEvent]:
        while True:
            if self._held:
                event = self._held.popleft()
            elif self._queue.empty() and self._finished.is_set():
                # Iterated again after the end: say again how it ended.
                if self._failure is not None and raise_on_failure:
                    raise ProcessFailed(self._failure, process_id=self.process_id)
                return
            else:
                event = await self._queue.get()
            if isinstance(event, Failed) and raise_on_failure:
                raise ProcessFailed(event.message, process_id=self.process_id)
            yield event
            if isinstance(event, Closed | Failed):
                return

    @overload
    async def expect(
        self, pattern: str | re.Pattern[str], *, timeout: float | None = None
    ) -> ExpectMatch[str]: ...

    @overload
    async def expect(
        self, pattern: bytes | re.Pattern[bytes], *, timeout: float | None = None
    ) -> ExpectMatch[bytes]: ...

    async def expect(
        self, pattern: Pattern, *, timeout: float | None = None
    ) -> ExpectMatch[str] | ExpectMatch[bytes]:
        """Wait until the output (all streams, in arrival order) matches ``pattern``.

        ``str``/``bytes`` are literal text (like asyncssh's ``readuntil``); an
        ``re.Pattern`` is a regex. A ``str`` pattern matches the output decoded
        as UTF-8 and gives ``str`` back. Returns the match and what came before
        it; the output after the match stays buffered for the next ``expect``
        or iteration. Raises :class:`ExpectTimeout` after ``timeout`` seconds
        (the process runs on, nothing is consumed), :class:`ExpectEOF` when the
        output ends without a match, :class:`ProcessFailed` when the stream
        fails. Do not iterate the process while an ``expect`` is waiting.
        """
        text = wants_text(pattern)
        held = list(self._held)
        self._held.clear()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    found = find(pattern, held)
                    if found is not None:
                        match, consumed = found
                        held = split_at(held, consumed)
                        return match
                    if held and isinstance(held[-1], Closed | Failed):
                        break
                    if self._queue.empty() and self._finished.is_set():
                        break  # iterated to the end before: nothing more comes
                    held.append(await self._queue.get())
        except TimeoutError:
            assert timeout is not None
            raise ExpectTimeout(pattern, timeout, held_output(held, text)) from None
        finally:
            self._held.extendleft(reversed(held))
        last = held[-1] if held else None
        if isinstance(last, Failed):
            raise ProcessFailed(last.message, process_id=self.process_id)
        raise ExpectEOF(pattern, held_output(held, text))

    @property
    def exit_status(self) -> ExitStatus | None:
        return self._exit

    @property
    def failure(self) -> str | None:
        return self._failure

    @property
    def finished(self) -> bool:
        """``Closed`` or ``Failed`` was published: no further event will come."""
        return self._finished.is_set()

    @property
    def last_seq(self) -> int:
        """Seq of the last published event (the ``process/read`` cursor)."""
        return self._orderer.last_published

    async def wait(self) -> ExitStatus:
        """Exit code and sandbox-denial flag, once ``Exited`` has been published."""
        await self._exit_known.wait()
        if self._exit is None:
            raise ProcessFailed(self._failure or "process failed", process_id=self.process_id)
        return self._exit

    async def wait_closed(self) -> None:
        """Until ``Closed`` (all output delivered) or ``Failed``."""
        await self._finished.wait()
        if self._failure is not None:
            raise ProcessFailed(self._failure, process_id=self.process_id)

    async def write(self, data: bytes, *, write_id: str | None = None) -> WriteStatus:
        """Send bytes to stdin. A fresh ``writeId`` per call; pass one only to re-send
        the very same write (the server acknowledges but does not repeat it)."""
        params = WriteParams(
            process_id=self.process_id,
            chunk=b64encode(data),
            write_id=write_id or uuid.uuid4().hex,
        )
        result = await self._caller.call(methods.PROCESS_WRITE, params)
        return result.status

    async def signal(self, signal: str = "interrupt") -> None:
        """``process/signal``. The protocol knows only ``interrupt``; another name
        is sent as it is, so the server answers with its own error for it."""
        params = SignalParams(process_id=self.process_id, signal=cast(Literal["interrupt"], signal))
        await self._caller.call(methods.PROCESS_SIGNAL, params)

    async def interrupt(self) -> None:
        await self.signal("interrupt")

    async def terminate(self) -> bool:
        """SIGKILL the child; True when it was still running."""
        result = await self._caller.call(
            methods.PROCESS_TERMINATE, TerminateParams(process_id=self.process_id)
        )
        return result.running

    async def read(
        self,
        after_seq: int | None = None,
        *,
        max_bytes: int | None = None,
        wait_ms: int | None = None,
    ) -> ReadResponse:
        """``process/read``. After a failure it is answered locally."""
        if self._failure is not None:
            return ReadResponse(
                chunks=[],
                next_seq=self.last_seq + 1,
                exited=True,
                exit_code=None,
                closed=True,
                failure=self._failure,
                sandbox_denied=False,
            )
        params = ReadParams(
            process_id=self.process_id, after_seq=after_seq, max_bytes=max_bytes, wait_ms=wait_ms
        )
        return await self._caller.call(methods.PROCESS_READ, params)

    async def _read(self, params: ReadParams) -> ReadResponse:
        return await self._caller.call(methods.PROCESS_READ, params)

    # -- called by the router ----------------------------------------------

    def mark_started(self, sandbox_type: str) -> None:
        """The server confirmed the start (``process/start`` answered)."""
        self.sandbox_type = sandbox_type
        self._started = True

    @property
    def is_live(self) -> bool:
        """Started and not finished: its events may still be missing after a reconnect."""
        return self._started and not self._finished.is_set()

    def deliver(self, event: SeqEvent) -> None:
        """One ``process/*`` notification for this process, in any order."""
        if self._finished.is_set():
            return
        self._publish(self._orderer.push(event))
        if self._orderer.has_gap and self._gap_task is None:
            self._gap_task = self._tasks.spawn(self._fill_gap(), name="fill-gap")

    def fail(self, message: str) -> None:
        """End the stream with ``Failed(message)`` (no further event will come)."""
        if self._finished.is_set():
            return
        self._failure = message
        self._queue.put_nowait(Failed(message))
        self._finish()

    def _publish(self, events: list[SeqEvent]) -> None:
        for event in events:
            self._queue.put_nowait(event)
            if isinstance(event, Exited):
                self._exit = ExitStatus(event.exit_code, event.sandbox_denied)
                self._exit_known.set()
            elif isinstance(event, Closed):
                self._finish()

    def _finish(self) -> None:
        self._finished.set()
        self._exit_known.set()
        if self._on_finished is not None:
            self._on_finished(self)
        task, self._gap_task = self._gap_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _fill_gap(self) -> None:
        try:
            await self.catch_up(self._read, first_delay=GAP_GRACE_SECONDS)
        except (ExecServerTransportClosed, ExecServerUnavailable):
            pass  # reconnect recovery catches up (or fails the process) itself
        except ExecServerError as exc:
            log.warning("filling the event gap of %s failed: %s", self.process_id, exc)
        finally:
            if self._gap_task is asyncio.current_task():
                self._gap_task = None
            if self._orderer.has_gap and not self._finished.is_set():
                # A new hole appeared while we were reading; look again later.
                with contextlib.suppress(RuntimeError):
                    self._gap_task = self._tasks.spawn(self._fill_gap(), name="fill-gap")

    async def catch_up(
        self, read: ReadFn, *, first_delay: float = 0.0, always: bool = False
    ) -> None:
        """Read from the cursor until no hole is left, or fail the process.

        ``always`` reads even without a known hole: after a reconnect the missing
        events may be at the tail, where no later event reveals them.
        """
        delay = first_delay
        needed = always
        for _ in range(CATCH_UP_ATTEMPTS):
            if delay:
                await asyncio.sleep(delay)
            if self._finished.is_set() or not (needed or self._orderer.has_gap):
                return
            response = await read(
                ReadParams(process_id=self.process_id, after_seq=self.last_seq, wait_ms=0)
            )
            outcome = self._orderer.reconcile(response)
            self._publish(outcome.events)
            if not outcome.unexplained:
                return
            needed = True
            delay = max(delay * 2, GAP_GRACE_SECONDS)
        self.fail(
            "process events are no longer retained while recovering through sequence "
            f"{self._orderer.last_published + 1}"
        )
