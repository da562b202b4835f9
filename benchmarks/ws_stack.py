"""Does the websocket stack set the round-trip floor? The daemon as shipped
(its picows listener, server/transport_ws.py) against the same dispatch behind
an aiohttp listener (the daemon's listener before picows; a prototype, only
here), with the reference alongside — interleaved in one run, each figure
with the server tree's CPU per operation, driven by the lean client
(benchmarks/fast_client.py) so that the client's Python hides less.

    python -m benchmarks.ws_stack [--rounds N] [--reads N] [--calls N] [--placement P]
    python -m benchmarks.ws_stack serve-aiohttp     # the prototype server alone
    python -m benchmarks.ws_stack serve-floor       # the floor server alone

The prototype is what the aiohttp listener did per frame: a reader task
iterating ``receive()``, ``await Connection.handle_frame`` for each frame,
and answers written through ``WebSocketResponse.send_frame``, corked while
more answers follow in the same event-loop round (what server/coalesce.py
did for it). Without auth, Origin refusal, oversize close or pings: enough
to measure the listener's cost, not to ship.

``floor`` is the stack with no request work at all: picows on uvloop, each
frame's id read with msgspec and a canned answer of the right shape written
back (``serve-floor``). What it costs per operation is what no Python
daemon on this stack can go below; the daemon's figure minus it is what its
request handling costs on a real round trip (cold caches after every
wake-up), which a warm in-process loop understates several times.

``--placement same|split`` pins the server and the client to one CPU or to
two (benchmarks/placement.py); the default, ``free``, leaves both to the
scheduler.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks import figures
from benchmarks.placement import PLACEMENTS, cpus_needed, pinned
from benchmarks.server_cpu import tree_cpu_split
from scripts.servers import RunningServer, start_server, stop_process

KINDS = ("execserver", "aiohttp", "floor", "reference")

# The floor server's answers: the shapes the figures' clients read.
_FLOOR_ANSWERS = {
    "process/read": b'{"chunks":[{"seq":1,"stream":"stdout","chunk":"bGluZSAwCg=="}],'
    b'"nextSeq":2,"exited":true,"exitCode":0,"closed":true,"failure":null,'
    b'"sandboxDenied":false}',
    "fs/getMetadata": b'{"isDirectory":false,"isFile":true,"isSymlink":false,'
    b'"createdAtMs":0,"modifiedAtMs":0}',
}


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


async def _serve_floor() -> None:
    import msgspec
    from picows import WSFrame, WSListener, WSTransport, ws_create_server

    class Envelope(msgspec.Struct):
        id: int | None = None
        method: str = ""

    decode = msgspec.json.Decoder(Envelope).decode

    class Answerer(WSListener):
        def on_ws_connected(self, transport: WSTransport) -> None:
            self.write = transport.underlying_transport.write

        def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
            message = decode(frame.get_payload_as_bytes())
            if message.id is None:  # a notification
                return
            result = _FLOOR_ANSWERS.get(message.method, b"{}")
            payload = b'{"id":%d,"result":%s}' % (message.id, result)
            size = len(payload)
            header = bytes((0x81, size)) if size < 126 else bytes((0x81, 126)) + size.to_bytes(2)
            self.write(header + payload)

    server = await ws_create_server(lambda request: Answerer(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"ws://127.0.0.1:{port}\n")
    sys.stdout.flush()
    await server.serve_forever()


async def _start_prototype(kind: str) -> RunningServer:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.ws_stack",
        f"serve-{kind}",
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    url = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
    return RunningServer(kind=kind, url=url, process=proc)


async def _measure(
    kind: str, figure: str, reads: int, calls: int, placement: str = "free"
) -> dict[str, float]:
    async def run(server: RunningServer) -> dict[str, float]:
        with pinned(server.process.pid, None if placement == "free" else placement):
            user_before, system_before = tree_cpu_split(server.process.pid)
            if figure == "read_polling_lean":
                result = await figures.read_polling_lean(server.url, reads)
            else:
                result = await figures.pipelined_metadata_lean(server.url, calls, 64)
            user_after, system_after = tree_cpu_split(server.process.pid)
        user, system = user_after - user_before, system_after - system_before
        ops = result.pop("ops")
        result["server_cpu_us_per_op"] = (user + system) / ops * 1e6
        result["server_user_cpu_us_per_op"] = user / ops * 1e6
        return result

    if kind in ("aiohttp", "floor"):
        server = await _start_prototype(kind)
        try:
            return await run(server)
        finally:
            await stop_process(server.process)
    extra = ["--log-level", "warning"] if kind == "execserver" else []
    async with start_server(kind, extra=extra) as server:
        return await run(server)


async def compare(rounds: int, reads: int, calls: int, placement: str = "free") -> dict[str, Any]:
    report: dict[str, Any] = {}
    for figure in ("read_polling_lean", "pipelined_getMetadata_lean"):
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
        for r in range(rounds):
            order = KINDS if r % 2 == 0 else tuple(reversed(KINDS))
            for kind in order:
                samples[kind].append(await _measure(kind, figure, reads, calls, placement))
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
    parser.add_argument(
        "mode", nargs="?", default="compare", choices=["compare", "serve-aiohttp", "serve-floor"]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=10000)
    parser.add_argument("--calls", type=int, default=40000)
    parser.add_argument("--placement", choices=["free", *sorted(PLACEMENTS)], default="free")
    args = parser.parse_args()
    if args.mode in ("serve-aiohttp", "serve-floor"):
        import uvloop

        uvloop.run(_serve_aiohttp() if args.mode == "serve-aiohttp" else _serve_floor())
        return 0
    import json

    if args.placement != "free" and cpus_needed(args.placement) > len(os.sched_getaffinity(0)):
        parser.error(f"--placement {args.placement} needs {cpus_needed(args.placement)} CPUs")
    report = asyncio.run(compare(args.rounds, args.reads, args.calls, args.placement))
    print(
        json.dumps({f: {k: v for k, v in r.items() if k != "samples"} for f, r in report.items()})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
