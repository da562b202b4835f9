"""A daemon-wide bound on heavy work, shared fairly between callers.

At most ``capacity`` holders at once; when all slots are taken, waiters queue per
key (a session) and a freed slot goes to the next key in turn (round robin), so a
session that floods the daemon with requests waits behind its own, never in front
of another session's. A caller that gives up while queued leaves no trace; one that
is cancelled after its slot was granted hands it on.

Why: the event loop is one thread. Past saturation, every heavy request admitted at
once (a sandboxed fs call: its policy resolved in a worker thread that takes the
GIL, its frames written to a helper's pipe) adds to what each loop iteration must
run, and a cheap request (``process/read``, ``initialize``) waits behind all of them.
The figures are in docs/scale.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Hashable

__all__ = ["FairGate"]


class FairGate:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._held = 0
        # Waiters by key, and the keys with waiters in the order they are served.
        self._queues: dict[Hashable, deque[asyncio.Future[None]]] = {}
        self._turns: deque[Hashable] = deque()

    @property
    def held(self) -> int:
        return self._held

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    @contextlib.asynccontextmanager
    async def slot(self, key: Hashable) -> AsyncIterator[None]:
        """Hold one slot for the body; queued behind ``key``'s turn when all are taken."""
        await self._acquire(key)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, key: Hashable) -> None:
        if self._held < self.capacity and not self._turns:
            self._held += 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            self._turns.append(key)
        queue.append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # granted, then cancelled before it ran: hand it on
            else:
                self._forget(key, granted)
            raise

    def _forget(self, key: Hashable, granted: asyncio.Future[None]) -> None:
        queue = self._queues.get(key)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(granted)
        if not queue:
            del self._queues[key]
            with contextlib.suppress(ValueError):
                self._turns.remove(key)

    def _release(self) -> None:
        self._held -= 1
        while self._turns and self._held < self.capacity:
            key = self._turns.popleft()
            queue = self._queues[key]
            granted = queue.popleft()
            if queue:
                self._turns.append(key)  # its next waiter comes after the others' turns
            else:
                del self._queues[key]
            if not granted.done():
                self._held += 1
                granted.set_result(None)
