"""Shared bits of the reliability suite: server process inspection."""

from __future__ import annotations

import asyncio

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
