"""Owned background tasks: every task the package starts belongs to a ``TaskSet``.

asyncio keeps only a weak reference to a running task, so a task nobody holds can
be collected mid-flight, and one nobody awaits hides its exception until the
garbage collector prints it. A ``TaskSet`` holds its tasks until they finish,
logs a failure the moment it happens (with the task's name), and has one closing
rule: ``aclose`` cancels what is left and waits until it has stopped.

It is not ``asyncio.TaskGroup``: a TaskGroup cancels every sibling when one task
fails and re-raises in its owner, which is wrong for independent requests (one
failing handler must not cancel the connection's other requests). This is
anyio's and aiohttp's shape for the same job (a set of handler tasks cancelled
and awaited on shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["TaskSet"]

_T = TypeVar("_T")

_log = logging.getLogger("execserver.tasks")


class TaskSet:
    """The tasks one owner started, held until they finish.

    ``spawn`` starts a named task; ``adopt`` takes one started elsewhere (for
    instance by ``execserver.aio.eager.start_eagerly``); ``aclose`` cancels and
    awaits them all, and refuses new ones from then on. A task that raises is
    logged once, at ERROR with its traceback, unless its result is awaited by
    someone (``log_failures=False``: the caller sees the exception).
    """

    __slots__ = ("_closed", "_logger", "_name", "_tasks")

    def __init__(self, name: str, *, logger: logging.Logger | None = None) -> None:
        self._name = name
        self._logger = logger or _log
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(
        self,
        coro: Coroutine[Any, Any, _T],
        *,
        name: str,
        log_failures: bool = True,
    ) -> asyncio.Task[_T]:
        """Start ``coro`` as a task named ``<set>:<name>`` that this set owns."""
        if self._closed:
            coro.close()  # never started: no "was never awaited" warning
            raise RuntimeError(f"task set {self._name!r} is closed; cannot start {name!r}")
        task = asyncio.get_running_loop().create_task(coro, name=f"{self._name}:{name}")
        return self._hold(task, log_failures)

    def adopt(self, task: asyncio.Task[_T], *, log_failures: bool = True) -> asyncio.Task[_T]:
        """Own ``task``, started by other means; a closed set cancels it at once."""
        if self._closed:
            task.cancel()
        return self._hold(task, log_failures)

    def _hold(self, task: asyncio.Task[_T], log_failures: bool) -> asyncio.Task[_T]:
        self._tasks.add(task)
        task.add_done_callback(self._finished if log_failures else self._tasks.discard)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        failure = task.exception()  # also marks it retrieved
        if failure is not None:
            self._logger.error(
                "task %s failed", task.get_name(), exc_info=(type(failure), failure, None)
            )

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def __bool__(self) -> bool:
        return bool(self._tasks)

    @property
    def closed(self) -> bool:
        return self._closed

    def cancel(self) -> None:
        """Ask every task to stop, without waiting (for synchronous callbacks such as
        a transport's connection_lost); ``aclose`` later still awaits them."""
        for task in self._tasks:
            task.cancel()

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait (without cancelling) until every task has finished or ``timeout``
        passed; True when none is left. New tasks may still be spawned meanwhile."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self._tasks:
                    await asyncio.wait(list(self._tasks))
        return not self._tasks

    async def aclose(self) -> None:
        """Refuse new tasks, cancel the running ones and wait until they have stopped.

        A task that ignores cancellation is waited for all the same (as with
        asyncio.TaskGroup); the owner's own cancellation still propagates once they
        are done.
        """
        self._closed = True
        interrupted = False
        asked: set[asyncio.Task[Any]] = set()
        while self._tasks:
            pending = list(self._tasks)
            for task in pending:
                if task not in asked:  # once: a second cancel would cut its clean-up short
                    asked.add(task)
                    task.cancel()
            try:
                # wait, not gather: the owner's cancellation must not abandon tasks
                # that are still unwinding.
                await asyncio.wait(pending)
            except asyncio.CancelledError:
                interrupted = True
            for task in pending:
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: _finished logged it when it mattered
        if interrupted:
            raise asyncio.CancelledError
