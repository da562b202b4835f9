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
import base64
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from execserver.client.errors import (
    ExecServerError,
    ExecServerTransportClosed,
    ExecServerUnavailable,
    ProcessFailed,
)
from execserver.client.events import Closed, Exited, ExitStatus, Failed, ProcessEvent, SeqEvent
from execserver.client.ordering import SeqOrderer
from execserver.wire import methods
from execserver.wire.process import (
    ReadParams,
    ReadResponse,
    SignalParams,
    TerminateParams,
    TerminateResponse,
    WriteParams,
    WriteResponse,
    WriteStatus,
)

if TYPE_CHECKING:
    from execserver.client.connection import ExecServerClient

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
    events in seq order; the iteration ends after ``Closed`` or ``Failed``. Only
    one consumer should iterate. ``wait()`` works with or without a consumer.
    """

    def __init__(self, client: ExecServerClient, process_id: str, *, tty: bool) -> None:
        self._client = client
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

    def __repr__(self) -> str:
        return f"RemoteProcess({self.process_id!r}, exit={self._exit}, failure={self._failure!r})"

    # -- consumer API ------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[ProcessEvent]:
        return self._iterate()

    def events(self) -> AsyncIterator[ProcessEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ProcessEvent]:
        while True:
            event = await self._queue.get()
            yield event
            if isinstance(event, Closed | Failed):
                return

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
            raise ProcessFailed(self._failure or "process failed")
        return self._exit

    async def wait_closed(self) -> None:
        """Until ``Closed`` (all output delivered) or ``Failed``."""
        await self._finished.wait()
        if self._failure is not None:
            raise ProcessFailed(self._failure)

    async def write(self, data: bytes, *, write_id: str | None = None) -> WriteStatus:
        """Send bytes to stdin. A fresh ``writeId`` per call; pass one only to re-send
        the very same write (the server acknowledges but does not repeat it)."""
        params = WriteParams(
            process_id=self.process_id,
            chunk=_b64(data),
            write_id=write_id or uuid.uuid4().hex,
        )
        result = await self._client.call(methods.PROCESS_WRITE, params, WriteResponse)
        return result.status

    async def signal(self, signal: str = "interrupt") -> None:
        await self._client.call(
            methods.PROCESS_SIGNAL,
            SignalParams(process_id=self.process_id, signal="interrupt")
            if signal == "interrupt"
            else {"processId": self.process_id, "signal": signal},
            object,
        )

    async def interrupt(self) -> None:
        await self.signal("interrupt")

    async def terminate(self) -> bool:
        """SIGKILL the child; True when it was still running."""
        result = await self._client.call(
            methods.PROCESS_TERMINATE,
            TerminateParams(process_id=self.process_id),
            TerminateResponse,
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
        return await self._client.read(
            self.process_id, after_seq=after_seq, max_bytes=max_bytes, wait_ms=wait_ms
        )

    # -- called by the client ----------------------------------------------

    def _mark_started(self, sandbox_type: str) -> None:
        self.sandbox_type = sandbox_type
        self._started = True

    @property
    def _live(self) -> bool:
        return self._started and not self._finished.is_set()

    def _on_event(self, event: SeqEvent) -> None:
        if self._finished.is_set():
            return
        self._publish(self._orderer.push(event))
        if self._orderer.has_gap and self._gap_task is None:
            self._gap_task = asyncio.create_task(self._fill_gap())

    def _fail(self, message: str) -> None:
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
        self._client._forget(self)
        task, self._gap_task = self._gap_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _fill_gap(self) -> None:
        try:
            await self.catch_up(self._client.read_params, first_delay=GAP_GRACE_SECONDS)
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
                    self._gap_task = asyncio.create_task(self._fill_gap())

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
        self._fail(
            "process events are no longer retained while recovering through sequence "
            f"{self._orderer.last_published + 1}"
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
