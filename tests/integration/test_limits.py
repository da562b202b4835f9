"""Limits: each one hit is answered with an error naming it, and the daemon (and the
connection, where it survives) keeps working afterwards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from tests.support.http import http_get, raw_request
from tests.support.rpc import connect
from tests.support.servers import start_server


async def test_connection_over_the_limit_gets_503_naming_it_then_a_slot_frees() -> None:
    async with start_server("execserver", ["--max-connections", "2", "--metrics"]) as server:
        async with (
            connect(server.url, handshake=False) as first,
            connect(server.url, handshake=False) as second,
        ):
            await first.handshake()
            await second.handshake()
            status, body = await raw_request(server.url)
            assert status == 503
            assert "--max-connections=2" in body
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                async with connect(server.url, handshake=False):
                    pass
            assert refused.value.status == 503
        # Both closed: the daemon serves new clients again. Our close handshake ends
        # before the daemon's handlers have released their slots (a few loop turns
        # later), so wait until its metrics count no open connection, then connect once.
        assert await _open_connections_reach_zero(server.url)
        async with connect(server.url, handshake=False) as again:
            assert await again.handshake()
        assert await http_get(server.url, "/readyz") == (200, "")


async def _open_connections_reach_zero(url: str, timeout: float = 10.0) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        _, metrics = await http_get(url, "/metrics")
        if "\nexecserver_connections 0.0\n" in metrics:
            return True
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)


async def test_oversized_request_is_answered_with_its_id_and_the_connection_lives_on() -> None:
    async with start_server("execserver", ["--max-frame-bytes", "1000"]) as server:
        async with connect(server.url, handshake=False) as rpc:
            await rpc.handshake()
            big = {"id": 7, "method": "environment/status", "params": {"pad": "x" * 2000}}
            await rpc.send(big)
            refused = await rpc.response(7)
            assert refused["error"]["code"] == -32000
            assert "--max-frame-bytes=1000" in refused["error"]["message"]
            ok = await rpc.call("environment/status", None)
            assert ok["result"] == {"status": "ready"}


async def test_oversized_frame_without_an_id_is_answered_with_id_minus_one() -> None:
    async with start_server("execserver", ["--max-frame-bytes", "100"]) as server:
        async with connect(server.url, handshake=False) as rpc:
            await rpc.ws.send_str("[" + "1," * 100 + "1]")
            refused = await rpc.recv()
            assert refused["id"] == -1
            assert "--max-frame-bytes=100" in refused["error"]["message"]
            assert await rpc.handshake()


async def test_unlimited_when_set_to_zero() -> None:
    async with start_server("execserver", ["--max-connections", "0"]) as server:
        async with (
            connect(server.url, handshake=False) as a,
            connect(server.url, handshake=False) as b,
        ):
            assert await a.handshake() != await b.handshake()


async def test_limit_refusals_do_not_break_json_rpc_ordering_of_other_replies() -> None:
    # A refused frame is answered from the reader, before later requests are read:
    # with concurrency 1 the refusal comes first, then the later reply.
    async with start_server("execserver", ["--max-frame-bytes", "500"]) as server:
        async with connect(server.url, handshake=False) as rpc:
            await rpc.handshake()
            await rpc.ws.send_str(json.dumps({"id": "big", "method": "x", "params": "y" * 600}))
            await rpc.send({"id": "small", "method": "environment/status"})
            first = await asyncio.wait_for(rpc.recv(), 10)
            second = await asyncio.wait_for(rpc.recv(), 10)
            assert [first["id"], second["id"]] == ["big", "small"]
            assert "result" in second


async def test_inflight_limit_over_real_sockets_with_long_poll_reads(tmp_path: Path) -> None:
    flags = ["--max-inflight-requests", "2", "--concurrent-requests", "4"]
    async with start_server("execserver", flags) as server:
        async with connect(server.url, handshake=False) as rpc:
            await rpc.handshake()
            # Runs until the test creates `go`: every request slot is then busy with
            # reads, so the process must end without a request.
            start = {
                "processId": "waiter",
                "argv": ["/bin/sh", "-c", "while [ ! -e go ]; do sleep 0.05; done"],
                "cwd": tmp_path.as_uri(),
                "env": {"PATH": "/usr/bin:/bin"},
                "tty": False,
            }
            assert "result" in await rpc.call("process/start", start)
            read = {"processId": "waiter", "afterSeq": 0, "waitMs": 60000}
            await rpc.send({"id": "r1", "method": "process/read", "params": read})
            await rpc.send({"id": "r2", "method": "process/read", "params": read})
            refused = await rpc.call("environment/status")
            assert refused["error"]["code"] == -32000
            assert "--max-inflight-requests=2" in refused["error"]["message"]
            (tmp_path / "go").touch()
            assert "result" in await rpc.response("r1")
            assert "result" in await rpc.response("r2")
            assert (await rpc.call("environment/status"))["result"] == {"status": "ready"}
