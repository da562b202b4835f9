"""Yield-time pauses.

While the user is being asked something on behalf of a running command (a
network approval prompt, for instance), the command cannot make progress and
its call should not time out: the time spent paused is added to the call's
deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YieldPause"]


class YieldPause:
    def __init__(self) -> None:
        self._depth = 0
        self._since: float | None = None
        self._total = 0.0
        self._resumed = asyncio.Event()
        self._resumed.set()

    @property
    def active(self) -> bool:
        return self._depth > 0

    def paused_seconds(self) -> float:
        """All paused time so far, including a pause still in progress."""
        running = time.monotonic() - self._since if self._since is not None else 0.0
        return self._total + running

    @contextmanager
    def paused(self) -> Iterator[None]:
        if self._depth == 0:
            self._since = time.monotonic()
            self._resumed.clear()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0 and self._since is not None:
                self._total += time.monotonic() - self._since
                self._since = None
                self._resumed.set()

    async def wait_resumed(self) -> None:
        await self._resumed.wait()
