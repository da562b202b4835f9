"""Per-process limits, measured: the CPU share a busy loop gets under --process-cpu-max,
what the cgroup placement costs per spawn, and /proc scan vs psutil for the tree sweep.

    python -m benchmarks.bench_containment [--seconds 4]

Needs a host that delegates cgroups (see ``execserver doctor``). CPU shares are
the tree's CPU seconds from its cgroup (the audit record's ``cpuS``) over its
wall time; unlimited runs beside them show what the machine gave without a limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.client import BenchClient
from execserver.processes.tree import read_proc_table
from scripts.servers import start_server

RESULT_FILE = Path(__file__).resolve().parent / "results" / "containment.json"
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
BUSY = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


async def run(client: BenchClient, process_id: str, argv: list[str], timeout: float = 30) -> None:
    """Start ``argv`` and wait for its process/closed notification."""
    closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_notification(method: str, params: dict[str, Any]) -> None:
        if method == "process/closed" and params.get("processId") == process_id:
            if not closed.done():
                closed.set_result(None)

    client.on_notification = on_notification
    params = {"processId": process_id, "argv": argv, "cwd": "file:///tmp", "env": BASE_ENV}
    await client.call("process/start", {**params, "tty": False})
    await asyncio.wait_for(closed, timeout)


async def cpu_share(limit: float | None, loops: int, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        audit = Path(tmp) / "audit.jsonl"
        # The unlimited run still gets a cgroup (a pids limit) so both are measured alike.
        flags = ["--audit-log", str(audit), "--process-pids-max", "4096"]
        if limit is not None:
            flags += ["--process-cpu-max", str(limit)]
        script = " & ".join([f"{sys.executable} -c '{BUSY.format(s=seconds)}'"] * loops)
        async with start_server("execserver", flags) as server:
            c = await BenchClient.connect(server.url)
            try:
                await run(c, "busy", ["sh", "-c", f"{script}; wait"], timeout=seconds * 10 + 30)
            finally:
                await c.close()
        record = next(
            json.loads(line)
            for line in audit.read_text().splitlines()
            if json.loads(line)["event"] == "process.exit"
        )
    share = record["cpuS"] / record["wallS"]
    return {"cpu_s": record["cpuS"], "wall_s": record["wallS"], "cores": share}


async def spawn_ms(flags: list[str], n: int) -> float:
    async with start_server("execserver", flags) as server:
        c = await BenchClient.connect(server.url)
        try:
            await run(c, "warm", ["true"])
            times = []
            for i in range(n):
                start = time.perf_counter()
                await run(c, f"t{i}", ["true"])
                times.append(time.perf_counter() - start)
        finally:
            await c.close()
    return statistics.median(times) * 1e3


def sweep_ms(n: int) -> dict[str, float]:
    def proc_scan() -> None:
        read_proc_table().children  # noqa: B018 - builds the index the sweep uses

    def psutil_scan() -> None:
        index: dict[int, list[int]] = {}
        for p in psutil.process_iter(["ppid", "create_time"]):
            index.setdefault(p.info["ppid"], []).append(p.pid)

    out = {}
    for name, fn in (("proc_scan", proc_scan), ("psutil_process_iter", psutil_scan)):
        times = []
        for _ in range(n):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times) * 1e3
    out["processes"] = float(len(psutil.pids()))
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--spawns", type=int, default=50)
    args = parser.parse_args()
    results: dict[str, object] = {}
    for label, limit, loops in (
        ("1 loop, unlimited", None, 1),
        ("1 loop, --process-cpu-max 0.25", 0.25, 1),
        ("2 loops, unlimited", None, 2),
        ("2 loops, --process-cpu-max 0.5", 0.5, 2),
        ("2 loops, --process-cpu-max 1.5", 1.5, 2),
    ):
        results[label] = await cpu_share(limit, loops, args.seconds)
        print(label, results[label], flush=True)
    for label, flags in (
        ("spawn true, no limits (ms)", []),
        (
            "spawn true, --process-memory-max 2G --process-pids-max 512 (ms)",
            [
                "--process-memory-max",
                "2G",
                "--process-pids-max",
                "512",
            ],
        ),
    ):
        results[label] = await spawn_ms(flags, args.spawns)
        print(label, results[label], flush=True)
    results["tree sweep (ms)"] = sweep_ms(30)
    print("tree sweep (ms)", results["tree sweep (ms)"])
    results["load average"] = list(os.getloadavg())
    results["cpus"] = os.cpu_count() or 0
    RESULT_FILE.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
