"""The event-loop lag probe of benchmarks/scale.py, in a process of its own.

``python -m benchmarks.scale_probe URL INTERVAL_S``: an ``initialize`` on an
already initialized connection every INTERVAL_S seconds (both servers answer it
at once with the same error), until its stdin closes; then it prints the round
trips, in seconds, as one JSON list.

Why a process of its own: in the process that drives the agents, the probe's
round trip waited for that process's own event loop as well, which at N = 100
runs 100 simulated agents at nearly a whole CPU: the figure then measured the
load generator more than the server. For the same reason it asks for a
real-time scheduling class where it may (root): on two CPUs shared with 1,000
agents, a probe at normal priority waited for a CPU itself, before and after
the server's answer. It sleeps between probes, so it takes almost no CPU from
anyone; the JSON says whether it got the class.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time

from benchmarks.client import BenchClient

__all__ = ["main"]


async def _stdin_closed() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()


async def probe(url: str, interval_s: float) -> list[float]:
    lags: list[float] = []
    client = await BenchClient.connect(url)
    stop = asyncio.ensure_future(_stdin_closed())
    try:
        while not stop.done():
            start = time.perf_counter()
            with contextlib.suppress(Exception):
                await client.call("initialize", {"clientName": "probe"})
            lags.append(time.perf_counter() - start)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(stop), interval_s)
    finally:
        stop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stop
        await client.close()
    return lags


def realtime() -> bool:
    """SCHED_FIFO at the lowest real-time priority, when allowed."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (PermissionError, OSError, AttributeError):
        return False
    return True


def main() -> None:
    url, interval = sys.argv[1], float(sys.argv[2])
    got_realtime = realtime()
    lags = asyncio.run(probe(url, interval))
    print(json.dumps({"lags": lags, "realtime": got_realtime}), flush=True)


if __name__ == "__main__":
    main()
