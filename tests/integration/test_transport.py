"""The websocket and stdio transports: HTTP surface, framing, limits, shutdown."""

from __future__ import annotations

import asyncio
import json
import signal

import aiohttp
import pytest

from tests.support.rpc import connect
from tests.support.servers import RunningServer, execserver_command, reference_command, start_server


async def test_readyz_and_livez_answer_200_with_empty_body(execserver: RunningServer) -> None:
    async with aiohttp.ClientSession() as http:
        for path in ("/readyz", "/livez"):
            async with http.get(execserver.http_url + path) as resp:
                assert resp.status == 200
                assert await resp.read() == b""


async def test_any_request_with_an_origin_header_is_refused_403(any_server: RunningServer) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(
            any_server.http_url + "/readyz", headers={"Origin": "http://example.test"}
        ) as resp:
            assert resp.status == 403
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(any_server.url, headers={"Origin": "http://example.test"})
        assert info.value.status == 403


async def test_plain_get_on_root_is_400_and_other_paths_404(any_server: RunningServer) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(any_server.http_url + "/") as resp:
            assert resp.status == 400
            assert await resp.text() == "Connection header did not include 'upgrade'"
        async with http.get(any_server.http_url + "/metrics-nope") as resp:
            assert resp.status == 404
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(any_server.url + "/other")
        assert info.value.status == 404


async def test_query_string_on_upgrade_is_ignored(any_server: RunningServer) -> None:
    async with connect(any_server.url + "/?token=x", handshake=False) as peer:
        reply = await peer.handshake()
        assert "sessionId" in reply["result"]


async def test_binary_frames_are_parsed_like_text(any_server: RunningServer) -> None:
    async with connect(any_server.url, handshake=False) as peer:
        await peer.ws.send_bytes(
            json.dumps({"id": 1, "method": "initialize", "params": {"clientName": "b"}}).encode()
        )
        reply = await peer.recv()
        assert reply["id"] == 1 and "sessionId" in reply["result"]


async def test_frame_just_under_16_mib_is_accepted(execserver: RunningServer) -> None:
    async with connect(execserver.url, handshake=False) as peer:
        await peer.handshake()
        padding = "x" * (16 * 1024 * 1024 - 200)
        await peer.send(json.dumps({"id": 7, "method": "environment/status", "pad": padding}))
        reply = await peer.recv(timeout=30)
        assert reply == {"id": 7, "result": {"status": "ready"}}


async def test_oversized_message_is_closed_with_1009_and_server_lives_on(
    execserver: RunningServer,
) -> None:
    async with connect(execserver.url, handshake=False) as peer:
        await peer.handshake()
        # The server closes while we are still sending, so the send may fail.
        sending = asyncio.ensure_future(peer.ws.send_str("x" * (64 * 1024 * 1024 + 1)))
        msg = await peer.closed(timeout=60)
        await asyncio.gather(sending, return_exceptions=True)
        assert msg.type == aiohttp.WSMsgType.CLOSE
        assert msg.data == 1009
    async with connect(execserver.url, handshake=False) as peer:
        reply = await peer.handshake()
        assert "sessionId" in reply["result"]


async def test_pipelined_initialize_and_initialized_work(any_server: RunningServer) -> None:
    async with connect(any_server.url, handshake=False) as peer:
        await peer.send({"id": 1, "method": "initialize", "params": {"clientName": "p"}})
        await peer.send({"method": "initialized"})
        await peer.send({"id": 2, "method": "environment/status"})
        first, second = await peer.recv(), await peer.recv()
        assert first["id"] == 1 and "sessionId" in first["result"]
        assert second == {"id": 2, "result": {"status": "ready"}}


# Resumes sessions (the shared daemon's TTL is 0).
@pytest.mark.fresh_daemon
async def test_resume_of_an_attached_session_is_32010(any_server: RunningServer) -> None:
    async with connect(any_server.url, handshake=False) as first:
        session_id = (await first.handshake())["result"]["sessionId"]
        async with connect(any_server.url, handshake=False) as second:
            reply = await second.call(
                "initialize", {"clientName": "x", "resumeSessionId": session_id}
            )
            assert reply["error"] == {
                "code": -32010,
                "message": f"session {session_id} is already attached to another connection",
            }
    # Once the server has noticed that the first connection closed, the session is
    # detached and can be resumed (noticing is asynchronous, so -32010 may come first).
    async with connect(any_server.url, handshake=False) as third:
        for _ in range(50):
            reply = await third.call(
                "initialize", {"clientName": "y", "resumeSessionId": session_id}
            )
            if reply.get("error", {}).get("code") != -32010:
                break
            await asyncio.sleep(0.1)
        assert reply["result"]["sessionId"] == session_id


