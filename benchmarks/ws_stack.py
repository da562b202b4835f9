"""Does the websocket stack set the round-trip floor? The daemon as shipped
(its picows listener, server/transport_ws.py) against the same dispatch behind
an aiohttp listener (the daemon's listener before picows; a prototype, only
here), with the reference alongside — interleaved in one run, each figure
with the server tree's CPU per operation, driven by the lean client
(benchmarks/fast_client.py) so that the client's Python hides less.

    python -m benchmarks.ws_stack [--rounds N] [--reads N] [--calls N]
    python -m benchmarks.ws_stack serve-aiohttp     # the prototype server alone

The prototype is what the aiohttp listener did per frame: a reader task
iterating ``receive()``, ``await Connection.handle_frame`` for each frame,
and answers written through ``WebSocketResponse.send_frame``, corked while
more answers follow in the same event-loop round (what server/coalesce.py
did for it). Without auth, Origin refusal, oversize close or pings: enough
to measure the listener's cost, not to ship.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks import figures
from benchmarks.server_cpu import tree_cpu_seconds
from scripts.servers import RunningServer, start_server, stop_process

KINDS = ("execserver", "aiohttp", "reference")


def _corked_sender(ws: Any, sock: Any) -> Callable[[bytes], Awaitable[None]]:
    """The aiohttp listener's writer: the first frame of a loop round goes out at
    once, later small ones in the same round cork the socket until it ends."""
    from aiohttp import WSMsgType

    loop = asyncio.get_running_loop()
    sent = 0
    corked = False

    def end_round() -> None:
        nonlocal sent, corked
        sent = 0
        if corked:
            corked = False
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)

    async def send(frame: bytes) -> None:
        nonlocal sent, corked
        if sent == 0:
            loop.call_soon(end_round)
        elif not corked and len(frame) < 4096:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                corked = True
        sent += 1
        await ws.send_frame(frame, WSMsgType.TEXT)

    return send


async def _serve_aiohttp() -> None:
    from aiohttp import WSMsgType, web

    from execserver.config import ServerConfig
    from execserver.sandbox.backend import SandboxBackend
    from execserver.server.connection import Connection
    from execserver.server.runner import build_runtime, probe_sandbox_backend

    runtime = build_runtime(ServerConfig())
    backend = await probe_sandbox_backend(runtime.config)
    runtime.sandbox_backend = backend
    runtime.resources.provide(SandboxBackend, backend)

    async def endpoint(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(
            max_msg_size=runtime.config.max_message_bytes, heartbeat=None, compress=False
        )
        await ws.prepare(request)
        assert request.transport is not None
        sock = request.transport.get_extra_info("socket")
        conn = Connection(runtime, _corked_sender(ws, sock), peer="aiohttp", parse_error_prefix="")
        try:
            async for msg in ws:
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    await conn.handle_frame(msg.data)
        finally:
            await conn.aclose()
        return ws

    app = web.Application()
    app.router.add_get("/", endpoint)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    sys.stdout.write(f"ws://127.0.0.1:{port}\n")
    sys.stdout.flush()
    await asyncio.Event().wait()


async def _start_aiohttp() -> RunningServer:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.ws_stack",
        "serve-aiohttp",
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    url = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
    return RunningServer(kind="aiohttp", url=url, process=proc)


async def _measure(kind: str, figure: str, reads: int, calls: int) -> dict[str, float]:
    async def run(server: RunningServer) -> dict[str, float]:
        before = tree_cpu_seconds(server.process.pid)
        if figure == "read_polling_lean":
            result = await figures.read_polling_lean(server.url, reads)
        else:
            result = await figures.pipelined_metadata_lean(server.url, calls, 64)
        cpu = tree_cpu_seconds(server.process.pid) - before
        ops = result.pop("ops")
        result["server_cpu_us_per_op"] = cpu / ops * 1e6
        return result

    if kind == "aiohttp":
        server = await _start_aiohttp()
        try:
            return await run(server)
        finally:
            await stop_process(server.process)
    extra = ["--log-level", "warning"] if kind == "execserver" else []
    async with start_server(kind, extra=extra) as server:
        return await run(server)


async def compare(rounds: int, reads: int, calls: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for figure in ("read_polling_lean", "pipelined_getMetadata_lean"):
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
        for r in range(rounds):
            order = KINDS if r % 2 == 0 else tuple(reversed(KINDS))
            for kind in order:
                samples[kind].append(await _measure(kind, figure, reads, calls))
        report[figure] = {
            kind: {
                key: statistics.median(s[key] for s in samples[kind]) for key in samples[kind][0]
            }
            for kind in KINDS
        }
        report[figure]["samples"] = samples
        for kind in KINDS:
            print(figure, kind, report[figure][kind], flush=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", nargs="?", default="compare", choices=["compare", "serve-aiohttp"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=10000)
    parser.add_argument("--calls", type=int, default=40000)
    args = parser.parse_args()
    if args.mode == "serve-aiohttp":
        import uvloop

        uvloop.run(_serve_aiohttp())
        return 0
    import json

    report = asyncio.run(compare(args.rounds, args.reads, args.calls))
    print(
        json.dumps({f: {k: v for k, v in r.items() if k != "samples"} for f, r in report.items()})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
