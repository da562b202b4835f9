"""The benchmark figures. Each takes a server URL (and pid) and returns a dict
of measurements; the runner interleaves servers and computes ratios."""

from __future__ import annotations

import asyncio
import base64
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks import fast_client
from benchmarks.client import BenchClient, RpcFailure

WORK = Path(tempfile.gettempdir())
CWD = "file://" + str(WORK)
THIS_FILE_URI = "file://" + str(Path(__file__).resolve())
ENV = {"PATH": "/usr/bin:/bin"}
WORKSPACE_WRITE = {
    "permissions": {
        "type": "managed",
        "file_system": {
            "type": "restricted",
            "entries": [
                {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                {
                    "path": {"type": "special", "value": {"kind": "current_working_directory"}},
                    "access": "write",
                },
            ],
        },
        "network": "restricted",
    },
    "cwd": CWD,
    "workspaceRoots": [CWD],
    "windowsSandboxLevel": "disabled",
}


class ProcessWatcher:
    """Resolves a future per processId when its process/closed arrives."""

    def __init__(self, client: BenchClient) -> None:
        self.closed: dict[str, asyncio.Future[None]] = {}
        self.output_bytes = 0
        self.output_chunks = 0
        self.decode = True
        client.on_notification = self._on

    def expect(self, pid: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed[pid] = future
        return future

    def _on(self, method: str, params: dict[str, Any]) -> None:
        if method == "process/output":
            self.output_chunks += 1
            if self.decode:
                self.output_bytes += len(base64.b64decode(params["chunk"]))
        elif method == "process/closed":
            future = self.closed.pop(params["processId"], None)
            if future is not None and not future.done():
                future.set_result(None)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed_call(
    client: BenchClient, times: list[float], method: str, params: dict[str, Any]
) -> Any:
    """One call; its round trip is appended to ``times``."""
    start = time.perf_counter()
    result = await client.call(method, params)
    times.append(time.perf_counter() - start)
    return result


async def spawn_latency(url: str, n: int, sandboxed: bool) -> dict[str, float]:
    client = await BenchClient.connect(url)
    watcher = ProcessWatcher(client)
    times: list[float] = []
    try:
        for i in range(n):
            pid = f"s{i}"
            done = watcher.expect(pid)
            params: dict[str, Any] = {
                "processId": pid,
                "argv": ["true"],
                "cwd": CWD,
                "env": ENV,
                "tty": False,
            }
            if sandboxed:
                params["sandbox"] = WORKSPACE_WRITE
            start = time.perf_counter()
            await client.call("process/start", params)
            await asyncio.wait_for(done, 30)
            times.append(time.perf_counter() - start)
    finally:
        await client.close()
    return {
        "p50_ms": statistics.median(times) * 1e3,
        "p99_ms": pct(times, 0.99) * 1e3,
        "ops": n,
    }


BUSY_COMMAND = ["sh", "-c", "while :; do :; done"]
LAG_PROBE_INTERVAL_S = 0.005


async def spawn_among_busy_commands(url: str, busy: int, n: int) -> dict[str, float]:
    """``busy`` CPU-bound commands started through the server (a devbox where builds
    run), then ``n`` spawns of ``true`` one after another from another connection,
    while a third sends a request both servers answer at once (``initialize`` on an
    initialized connection) every 5 ms: how long a start takes, and how long any
    session's request waits meanwhile (each command leads a session of its own, a
    scheduling group of its own under autogroup, so a new child waits for a CPU)."""
    hog, spawner, probe = [await BenchClient.connect(url) for _ in range(3)]
    watcher = ProcessWatcher(spawner)
    lags: list[float] = []
    spawns: list[float] = []
    spawning = True

    async def probing() -> None:
        while spawning:
            start = time.perf_counter()
            try:
                await probe.call("initialize", {"clientName": "probe"})
            except RpcFailure:
                pass  # the expected answer: already initialized
            lags.append(time.perf_counter() - start)
            await asyncio.sleep(LAG_PROBE_INTERVAL_S)

    try:
        for i in range(busy):
            command = {"processId": f"busy{i}", "argv": BUSY_COMMAND, "cwd": CWD, "env": ENV}
            await hog.call("process/start", {**command, "tty": False})
        await asyncio.sleep(0.5)  # every busy command running
        prober = asyncio.ensure_future(probing())
        try:
            for i in range(n):
                pid = f"s{i}"
                done = watcher.expect(pid)
                await timed_call(
                    spawner,
                    spawns,
                    "process/start",
                    {"processId": pid, "argv": ["true"], "cwd": CWD, "env": ENV, "tty": False},
                )
                await asyncio.wait_for(done, 30)
        finally:
            spawning = False
            await prober
        for i in range(busy):
            await hog.call("process/terminate", {"processId": f"busy{i}"})
    finally:
        for client in (hog, spawner, probe):
            await client.close()
    return {
        "start_p50_ms": statistics.median(spawns) * 1e3,
        "start_p99_ms": pct(spawns, 0.99) * 1e3,
        "lag_p50_ms": statistics.median(lags) * 1e3,
        "lag_p99_ms": pct(lags, 0.99) * 1e3,
        "ops": n,
    }


async def concurrent_spawns(url: str, clients: int, per_client: int) -> dict[str, float]:
    conns = [await BenchClient.connect(url) for _ in range(clients)]

    async def worker(index: int, client: BenchClient) -> None:
        watcher = ProcessWatcher(client)
        for i in range(per_client):
            pid = f"c{index}-{i}"
            done = watcher.expect(pid)
            await client.call(
                "process/start",
                {"processId": pid, "argv": ["true"], "cwd": CWD, "env": ENV, "tty": False},
            )
            await asyncio.wait_for(done, 60)

    start = time.perf_counter()
    try:
        await asyncio.gather(*(worker(i, c) for i, c in enumerate(conns)))
    finally:
        elapsed = time.perf_counter() - start
        await asyncio.gather(*(c.close() for c in conns))
    return {"spawns_per_s": clients * per_client / elapsed, "ops": clients * per_client}


async def output_throughput(
    url: str, megabytes: int, *, sandboxed: bool = False
) -> dict[str, float]:
    client = await BenchClient.connect(url)
    watcher = ProcessWatcher(client)
    done = watcher.expect("out")
    size = megabytes * 1024 * 1024
    params: dict[str, Any] = {
        "processId": "out",
        "argv": ["head", "-c", str(size), "/dev/zero"],
        "cwd": CWD,
        "env": ENV,
        "tty": False,
    }
    if sandboxed:
        params["sandbox"] = WORKSPACE_WRITE
    cpu0 = time.process_time()
    start = time.perf_counter()
    try:
        await client.call("process/start", params)
        await asyncio.wait_for(done, 600)
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    if watcher.output_bytes != size:
        raise RuntimeError(f"received {watcher.output_bytes} of {size} bytes")
    return {
        "MB_per_s": size / elapsed / 1e6,
        "client_cpu_share": (time.process_time() - cpu0) / elapsed,
        "ops": megabytes,  # one operation = 1 MiB of output delivered
    }


async def read_polling(url: str, reads: int) -> dict[str, float]:
    """process/read cursor polling against a process that produced 256 chunks."""
    client = await BenchClient.connect(url)
    watcher = ProcessWatcher(client)
    watcher.decode = False
    done = watcher.expect("poll")
    try:
        await client.call(
            "process/start",
            {
                "processId": "poll",
                "argv": [
                    "sh",
                    "-c",
                    "i=0; while [ $i -lt 256 ]; do echo line $i; i=$((i+1)); done",
                ],
                "cwd": CWD,
                "env": ENV,
                "tty": False,
            },
        )
        await asyncio.wait_for(done, 30)
        start = time.perf_counter()
        cursor = 0
        for _ in range(reads):
            result = await client.call(
                "process/read", {"processId": "poll", "afterSeq": cursor, "maxBytes": 64}
            )
            cursor = result["nextSeq"] - 1
            if result["closed"] and not result["chunks"]:
                cursor = 0
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    return {"reads_per_s": reads / elapsed, "ops": reads}


async def pipelined_metadata(url: str, total: int, in_flight: int) -> dict[str, float]:
    client = await BenchClient.connect(url)
    path = THIS_FILE_URI
    sem = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with sem:
            await client.send_call("fs/getMetadata", {"path": path})

    start = time.perf_counter()
    try:
        await asyncio.gather(*(one() for _ in range(total)))
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    return {"calls_per_s": total / elapsed, "ops": total}


def make_file(megabytes: int) -> Path:
    path = WORK / f"execserver-bench-{megabytes}mb.bin"
    if not path.exists() or path.stat().st_size != megabytes * 1024 * 1024:
        path.write_bytes(os.urandom(megabytes * 1024 * 1024))
    return path


async def read_file(url: str, megabytes: int) -> dict[str, float]:
    path = make_file(megabytes)
    client = await BenchClient.connect(url)
    uri = "file://" + str(path)
    try:
        start = time.perf_counter()
        result = await client.call("fs/readFile", {"path": uri})
        whole = time.perf_counter() - start
        assert len(base64.b64decode(result["dataBase64"])) == path.stat().st_size
        await client.call("fs/open", {"handleId": "h", "path": uri})
        start = time.perf_counter()
        offset, block = 0, 1024 * 1024
        while True:
            part = await client.call(
                "fs/readBlock", {"handleId": "h", "offset": offset, "len": block}
            )
            got = len(base64.b64decode(part["chunk"]))
            offset += got
            if part["eof"]:
                break
        blocks = time.perf_counter() - start
        await client.call("fs/close", {"handleId": "h"})
        assert offset == path.stat().st_size
    finally:
        await client.close()
    size_mb = path.stat().st_size / 1e6
    return {
        "readFile_MB_per_s": size_mb / whole,
        "readBlock_MB_per_s": size_mb / blocks,
        "ops": 2 * megabytes,  # one operation = 1 MiB read (once whole, once by blocks)
    }


async def write_file(url: str, megabytes: int, later: int = 3) -> dict[str, float]:
    """fs/writeFile of ``megabytes`` MiB of random data, each timed to its answer:
    the server's first one (it sets up its buffers for messages that large), then
    ``later`` more, as a daemon that has been serving a while sees them."""
    data = os.urandom(megabytes * 1024 * 1024)
    payload = base64.b64encode(data).decode()
    target = WORK / f"execserver-bench-write-{megabytes}mb.bin"
    client = await BenchClient.connect(url)
    rates: list[float] = []
    try:
        for _ in range(1 + later):
            start = time.perf_counter()
            params = {"path": "file://" + str(target), "dataBase64": payload}
            await client.call("fs/writeFile", params)
            rates.append(len(data) / 1e6 / (time.perf_counter() - start))
            if target.read_bytes() != data:
                raise RuntimeError("the written file differs")
    finally:
        await client.close()
        target.unlink(missing_ok=True)
    result = {"writeFile_MB_per_s": rates[0], "ops": megabytes * len(rates)}
    if later:
        result["writeFile_later_MB_per_s"] = statistics.median(rates[1:])
    return result


async def small_files(url: str, calls: int) -> dict[str, float]:
    """``calls`` unsandboxed fs/readFile and fs/writeFile of 4 KiB each, one at a
    time, on one connection: what an agent's file tools wait on."""
    folder = WORK / "execserver-bench-small"
    folder.mkdir(exist_ok=True)
    for i in range(16):
        (folder / f"f{i}.txt").write_bytes(os.urandom(4096))
    payload = base64.b64encode(os.urandom(4096)).decode()
    client = await BenchClient.connect(url)
    reads: list[float] = []
    writes: list[float] = []
    try:
        for i in range(calls):
            read = {"path": f"file://{folder}/f{i % 16}.txt"}
            write = {"path": f"file://{folder}/w{i % 16}.txt", "dataBase64": payload}
            await read_then_write(client, (reads, read), (writes, write), 4096)
    finally:
        await client.close()
    return {**file_latencies(reads, writes), "ops": 2 * calls}


async def read_then_write(
    client: BenchClient,
    read: tuple[list[float], dict[str, Any]],
    write: tuple[list[float], dict[str, Any]],
    size: int,
) -> None:
    """One timed fs/readFile of a ``size``-byte file (checked), then one fs/writeFile."""
    result = await timed_call(client, read[0], "fs/readFile", read[1])
    if len(base64.b64decode(result["dataBase64"])) != size:
        raise RuntimeError("short read")
    await timed_call(client, write[0], "fs/writeFile", write[1])


def file_latencies(reads: list[float], writes: list[float]) -> dict[str, float]:
    return {
        "readFile_p50_ms": statistics.median(reads) * 1e3,
        "readFile_p99_ms": pct(reads, 0.99) * 1e3,
        "writeFile_p50_ms": statistics.median(writes) * 1e3,
    }


async def many_processes(url: str, pid: int, count: int) -> dict[str, float]:
    server = psutil.Process(pid)
    client = await BenchClient.connect(url)
    watcher = ProcessWatcher(client)
    rss_before = server.memory_info().rss
    try:
        start = time.perf_counter()
        for i in range(count):
            await client.call(
                "process/start",
                {
                    "processId": f"m{i}",
                    "argv": ["sleep", "300"],
                    "cwd": CWD,
                    "env": ENV,
                    "tty": False,
                },
            )
        started = time.perf_counter() - start
        rss_after = server.memory_info().rss
        closing = [watcher.expect(f"m{i}") for i in range(count)]
        start = time.perf_counter()
        for i in range(count):
            await client.call("process/terminate", {"processId": f"m{i}"})
        await asyncio.wait_for(asyncio.gather(*closing), 120)
        terminated = time.perf_counter() - start
    finally:
        await client.close()
    return {
        "start_all_s": started,
        "terminate_all_s": terminated,
        "rss_before_MB": rss_before / 1e6,
        "rss_after_MB": rss_after / 1e6,
        "ops": 2 * count,  # starts and terminates
    }


async def idle_rss(url: str, pid: int) -> dict[str, float]:
    client = await BenchClient.connect(url)
    await client.call("environment/status", None)
    rss = psutil.Process(pid).memory_info().rss
    await client.close()
    return {"idle_rss_MB": rss / 1e6}


async def slow_reader_rss(url: str, pid: int, megabytes: int) -> dict[str, float]:
    """RSS of the daemon while output flows to a client that reads slowly."""
    server = psutil.Process(pid)
    client = await BenchClient.connect(url)
    watcher = ProcessWatcher(client)
    watcher.decode = False
    done = watcher.expect("slow")
    peak = server.memory_info().rss
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, server.memory_info().rss)
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample())
    # About 20 MB/s: 64 frames of 8 KiB, then a 25 ms pause.
    client.pause_every, client.pause_s = 64, 0.025
    try:
        await client.call(
            "process/start",
            {
                "processId": "slow",
                "argv": ["head", "-c", str(megabytes * 1024 * 1024), "/dev/zero"],
                "cwd": CWD,
                "env": ENV,
                "tty": False,
            },
        )
        await asyncio.wait_for(done, 1800)
    finally:
        stop.set()
        await sampler
        await client.close()
    return {"peak_rss_MB": peak / 1e6}