async def test_other_connections_survive_a_dropped_one(execserver: RunningServer) -> None:
    async with connect(execserver.url, handshake=False) as healthy:
        await healthy.handshake()
        async with connect(execserver.url, handshake=False) as rude:
            await rude.handshake()
            await rude.send({"method": "exit"})
            msg = await rude.closed(timeout=10)
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert await healthy.call("environment/status") == {
            "id": healthy.last_id,
            "result": {"status": "ready"},
        }


async def test_sigterm_shuts_down_gracefully_with_status_0() -> None:
    async with start_server("execserver") as server:
        async with connect(server.url, handshake=False) as peer:
            await peer.handshake()
            server.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(server.process.wait(), 15) == 0


async def test_exit_on_stdin_close_exits_when_parent_closes_stdin() -> None:
    async with start_server("execserver", extra=["--exit-on-stdin-close"]) as server:
        assert server.process.stdin is not None
        server.process.stdin.close()
        status = await asyncio.wait_for(server.process.wait(), 15)
        assert status == 2  # the reference's status for this exit


# Closes the daemon's stdin.
@pytest.mark.fresh_daemon
async def test_without_the_flag_closing_stdin_changes_nothing(execserver: RunningServer) -> None:
    assert execserver.process.stdin is not None
    execserver.process.stdin.close()
    async with connect(execserver.url, handshake=False) as peer:
        reply = await peer.handshake()
        assert "sessionId" in reply["result"]
    assert execserver.process.returncode is None


async def test_stdio_transport_answers_and_exits_0_on_eof() -> None:
    proc = await asyncio.create_subprocess_exec(
        *execserver_command(["--listen", "stdio"]),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"id":1,"method":"initialize","params":{"clientName":"s"}}\r\n\n')
    proc.stdin.write(b'{"method":"initialized"}\n{"id":2,"method":"environment/status"}\n')
    await proc.stdin.drain()
    first = json.loads(await asyncio.wait_for(proc.stdout.readline(), 15))
    second = json.loads(await asyncio.wait_for(proc.stdout.readline(), 15))
    assert first["id"] == 1 and "sessionId" in first["result"]
    assert second == {"id": 2, "result": {"status": "ready"}}
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 15) == 0


@pytest.mark.parametrize(
    ("listen", "message"),
    [
        (
            "ws://localhost:0",
            "invalid websocket --listen URL `ws://localhost:0`; expected `ws://IP:PORT`",
        ),
        (
            "ws://127.0.0.1:0/x",
            "invalid websocket --listen URL `ws://127.0.0.1:0/x`; expected `ws://IP:PORT`",
        ),
        (
            "http://127.0.0.1:0",
            "unsupported --listen URL `http://127.0.0.1:0`; expected `ws://IP:PORT` or `stdio`",
        ),
    ],
)
@pytest.mark.parametrize("kind", ["execserver", "reference"])
async def test_bad_listen_urls_fail_at_start_up(kind: str, listen: str, message: str) -> None:
    command = execserver_command if kind == "execserver" else reference_command
    proc = await asyncio.create_subprocess_exec(
        *command(["--listen", listen]),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert out == b""
    assert f"Error: {message}" in err.decode()


async def test_long_poll_read_does_not_block_the_connection(execserver: RunningServer) -> None:
    """Unlike the reference, a waiting request never blocks the ones behind it."""
    async with connect(execserver.url, handshake=False) as peer:
        await peer.handshake()
        await peer.call(
            "process/start",
            {
                "processId": "sleeper",
                "argv": ["sleep", "30"],
                "cwd": "file:///tmp",
                "env": {},
                "tty": False,
            },
        )
        await peer.send(
            {"id": 1, "method": "process/read", "params": {"processId": "sleeper", "waitMs": 20000}}
        )
        await peer.send({"id": 2, "method": "environment/status"})
        reply = await peer.recv(timeout=10)
        assert reply == {"id": 2, "result": {"status": "ready"}}
        await peer.call("process/terminate", {"processId": "sleeper"})


async def test_server_pings_idle_connections_even_before_initialize() -> None:
    async with (
        start_server("execserver", extra=["--ping-interval", "0.2"]) as server,
        aiohttp.ClientSession() as http,
        http.ws_connect(server.url, autoping=False) as ws,
    ):
        msg = await ws.receive(timeout=10)
        assert msg.type == aiohttp.WSMsgType.PING
        assert msg.data == b""
        # A connection that never answers pings is not dropped (as the reference).
        second = await ws.receive(timeout=10)
        assert second.type == aiohttp.WSMsgType.PING
