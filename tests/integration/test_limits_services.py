"""Per-service limits (processes per session, open fs handles, concurrent http/request):
each refusal names its flag, and the service works again once below the limit."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web

from tests.support.rpc import RpcClient, connect
from tests.support.servers import start_server

LIMIT_EXCEEDED = -32000


def start_params(process_id: str, tmp_path: Path, *argv: str) -> dict[str, object]:
    return {
        "processId": process_id,
        "argv": list(argv),
        "cwd": tmp_path.as_uri(),
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": False,
        "pipeStdin": True,
    }


async def wait_closed(rpc: RpcClient, process_id: str) -> None:
    after = 0
    while True:
        reply = await rpc.call(
            "process/read", {"processId": process_id, "afterSeq": after, "waitMs": 2000}
        )
        result = reply["result"]
        if result["closed"]:
            return
        after = result["nextSeq"] - 1


async def test_processes_per_session_limit(tmp_path: Path) -> None:
    async with start_server("execserver", ["--max-processes-per-session", "2"]) as server:
        async with connect(server.url, handshake=False) as rpc:
            await rpc.handshake()
            for pid in ("a", "b"):  # `cat` with an open stdin runs until told otherwise
                reply = await rpc.call("process/start", start_params(pid, tmp_path, "cat"))
                assert "result" in reply, reply
            refused = await rpc.call("process/start", start_params("c", tmp_path, "cat"))
            assert refused["error"]["code"] == LIMIT_EXCEEDED
            assert "--max-processes-per-session=2" in refused["error"]["message"]
            await rpc.call("process/terminate", {"processId": "a"})
            await wait_closed(rpc, "a")
            again = await rpc.call("process/start", start_params("d", tmp_path, "true"))
            assert "result" in again, again


async def test_open_file_handles_limit(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    uri = (tmp_path / "f").as_uri()
    async with start_server("execserver", ["--max-open-files", "2"]) as server:
        async with connect(server.url, handshake=False) as rpc:
            await rpc.handshake()
            for handle in ("h1", "h2"):
                assert "result" in await rpc.call("fs/open", {"handleId": handle, "path": uri})
            refused = await rpc.call("fs/open", {"handleId": "h3", "path": uri})
            assert refused["error"]["code"] == LIMIT_EXCEEDED
            assert "--max-open-files=2" in refused["error"]["message"]
            assert "result" in await rpc.call("fs/close", {"handleId": "h1"})
            assert "result" in await rpc.call("fs/open", {"handleId": "h4", "path": uri})


@asynccontextmanager
async def slow_http_server(release: asyncio.Event) -> AsyncIterator[str]:
    """Answers only once ``release`` is set, so requests stay in flight."""

    async def handler(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        release.set()
        await runner.cleanup()


async def test_concurrent_http_requests_limit() -> None:
    release = asyncio.Event()
    flags = ["--max-concurrent-http-requests", "1", "--concurrent-requests", "4"]
    async with slow_http_server(release) as url, start_server("execserver", flags) as server:
        async with connect(server.url, handshake=False) as rpc:
            await rpc.handshake()
            params = {"method": "GET", "url": url, "requestId": "r1"}
            await rpc.send({"id": "slow", "method": "http/request", "params": params})
            # Requests start in arrival order and take the slot before their first
            # await, so the slow one holds it when the second is handled.
            second = await rpc.call("http/request", {**params, "requestId": "r2"})
            assert second["error"]["code"] == LIMIT_EXCEEDED
            assert "--max-concurrent-http-requests=1" in second["error"]["message"]
            release.set()
            first = await rpc.response("slow")
            assert base64.b64decode(first["result"]["bodyBase64"]) == b"ok"
            third = await rpc.call("http/request", {**params, "requestId": "r3"})
            assert third["result"]["status"] == 200