async def read_polling_lean(url: str, reads: int) -> dict[str, float]:
    """read_polling driven by the callback-only picows client (benchmarks/fast_client.py)."""
    client = await fast_client.FastClient.connect(url)
    try:
        await client.call(
            "process/start",
            {
                "processId": "poll",
                "argv": [
                    "sh",
                    "-c",
                    "i=0; while [ $i -lt 256 ]; do echo line $i; i=$((i+1)); done",
                ],
                "cwd": CWD,
                "env": ENV,
                "tty": False,
            },
        )
        deadline = time.monotonic() + 30
        while not (await client.call("process/read", {"processId": "poll", "waitMs": 1000}))[
            "closed"
        ]:
            if time.monotonic() > deadline:
                raise TimeoutError("the polled process did not close")
        start = time.perf_counter()
        await fast_client.read_polling(client, "poll", reads)
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    return {"reads_per_s": reads / elapsed, "ops": reads}


async def pipelined_metadata_lean(url: str, total: int, in_flight: int) -> dict[str, float]:
    """pipelined_metadata driven by the callback-only picows client."""
    client = await fast_client.FastClient.connect(url)
    try:
        start = time.perf_counter()
        await fast_client.pipelined(
            client, "fs/getMetadata", {"path": THIS_FILE_URI}, total, in_flight
        )
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    return {"calls_per_s": total / elapsed, "ops": total}
