"""Process inspection for the tests: a server's descendants, processes found by
an argument of theirs, bounded waits."""

from __future__ import annotations

import asyncio
import uuid

import psutil


def live_descendants(pid: int) -> list[psutil.Process]:
    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


async def wait_until(predicate: object, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout`` passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if predicate():  # type: ignore[operator]
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(interval)


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 1e6


def num_fds(pid: int) -> int:
    return psutil.Process(pid).num_fds()


def sleep_marker() -> str:
    """A unique ``sleep`` duration (300 s and up), so psutil finds exactly the
    remote process a test started by its command line."""
    return f"{300 + uuid.uuid4().int % 10_000}.{uuid.uuid4().int % 1000:03d}"


def processes_with(arg: str) -> list[psutil.Process]:
    """Live (not zombie) processes with ``arg`` on their command line."""
    return [
        proc
        for proc in psutil.process_iter(["cmdline", "status"])
        if arg in (proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE
    ]


async def gone(arg: str, timeout: float = 10.0) -> bool:
    """Polls (bounded) until no live process has ``arg`` on its command line."""
    return await wait_until(lambda: not processes_with(arg), timeout, interval=0.05)
