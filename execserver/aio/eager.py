"""Running a coroutine's first step at once, in the caller's stack.

The daemon answers a request that needs no wait without a task (and without the
loop iteration a task costs); when it does wait, the rest goes on as a task.
Python 3.12 has this built in (``eager_start``); on 3.11 the first step is
driven by hand and the suspended coroutine is wrapped so that a task can carry
on from where it stopped (``_Resumed``).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["resumed", "start_eagerly"]


def start_eagerly(
    loop: asyncio.AbstractEventLoop, serving: Coroutine[Any, Any, None]
) -> asyncio.Task[None] | None:
    """Run ``serving`` up to its first wait; None when it finished, else the task that
    goes on from there. On Python 3.11 that first step runs while the caller's task
    is the current task, so ``serving`` must not start an asyncio.timeout/TaskGroup
    (or read asyncio.current_task()) before its first wait; 3.12+ has eager tasks,
    which make it its own current task from the first step."""
    if sys.version_info >= (3, 12):
        task = asyncio.Task(serving, loop=loop, eager_start=True)
        return None if task.done() else task
    context = contextvars.copy_context()
    try:
        awaiting = context.run(serving.send, None)
    except StopIteration:
        return None
    return loop.create_task(_Resumed(serving, awaiting), context=context)


def resumed(serving: Coroutine[Any, Any, None], awaiting: Any) -> Coroutine[Any, Any, None]:
    """``serving``, which was driven by hand (``send(None)``) until it yielded
    ``awaiting``, as a coroutine a task can run from there."""
    return _Resumed(serving, awaiting)


class _Resumed(Coroutine[Any, Any, None]):
    """``serving``, already suspended on ``awaiting``, as a coroutine a task can run: its
    first step yields ``awaiting`` again (which the task then waits on), the rest is
    ``serving``'s own. A cancellation that comes before that first step still reaches
    ``serving``, so its clean-up runs."""

    def __init__(self, serving: Coroutine[Any, Any, None], awaiting: Any) -> None:
        self._serving = serving
        self._awaiting = awaiting
        self._started = False

    def send(self, value: Any) -> Any:
        if not self._started:
            self._started = True
            return self._awaiting
        return self._serving.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._started = True
        if val is None and tb is None:
            return self._serving.throw(typ)
        return self._serving.throw(typ, val, tb)

    def close(self) -> None:
        self._serving.close()

    def __await__(self) -> Generator[Any, None, None]:
        try:
            awaiting = self.send(None)
            while True:
                try:
                    value = yield awaiting
                except BaseException as exc:  # e.g. cancellation of the awaiting task
                    awaiting = self.throw(exc)
                else:
                    awaiting = self.send(value)
        except StopIteration:
            return
