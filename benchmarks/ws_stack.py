"""Does the websocket stack set the round-trip floor? execserver's dispatch
behind aiohttp (the daemon as shipped) against the same dispatch behind a
picows listener (a prototype, only here), with the reference alongside —
interleaved in one run, each figure with the server tree's CPU per 1,000 ops.

    python -m benchmarks.ws_stack [--rounds N] [--reads N] [--calls N]
    python -m benchmarks.ws_stack serve-picows     # the prototype server alone

The prototype is what an adoption would look like at its core (frames in ->
``Connection.handle_frame``, ``send_frame`` -> ``transport.send``), without
auth, Origin refusal, oversize close or pings: enough to measure the floor,
not to ship. picows is needed only to run this (``pip install picows``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from typing import Any

from benchmarks import figures
from benchmarks.server_cpu import tree_cpu_seconds
from scripts.servers import RunningServer, start_server, stop_process


async def _serve_picows() -> None:
    from picows import (
        WSFrame,
        WSListener,
        WSMsgType,
        WSTransport,
        WSUpgradeRequest,
        ws_create_server,
    )

    from execserver.config import ServerConfig
    from execserver.server.connection import Connection
    from execserver.server.runner import build_runtime

    runtime = build_runtime(ServerConfig())

    class Listener(WSListener):  # type: ignore[misc]
        def on_ws_connected(self, transport: WSTransport) -> None:
            self.transport = transport

            async def send_frame(frame: bytes) -> None:
                transport.send(WSMsgType.TEXT, frame)

            self.conn = Connection(runtime, send_frame, peer="picows", parse_error_prefix="")
            self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
            self.task = asyncio.get_running_loop().create_task(self._reader())

        async def _reader(self) -> None:
            while (data := await self.queue.get()) is not None:
                await self.conn.handle_frame(data)
            await self.conn.aclose()

        def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
            kind = frame.msg_type
            if kind in (WSMsgType.TEXT, WSMsgType.BINARY):
                self.queue.put_nowait(frame.get_payload_as_bytes())
            elif kind == WSMsgType.PING:
                transport.send_pong(frame.get_payload_as_bytes())
            elif kind == WSMsgType.CLOSE:
                transport.send_close(frame.get_close_code(), frame.get_close_message())
                transport.disconnect()

        def on_ws_disconnected(self, transport: WSTransport) -> None:
            self.queue.put_nowait(None)

    def factory(request: WSUpgradeRequest) -> Listener:
        return Listener()

    server = await ws_create_server(factory, "127.0.0.1", 0, max_frame_size=64 * 1024 * 1024)
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"ws://127.0.0.1:{port}\n")
    sys.stdout.flush()
    await server.serve_forever()


async def _start_picows() -> RunningServer:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.ws_stack", "serve-picows", stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    url = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
    return RunningServer(kind="picows", url=url, process=proc)


async def _measure(kind: str, figure: str, reads: int, calls: int) -> dict[str, float]:
    async def run(server: RunningServer) -> dict[str, float]:
        before = tree_cpu_seconds(server.process.pid)
        if figure == "read_polling":
            result = await figures.read_polling(server.url, reads)
        else:
            result = await figures.pipelined_metadata(server.url, calls, 64)
        cpu = tree_cpu_seconds(server.process.pid) - before
        ops = result.pop("ops")
        result["server_cpu_s_per_1k_ops"] = cpu / ops * 1000
        return result

    if kind == "picows":
        server = await _start_picows()
        try:
            return await run(server)
        finally:
            await stop_process(server.process)
    extra = ["--log-level", "warning"] if kind == "execserver" else []
    async with start_server(kind, extra=extra) as server:
        return await run(server)


async def compare(rounds: int, reads: int, calls: int) -> dict[str, Any]:
    kinds = ("execserver", "picows", "reference")
    report: dict[str, Any] = {}
    for figure in ("read_polling", "pipelined_getMetadata"):
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for r in range(rounds):
            order = kinds if r % 2 == 0 else tuple(reversed(kinds))
            for kind in order:
                samples[kind].append(await _measure(kind, figure, reads, calls))
        report[figure] = {
            kind: {
                key: statistics.median(s[key] for s in samples[kind]) for key in samples[kind][0]
            }
            for kind in kinds
        }
        report[figure]["samples"] = samples
        for kind in kinds:
            print(figure, kind, report[figure][kind], flush=True)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", nargs="?", default="compare", choices=["compare", "serve-picows"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    if args.mode == "serve-picows":
        import uvloop

        uvloop.run(_serve_picows())
        return 0
    import json

    report = asyncio.run(compare(args.rounds, args.reads, args.calls))
    print(
        json.dumps({f: {k: v for k, v in r.items() if k != "samples"} for f, r in report.items()})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
