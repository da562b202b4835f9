"""A shard of benchmarks/scale.py's simulated agents, in a process of its own.

``python -m benchmarks.scale_crowd`` reads one JSON line on stdin (the server's
URL, the agents' workspaces and the level's timing), then talks with the
harness in lines:

* it connects its agents and starts them; they warm up (their operations are
  not recorded) until each has made one whole pass and the random pause after
  it (``Agent._stagger``), or ``warmup`` seconds have passed; then it prints
  ``warm N`` (N agents made their pass);
* on ``go`` from the harness it opens the measured window for ``duration``
  seconds, gives the operations under way at its end ``grace`` seconds, counts
  the rest as unfinished, and prints one JSON line: every agent's statistics.

Why the agents are not in the harness's process: agents do not live on the
machine that runs the server (that is what the server is for), but here they
share its two CPUs. At N = 1,000 one process of agents is a whole CPU by itself,
and its event loop, not the server, set the latencies it measured. So the agents
run in ``shards`` processes, at a nice value (``nice``) the same for both
servers; the harness's own process (which starts the servers, samples them and
runs the loop-lag probe) keeps its priority.

Why nice 0 (benchmarks/scale.py ``AGENTS_NICE``): all the agents of a level at
N = 1,000 take 0.12-0.17 of a CPU (both processes, /proc/PID/stat every 10 s),
so their priority takes little from the server, while every latency they
measure includes their own lateness. Measured at N = 1,000 (execserver alone,
one level each, docs/scale.md): the agents' own loop lag p99 was 95-160 ms at
nice 10, 40-62 at 5, 17-20 at 0, and the polls' p99 (an answer the server gives
at once) followed it (91-187, 54-76, 34-44 ms), while the server's loop lag did
not (70-130, 58-89, 55-80 ms). At nice 10 the polls measured the agents.

Where the kernel shares CPU time between sessions before threads (autogroup,
sched(7): on when the tasks are in no CPU cgroup of their own), a nice value
orders only the threads of one session. So each agents' process leads a session
too (``Crowd.start``) and gives that session the same nice value
(``lower_autogroup``): with the agents below the servers (nice 10, earlier), the
nice value alone ranked them only below the harness and the server's own
process (all in the harness's session), not below the server's helpers and
commands, each a session of its own (docs/scale.md has the figures).
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.scale_agent import Agent, Window

__all__ = ["lower_autogroup", "main"]

CONNECT_CONCURRENCY = 50
# How often the crowd looks at its own event loop's lateness during the window.
OWN_LAG_INTERVAL_S = 0.05


async def _bounded(limit: asyncio.Semaphore, coro: Any) -> Any:
    async with limit:
        return await coro


async def _line(reader: asyncio.StreamReader) -> str:
    return (await reader.readline()).decode().strip()


async def _own_lag(lags: list[float]) -> None:
    """How late this process's own loop wakes for a timer, until cancelled: an
    agent's measured round trip includes this wait (the agents share the server's
    CPUs), so a latency near it is the load generator's, not the server's."""
    while True:
        before = time.perf_counter()
        await asyncio.sleep(OWN_LAG_INTERVAL_S)
        lags.append(time.perf_counter() - before - OWN_LAG_INTERVAL_S)


async def crowd(spec: dict[str, Any], commands: asyncio.StreamReader) -> dict[str, Any]:
    secret = Path(spec["secret"])
    agents = [
        Agent(spec["url"], index, Path(w), secret)
        for index, w in zip(spec["indices"], spec["workspaces"], strict=True)
    ]
    window = Window()
    warmed = [asyncio.Event() for _ in agents]
    runs: list[asyncio.Task[None]] = []
    own_lags: list[float] = []
    watchers: list[asyncio.Task[None]] = []
    limit = asyncio.Semaphore(CONNECT_CONCURRENCY)
    try:
        await asyncio.gather(*(_bounded(limit, a.connect()) for a in agents))
        runs = [
            asyncio.ensure_future(agent.run(window, spec["think"], done))
            for agent, done in zip(agents, warmed, strict=True)
        ]
        # The warm-up: one unrecorded pass each (helpers started, buffers
        # grown), bounded: a server that cannot give every agent one pass in
        # `warmup` seconds is measured as it then is, its backlog included.
        waiting = [asyncio.ensure_future(done.wait()) for done in warmed]
        _, late = await asyncio.wait(waiting, timeout=spec["warmup"])
        for waiter in late:
            waiter.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        print(f"warm {sum(done.is_set() for done in warmed)}", flush=True)
        if await _line(commands) != "go":
            raise RuntimeError("the harness did not say go")
        window.open(spec["duration"])
        watchers.append(asyncio.ensure_future(_own_lag(own_lags)))
        # After the window an agent starts no pass but the one whole pass it still
        # owes (its pass under way at the opening ended after the closing); the
        # passes under way get `grace` seconds.
        _, cut = await asyncio.wait(runs, timeout=spec["duration"] + spec["grace"])
        now = time.perf_counter()
        for agent in agents:
            agent.censor(now)
        for task in cut:
            task.cancel()
        await asyncio.gather(*cut, return_exceptions=True)
    finally:
        for task in [*runs, *watchers]:
            task.cancel()
        await asyncio.gather(*runs, *watchers, return_exceptions=True)
        await asyncio.gather(*(a.close() for a in agents), return_exceptions=True)
    return {"agents": [asdict(agent.stats) for agent in agents], "own_lags": own_lags}


def lower_autogroup(nice: int, path: str = "/proc/self/autogroup") -> bool:
    """Give this process's autogroup (its session's) the nice value ``nice``; False
    where the kernel has no autogroup or refuses."""
    for _ in range(20):
        try:
            with open(path, "w") as group:
                group.write(str(nice))
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                return False
            # Without CAP_SYS_ADMIN the kernel takes one such change per 100 ms.
            time.sleep(0.15)
    return False


async def _main() -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    spec = json.loads(await _line(commands))
    grouped = False
    if spec.get("nice") is not None:
        os.nice(spec["nice"])
        # Off the loop: the kernel may ask for a retry 100 ms later (lower_autogroup).
        grouped = await asyncio.to_thread(lower_autogroup, spec["nice"])
    return {**await crowd(spec, commands), "autogroup_niced": grouped}


def main() -> None:
    result = asyncio.run(_main())
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
