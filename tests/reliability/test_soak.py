"""Soak: mixed load (processes, output, stdin, fs, resumes) for a bounded time
on loopback; the report lists errors (must be 0), the RSS trend and fds."""

from __future__ import annotations

import asyncio
import base64
import random
import tempfile
from pathlib import Path
from typing import Any

from execserver.config import ServerConfig
from tests.reliability.scale import pick
from tests.support.procinfo import live_descendants, num_fds, rss_mb, wait_until
from tests.support.rpc import RpcClient, connect
from tests.support.servers import start_server

# `make test`: 5 s of warm-up and 5 s of load, a smoke of the full 10 minutes (the
# suite's time is CPU-bound, and this runs alone after the parallel part).
DURATION_S = pick(ci=10, full=600)
WORKERS = 6
# The most the daemon's bounded buffers can hold at once: every worker's
# connection with a full outbound queue of 8 KiB output frames (~11 KB each
# once base64-encoded and framed). The allocator keeps the pages of that
# high-water mark after the frames are freed, so a settled RSS may rise by up
# to this much between two phases without anything leaking.
BUFFER_BOUND_MB = WORKERS * ServerConfig().outbound_queue_messages * 11_000 / 1e6


async def _worker(
    url: str, index: int, stop: asyncio.Event, errors: list[str], ops: list[int], work: Path
) -> None:
    rng = random.Random(index)
    n = 0
    while not stop.is_set():
        async with connect(url, handshake=False) as peer:
            await peer.handshake()
            for _ in range(rng.randint(5, 30)):
                if stop.is_set():
                    break
                n += 1
                try:
                    await _one_op(peer, rng, f"{index}-{n}", work)
                    ops[index] += 1
                except Exception as exc:  # every failure is counted and reported
                    errors.append(f"worker {index} op {n}: {type(exc).__name__}: {exc}")


async def _check(reply: dict[str, Any]) -> dict[str, Any]:
    if "error" in reply:
        raise RuntimeError(reply["error"])
    result: dict[str, Any] = reply["result"]
    return result


async def _drain_until_closed(peer: RpcClient, pid: str) -> bytes:
    out = bytearray()
    while True:
        msg = await peer.recv(timeout=30)
        params = msg.get("params", {})
        if params.get("processId") != pid:
            continue
        if msg["method"] == "process/output":
            out += base64.b64decode(params["chunk"])
        elif msg["method"] == "process/closed":
            return bytes(out)


async def _one_op(peer: RpcClient, rng: random.Random, tag: str, work: Path) -> None:
    kind = rng.choice(["echo", "cat", "burst", "fs", "read"])
    if kind == "echo":
        await _check(
            await peer.call(
                "process/start",
                {
                    "processId": tag,
                    "argv": ["echo", tag],
                    "cwd": "file:///tmp",
                    "env": {},
                    "tty": False,
                },
            )
        )
        got = await _drain_until_closed(peer, tag)
        if got != f"{tag}\n".encode():
            raise AssertionError(f"echo output {got!r}")
    elif kind == "cat":
        await _check(
            await peer.call(
                "process/start",
                {
                    "processId": tag,
                    "argv": ["cat"],
                    "cwd": "file:///tmp",
                    "env": {},
                    "tty": False,
                    "pipeStdin": True,
                },
            )
        )
        await _check(
            await peer.call(
                "process/write",
                {"processId": tag, "chunk": base64.b64encode(b"ping\n").decode(), "writeId": "1"},
            )
        )
        await _check(await peer.call("process/signal", {"processId": tag, "signal": "interrupt"}))
        await _drain_until_closed(peer, tag)
    elif kind == "burst":
        size = rng.randint(1, 2_000_000)
        await _check(
            await peer.call(
                "process/start",
                {
                    "processId": tag,
                    "argv": ["head", "-c", str(size), "/dev/zero"],
                    "cwd": "file:///tmp",
                    "env": {},
                    "tty": False,
                },
            )
        )
        got = await _drain_until_closed(peer, tag)
        if len(got) != size:
            raise AssertionError(f"burst got {len(got)} of {size} bytes")
    elif kind == "fs":
        path = f"file://{work}/{tag}.txt"
        data = base64.b64encode(tag.encode()).decode()
        await _check(await peer.call("fs/writeFile", {"path": path, "dataBase64": data}))
        read = await _check(await peer.call("fs/readFile", {"path": path}))
        if read["dataBase64"] != data:
            raise AssertionError("fs round trip")
        await _check(await peer.call("fs/remove", {"path": path}))
    else:
        await _check(await peer.call("environment/status"))


async def _run_load(url: str, seconds: float, work: Path, errors: list[str]) -> int:
    """WORKERS clients for ``seconds``; returns the number of ops done."""
    stop = asyncio.Event()
    ops = [0] * WORKERS
    tasks = [
        asyncio.ensure_future(_worker(url, i, stop, errors, ops, work)) for i in range(WORKERS)
    ]
    try:
        await asyncio.sleep(seconds)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    return sum(ops)


async def _settled(pid: int) -> tuple[float, int]:
    """RSS and fds once every child is gone and the exited-process retention is over."""
    assert await wait_until(lambda: not live_descendants(pid), timeout=30)
    await asyncio.sleep(3)  # exited-process retention (2 s)
    return rss_mb(pid), num_fds(pid)


async def test_soak_mixed_load_has_no_errors_and_no_growth() -> None:
    # What is measured: the settled RSS (no child left, retention over) after a
    # warm-up under the same load, against the settled RSS after as much load again;
    # not against a sample taken early in the run. While it works the daemon holds
    # bounded buffers: up to 1024 queued frames per connection (~11 KB each for an
    # 8 KiB output chunk) when this client, starved of CPU on a busy machine, reads
    # slower than the children write: 6 x 1024 x 11 KB is ~68 MB (BUFFER_BOUND_MB),
    # what a busy 2-core host showed. The allocator keeps the pages of that
    # high-water mark after the frames are freed, and the mark follows the
    # machine's load, not the op count.
    # A leak grows with the ops, so it shows between the two settled points too,
    # after the warm-up has already paid for most of the mark. (Sessions of closed
    # connections are kept for the session TTL, 80 s: small next to the bound.)
    work = Path(tempfile.mkdtemp(prefix="es-soak-"))
    async with start_server(
        "execserver", extra=["--log-level", "warning", "--exited-process-retention", "2"]
    ) as server:
        pid = server.process.pid
        errors: list[str] = []
        warm_ops = await _run_load(server.url, DURATION_S / 2, work, errors)
        warm_rss, warm_fds = await _settled(pid)
        ops = await _run_load(server.url, DURATION_S / 2, work, errors)
        final_rss, final_fds = await _settled(pid)
    print(f"\nsoak {DURATION_S}s: {warm_ops} + {ops} ops, {len(errors)} errors")
    print(f"  after warm-up: rss={warm_rss:6.1f} MB fds={warm_fds}")
    print(f"  after load:    rss={final_rss:6.1f} MB fds={final_fds}")
    assert not errors, errors[:5]
    assert warm_ops > 0 and ops > 0
    # 46 MB once under a loaded CI run (20 s then); 6 MB over 4x the ops on a quiet one.
    assert final_rss - warm_rss < BUFFER_BOUND_MB, "RSS grew beyond what bounded buffers hold"
    assert final_fds <= warm_fds + 5, "fds keep growing under steady load"
