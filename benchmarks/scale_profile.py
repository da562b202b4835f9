"""A profile of execserver at the knee of benchmarks/scale.py: py-spy attached
to the daemon for the measured window (sampling from outside, so the daemon
runs its own code unchanged), its collapsed stacks reduced to the functions
that hold the most samples, by their own time and with what they call.

Without py-spy (it is not a dependency) the profile is skipped and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["profile_at", "py_spy", "top_costs"]

RATE_HZ = 100
TOP = 15


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return found if Path(found).exists() else None


@contextlib.asynccontextmanager
async def recording(program: str, pid: int, out: Path) -> AsyncIterator[None]:
    """py-spy sampling ``pid`` (every thread, idle frames left out) until the block ends."""
    proc = await asyncio.create_subprocess_exec(
        program,
        "record",
        "--pid",
        str(pid),
        "--rate",
        str(RATE_HZ),
        "--format",
        "raw",
        "--nonblocking",
        "--output",
        str(out),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    await asyncio.sleep(0.5)  # attached
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on ^C
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        if not await asyncio.to_thread(out.exists):
            raise RuntimeError(f"py-spy wrote nothing: {err.decode()[-500:]}")


def _frame_name(frame: str) -> str:
    # py-spy raw frames: "function (path/to/file.py:line)"; the line is left
    # out so that a function is one entry.
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path = where.rsplit(":", 1)[0]
    for marker in ("/execserver/", "/site-packages/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


def top_costs(collapsed: str, top: int = TOP) -> dict[str, Any]:
    """Functions by self samples and by inclusive samples, from py-spy's raw output."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";")[1:]]  # [0] is the thread
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count

    def share(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": name, "share": n / total, "samples": n}
            for name, n in counter.most_common(top)
        ]

    return {"samples": total, "self": share(own), "inclusive": share(inclusive)}


async def profile_at(
    agents: int,
    duration: float,
    think: float,
    run_level: Callable[[Callable[[int], Any]], Awaitable[dict[str, Any]]],
    out: Path,
) -> dict[str, Any]:
    """One more execserver level of ``agents`` agents, py-spy recording its window."""
    program = py_spy()
    if program is None:
        return {"skipped": "py-spy is not installed (pip install py-spy)"}
    out.parent.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(out.unlink, missing_ok=True)
    level = await run_level(lambda pid: recording(program, pid, out))
    costs = top_costs(await asyncio.to_thread(out.read_text))
    return {
        "agents": agents,
        "duration_s": duration,
        "think_s": think,
        "rate_hz": RATE_HZ,
        "raw": out.name,
        "level": {
            k: level[k]
            for k in ("throughput_ops_per_s", "loop_lag_p99_ms", "server_cpu_share", "errors_total")
        },
        **costs,
    }
