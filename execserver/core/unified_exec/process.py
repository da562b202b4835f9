"""One unified-exec process: a RemoteProcess whose events are pumped into a
head/tail buffer by an owned task, so output keeps accumulating between tool
calls while nobody is waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from execserver.aio.tasks import TaskSet
from execserver.client.errors import ExecServerError
from execserver.client.events import Closed, Exited, Failed, Output
from execserver.client.process import RemoteProcess
from execserver.core.attempt import SandboxAttempt
from execserver.core.network_approval import DeferredNetworkApproval
from execserver.core.unified_exec.buffer import HeadTailBuffer
from execserver.wire.process import WriteStatus

__all__ = ["UnifiedExecProcess", "WriteOutcome"]

log = logging.getLogger(__name__)


class WriteOutcome:
    ACCEPTED = "accepted"
    UNKNOWN_PROCESS = "unknownProcess"
    STDIN_CLOSED = "stdinClosed"


class UnifiedExecProcess:
    def __init__(
        self,
        remote: RemoteProcess,
        *,
        attempt: SandboxAttempt,
        tty: bool,
        command: str,
        buffer_bytes: int | None = None,
    ) -> None:
        self.remote = remote
        self.attempt = attempt
        self.tty = tty
        self.command = command
        self.buffer = HeadTailBuffer() if buffer_bytes is None else HeadTailBuffer(buffer_bytes)
        self.exit_code: int | None = None
        self.sandbox_denied = False
        self.failure: str | None = None
        self.network_approval: DeferredNetworkApproval | None = None
        self._exited = asyncio.Event()
        self._closed = asyncio.Event()
        # Set whenever something new arrived (output, exit, close); waiters
        # clear it before waiting again.
        self._changed = asyncio.Event()
        self._tasks = TaskSet(f"unified-exec {remote.process_id}", logger=log)
        self._pump = self._tasks.spawn(self._run(), name="pump")

    # -- state ---------------------------------------------------------------

    @property
    def exited(self) -> bool:
        return self._exited.is_set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def process_id(self) -> str:
        return self.remote.process_id

    def is_denied(self) -> bool:
        """Denial counts only for an exited process, and for a remote one only
        the executor's flag counts."""
        return self.exited and self.sandbox_denied

    def mark_exited(self) -> None:
        """The executor says the process is gone (write answered unknownProcess
        or stdinClosed): treat it as exited from now on."""
        self._exited.set()
        self._changed.set()

    # -- pump ----------------------------------------------------------------

    async def _run(self) -> None:
        try:
            async for event in self.remote.events(raise_on_failure=False):
                if isinstance(event, Output):
                    self.buffer.push(event.data)
                elif isinstance(event, Exited):
                    self.exit_code = event.exit_code
                    self.sandbox_denied = self.sandbox_denied or event.sandbox_denied
                    self._exited.set()
                elif isinstance(event, Failed):
                    self.failure = event.message
                    self._exited.set()
                    self._closed.set()
                elif isinstance(event, Closed):
                    self._closed.set()
                self._changed.set()
        finally:
            self._exited.set()
            self._closed.set()
            self._changed.set()

    # -- waiting -------------------------------------------------------------

    async def wait_exit(self, timeout: float | None) -> bool:
        """Up to ``timeout`` seconds (None: no limit) for the exit event (no polling)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._exited.wait()
        return self.exited

    async def wait_closed(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._closed.wait()
        return self.closed

    async def wait_change(self, timeout: float) -> None:
        """Until new output, exit or close, or ``timeout``."""
        if timeout <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        self._changed.clear()

    def drain(self) -> bytes:
        data, _ = self.buffer.drain()
        return data

    # -- control -------------------------------------------------------------

    async def write(self, data: bytes) -> str:
        try:
            status: WriteStatus = await self.remote.write(data)
        except ExecServerError as exc:
            log.debug("write to %s failed: %s", self.process_id, exc)
            self.mark_exited()
            return WriteOutcome.UNKNOWN_PROCESS
        if status in (WriteOutcome.UNKNOWN_PROCESS, WriteOutcome.STDIN_CLOSED):
            self.mark_exited()
        return str(status)

    async def interrupt(self) -> None:
        with contextlib.suppress(ExecServerError):
            await self.remote.signal("interrupt")

    async def terminate(self) -> None:
        """Kill the process (if still running) and stop pumping its events."""
        if not self.exited:
            with contextlib.suppress(ExecServerError):
                await self.remote.terminate()
        await self.close()

    async def close(self) -> None:
        """Stop the pump task; used once the process is no longer tracked."""
        if not self._pump.done():
            # Let a process that was just killed deliver its last events;
            # never wait forever for a silent executor.
            await self.wait_closed(1.0)
        await self._tasks.aclose()  # a pump still waiting on a silent executor is cancelled
