"""Property test: whatever arrives as a frame, the server answers with a
well-formed result or error (or drops only that connection), never leaks a
traceback, and keeps serving the next client."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execserver.wire import methods as m
from tests.support.servers import PROJECT_ROOT, execserver_command

KNOWN_CODES = {-32600, -32601, -32602, -32603, -32004, -32010}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
ids = st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(max_size=8) | json_values
# Only methods that cannot start work with side effects outside a tmp dir when
# given random params; process/start and fs writes need well-formed params.
methods = st.sampled_from([*m.CLIENT_REQUESTS, "nope/x", "initialized", "$/cancelRequest"])
rpc_shaped = st.builds(
    lambda ident, method, params, with_id: {
        **({"id": ident} if with_id else {}),
        "method": method,
        "params": params,
    },
    ids,
    methods,
    json_values,
    st.booleans(),
)
frames = (
    st.binary(max_size=64).map(lambda b: ("bytes", b))
    | json_values.map(lambda v: ("text", json.dumps(v)))
    | rpc_shaped.map(lambda v: ("text", json.dumps(v)))
    | st.text(max_size=64).map(lambda t: ("text", t))
)


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    proc = subprocess.Popen(
        execserver_command(["--listen", "ws://127.0.0.1:0", "--log-level", "error"]),
        stdout=subprocess.PIPE,
        cwd=str(PROJECT_ROOT),
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip()
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()
        assert proc.returncode == 0, "the server must shut down cleanly after fuzzing"


async def _exchange(url: str, kind: str, frame: Any) -> list[Any]:
    replies: list[Any] = []
    async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as ws:
        await ws.send_str(
            json.dumps({"id": "h", "method": "initialize", "params": {"clientName": "f"}})
        )
        assert "result" in json.loads((await ws.receive(timeout=10)).data)
        await ws.send_str('{"method":"initialized"}')
        if kind == "bytes":
            await ws.send_bytes(frame)
        else:
            await ws.send_str(frame)
        await ws.send_str('{"id":"probe","method":"environment/status"}')
        while True:
            msg = await ws.receive(timeout=10)
            if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                break  # dropped: allowed for notifications and unsolicited responses
            reply = json.loads(msg.data)
            if reply.get("id") == "probe" and "method" not in reply:
                break
            replies.append(reply)
    return replies


async def _healthy(url: str) -> bool:
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_str(
            json.dumps({"id": 1, "method": "initialize", "params": {"clientName": "h"}})
        )
        return "result" in json.loads((await ws.receive(timeout=10)).data)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frame=frames)
def test_random_frames_never_break_the_server(server_url: str, frame: tuple[str, Any]) -> None:
    kind, payload = frame
    replies = asyncio.run(_exchange(server_url, kind, payload))
    for reply in replies:
        if "method" in reply:
            continue  # a notification (e.g. process output) is fine
        assert set(reply) in ({"id", "result"}, {"id", "error"}), reply
        if "error" in reply:
            assert set(reply["error"]) == {"code", "message"}
            assert reply["error"]["code"] in KNOWN_CODES, reply
            assert "Traceback" not in reply["error"]["message"]
    assert asyncio.run(_healthy(server_url))
