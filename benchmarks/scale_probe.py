"""The event-loop lag probe of benchmarks/scale.py, in a process of its own.

``python -m benchmarks.scale_probe URL INTERVAL_S``: an ``initialize`` on an
already initialized connection every INTERVAL_S seconds (both servers answer it
at once with the same error), until its stdin closes; then it prints the round
trips, in seconds, as one JSON list.

Why a process of its own: in the process that drives the agents, the probe's
round trip waited for that process's own event loop as well, which at N = 100
runs 100 simulated agents at nearly a whole CPU: the figure then measured the
load generator more than the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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


def main() -> None:
    url, interval = sys.argv[1], float(sys.argv[2])
    print(json.dumps(asyncio.run(probe(url, interval))), flush=True)


if __name__ == "__main__":
    main()
