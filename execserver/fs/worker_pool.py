"""The fs worker threads: blocking file calls run here, off the event loop.

Each job is handed over on a ``queue.SimpleQueue`` and its result comes back
with one ``loop.call_soon_threadsafe``. ``loop.run_in_executor`` with a
``ThreadPoolExecutor`` does the same work with more steps on both sides (a
``concurrent.futures.Future`` with its condition lock and callbacks, then
``asyncio.wrap_future`` chaining it to an asyncio future). Measured on this
project's 2-vCPU benchmark VM with uvloop: a no-op call's round trip (5 000
sequential calls, three runs) took 91, 100 and 157 µs through the executor
against 59, 61 and 131 µs here. The 4 KiB ``fs/writeFile`` benchmark figure
(medians of 5 and 7 interleaved rounds of 1 000 writes) went from 0.59 and
0.62 ms to 0.53 and 0.55 ms (the reference: 0.45 and 0.46 ms). Every fs call
that cannot be answered inline pays this hop once.

The pool grows one thread at a time, only when no worker is idle, up to its
cap, as ``ThreadPoolExecutor`` does. ``close`` stops the workers and joins
them; they are daemon threads all the same, and ``close`` waits only as long as
it is told to: a call stuck on a hung network mount must not hold the daemon's
exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["WorkerPool"]

T = TypeVar("T")

_PR_SET_NAME = 15

# (loop, future, func, args); None tells the worker that takes it to stop (close).
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class WorkerPool:
    """Up to ``max_workers`` threads running blocking calls for event loops."""

    def __init__(self, max_workers: int, name: str) -> None:
        self._max_workers = max_workers
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # One release per worker waiting for a job: a submit takes one, or starts a thread.
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._numbers = itertools.count()
        self._start_lock = threading.Lock()
        self._closed = False

    def submit(
        self, loop: asyncio.AbstractEventLoop, func: Callable[..., T], args: tuple[Any, ...]
    ) -> asyncio.Future[T]:
        """Run ``func(*args)`` in a worker; the future (of ``loop``) gets its result
        or exception. Cancelling the future before a worker takes the job skips
        the call; once running, the call completes and its result is dropped."""
        if self._closed:
            raise RuntimeError(f"worker pool {self._name!r} is closed")
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((loop, future, func, args))
        if not self._idle.acquire(blocking=False):
            self._add_worker()
        return future

    @property
    def thread_count(self) -> int:
        return len(self._threads)

    def close(self, timeout: float | None = None) -> bool:
        """Refuse new calls, let each worker finish the jobs queued before this and
        stop, and join them for up to ``timeout`` seconds in all; True when every
        worker has stopped (False: one is still inside a call, e.g. on a hung mount)."""
        with self._start_lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    def _add_worker(self) -> None:
        with self._start_lock:
            if self._closed or len(self._threads) >= self._max_workers:
                return
            thread = threading.Thread(
                target=self._work, name=f"{self._name}_{next(self._numbers)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _work(self) -> None:
        _name_os_thread(self._name)
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is None:  # close(): every job queued before it has been taken
                return
            loop, future, func, args = job
            # A read of the future's state from this thread: a cancel that lands just
            # after it only means the result is dropped in _settle.
            if future.cancelled():
                self._idle.release()
            else:
                try:
                    result = func(*args)
                except BaseException as exc:  # the caller's to handle, as from a direct call
                    self._idle.release()
                    _deliver(loop, future, None, exc)
                else:
                    # Idle before the caller can know: its next call must not start a thread.
                    self._idle.release()
                    _deliver(loop, future, result, None)
                    del result  # a 50 MB read must not stay alive while the thread waits
            del job, loop, future, func, args


def _name_os_thread(name: str) -> None:
    """The kernel's name for this thread (``/proc/PID/task/TID/comm``, what top and
    py-spy show; 15 bytes at most): a worker is told from the loop's own threads."""
    import ctypes  # the daemon has it loaded already (execserver/processes/tree.py)

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop was closed: nobody is waiting any more
        loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled while the call ran
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
