"""Resume chaos: the connection is dropped at random points while output
streams; after each drop the client resumes the session and continues from
its cursor. Every byte must be seen exactly once, in order."""

from __future__ import annotations

import asyncio
import base64
import json
import random
from typing import Any

import aiohttp

from tests.reliability.scale import pick
from tests.support.servers import start_server

LINES = pick(ci=3000, full=20000)
DROPS = pick(ci=8, full=60)
SCRIPT = (
    f"i=1; while [ $i -le {LINES} ]; do echo line-$i; "
    "[ $((i % 50)) -eq 0 ] && sleep 0.02; i=$((i+1)); done"
)


class Stream:
    """Client-side state that must survive reconnects: the cursor and the bytes."""

    def __init__(self) -> None:
        self.last_seq = 0
        self.data = bytearray()
        self.closed = False

    def accept(self, seq: int, chunk: str) -> None:
        if seq <= self.last_seq:
            return  # already seen (a notification and a read may overlap)
        self.data += base64.b64decode(chunk)
        self.last_seq = seq


async def _attach(
    url: str, session_id: str | None
) -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse, str]:
    http = aiohttp.ClientSession()
    ws = await http.ws_connect(url, max_msg_size=0)
    params: dict[str, str] = {"clientName": "chaos"}
    if session_id:
        params["resumeSessionId"] = session_id
    await ws.send_str(json.dumps({"id": "init", "method": "initialize", "params": params}))
    while True:
        reply = json.loads((await ws.receive(timeout=10)).data)
        if reply.get("id") == "init":
            break
    await ws.send_str('{"method":"initialized"}')
    return http, ws, reply["result"]["sessionId"]


async def _pump(ws: aiohttp.ClientWebSocketResponse, stream: Stream, budget: float) -> None:
    """Read the cursor with process/read (covers what happened while detached),
    then live notifications, for ``budget`` seconds or until closed.

    Notifications can only carry seqs above the read's, and duplicates are
    dropped by seq, so ordering is kept without relying on timing."""
    await ws.send_str(
        json.dumps(
            {
                "id": "read",
                "method": "process/read",
                "params": {"processId": "chaos", "afterSeq": stream.last_seq},
            }
        )
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    pending_live: list[dict[str, Any]] = []
    read_done = False
    while loop.time() < deadline and not stream.closed:
        try:
            msg = await ws.receive(timeout=max(0.01, deadline - loop.time()))
        except TimeoutError:
            break
        if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            break
        data = json.loads(msg.data)
        if data.get("id") == "read":
            result = data["result"]
            for chunk in result["chunks"]:
                stream.accept(chunk["seq"], chunk["chunk"])
            read_done = True
            for params in pending_live:
                stream.accept(params["seq"], params["chunk"])
            pending_live.clear()
            if result["closed"] and len(result["chunks"]) == 0:
                stream.closed = True
            elif result["closed"]:
                # More may remain beyond a size cap; read again.
                await ws.send_str(
                    json.dumps(
                        {
                            "id": "read",
                            "method": "process/read",
                            "params": {"processId": "chaos", "afterSeq": stream.last_seq},
                        }
                    )
                )
        elif data.get("method") == "process/output":
            if read_done:
                stream.accept(data["params"]["seq"], data["params"]["chunk"])
            else:
                pending_live.append(data["params"])
        elif data.get("method") == "process/closed":
            # All output seqs are below the closed seq; one more read drains them.
            await ws.send_str(
                json.dumps(
                    {
                        "id": "read",
                        "method": "process/read",
                        "params": {"processId": "chaos", "afterSeq": stream.last_seq},
                    }
                )
            )


async def test_every_byte_exactly_once_across_random_drops() -> None:
    rng = random.Random(1234)
    async with start_server("execserver", extra=["--log-level", "warning"]) as server:
        http, ws, session_id = await _attach(server.url, None)
        await ws.send_str(
            json.dumps(
                {
                    "id": "start",
                    "method": "process/start",
                    "params": {
                        "processId": "chaos",
                        "argv": ["sh", "-c", SCRIPT],
                        "cwd": "file:///tmp",
                        "env": {"PATH": "/usr/bin:/bin"},
                        "tty": False,
                    },
                }
            )
        )
        stream = Stream()
        for _ in range(DROPS):
            await _pump(ws, stream, rng.uniform(0.05, 0.4))
            # Abrupt drop, then a pause during which output accumulates server-side.
            if ws._response.connection is not None:
                ws._response.connection.transport.abort()  # type: ignore[union-attr]
            await http.close()
            await asyncio.sleep(rng.uniform(0.0, 0.2))
            http, ws, resumed = await _attach(server.url, session_id)
            assert resumed == session_id
        for _ in range(200):
            if stream.closed:
                break
            await _pump(ws, stream, 1.0)
        await ws.close()
        await http.close()
    expected = "".join(f"line-{i}\n" for i in range(1, LINES + 1)).encode()
    assert stream.closed
    assert bytes(stream.data) == expected
