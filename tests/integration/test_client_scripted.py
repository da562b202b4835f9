"""Client behaviour the real servers only show by chance (reordering, lost
events, drops at a chosen moment), checked against a scripted websocket peer
on 127.0.0.1 that plays the server's part message by message."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from execserver.client import (
    ClientState,
    Closed,
    ExecServerClient,
    ExecServerTimeout,
    ExecServerTransportClosed,
    ExecServerUnavailable,
    Exited,
    Failed,
    Output,
    ProcessEvent,
    ProcessFailed,
    RemoteProcess,
)
from tests.support.client_peers import ScriptedPeer, scripted_server

PID = "p1"


def output(seq: int, data: bytes, pid: str = PID) -> dict[str, Any]:
    return {
        "processId": pid,
        "seq": seq,
        "stream": "stdout",
        "chunk": base64.b64encode(data).decode(),
    }


def chunk(seq: int, data: bytes) -> dict[str, Any]:
    return {"seq": seq, "stream": "stdout", "chunk": base64.b64encode(data).decode()}


def read_result(
    chunks: list[dict[str, Any]],
    next_seq: int,
    *,
    exited: bool = False,
    exit_code: int | None = None,
    closed: bool = False,
) -> dict[str, Any]:
    return {
        "chunks": chunks,
        "nextSeq": next_seq,
        "exited": exited,
        "exitCode": exit_code,
        "closed": closed,
        "failure": None,
        "sandboxDenied": False,
    }


async def start_reply(peer: ScriptedPeer) -> dict[str, Any]:
    start = await peer.expect("process/start")
    await peer.reply(start, {"processId": start["params"]["processId"], "sandboxType": "none"})
    return start


async def collect(proc: RemoteProcess) -> list[ProcessEvent]:
    return [event async for event in proc]


async def wait_for_drop(client: ExecServerClient) -> None:
    """Until the client has seen its first connection go (calls made earlier would
    be in flight at the drop and fail, which other tests cover)."""
    conn = client.connection
    assert conn is not None
    await conn.wait_reader()


async def connect(url: str, **kwargs: Any) -> ExecServerClient:
    return await ExecServerClient.connect(url, **kwargs)


async def connect_detached(url: str) -> ExecServerClient:
    """For a script that leaves a process running and plays no ``process/terminate``:
    leaving ``async with`` would otherwise wait out the client's bound on
    terminating its processes (CLOSE_TERMINATE_TIMEOUT, 10 s) for an answer the
    peer never sends. What is checked happens before the client closes."""
    return await ExecServerClient.connect(url, on_exit="detach")


async def test_process_events_are_delivered_in_seq_order_when_notifications_are_reordered() -> None:
    async def script(peer: ScriptedPeer) -> None:
        await peer.handshake()
        start = await peer.expect("process/start")
        # Events before the start response, exit ahead of earlier output.
        await peer.notify(
            "process/exited", {"processId": PID, "seq": 3, "exitCode": 0, "sandboxDenied": False}
        )
        await peer.notify("process/output", output(2, b"b"))
        await peer.reply(start, {"processId": PID, "sandboxType": "none"})
        await peer.notify("process/closed", {"processId": PID, "seq": 4})
        await peer.notify("process/output", output(1, b"a"))

    async with scripted_server(script) as url:
        async with await connect(url) as client:
            proc = await client.start_process(["true"], process_id=PID)
            events = await collect(proc)
    assert events == [
        Output(1, "stdout", b"a"),
        Output(2, "stdout", b"b"),
        Exited(3, 0, False),
        Closed(4),
    ]


async def test_missing_event_is_filled_by_read_from_the_cursor() -> None:
    reads: list[dict[str, Any]] = []

    async def script(peer: ScriptedPeer) -> None:
        await peer.handshake()
        await start_reply(peer)
        await peer.notify("process/output", output(1, b"a"))
        await peer.notify("process/output", output(3, b"c"))  # seq 2 never sent
        read = await peer.expect("process/read")
        reads.append(read["params"])
        await peer.reply(
            read,
            read_result([chunk(2, b"b"), chunk(3, b"c")], 6, exited=True, exit_code=5, closed=True),
        )

    async with scripted_server(script) as url:
        async with await connect(url) as client:
            proc = await client.start_process(["x"], process_id=PID)
            events = await collect(proc)
            status = await proc.wait()
    assert reads[0]["afterSeq"] == 1 and reads[0]["waitMs"] == 0
    assert [e for e in events if isinstance(e, Output)] == [
        Output(1, "stdout", b"a"),
        Output(2, "stdout", b"b"),
        Output(3, "stdout", b"c"),
    ]
    assert events[-2:] == [Exited(4, 5, False), Closed(5)]
    assert status.exit_code == 5


async def test_output_no_longer_retained_fails_the_process() -> None:
    async def script(peer: ScriptedPeer) -> None:
        await peer.handshake()
        await start_reply(peer)
        await peer.notify("process/output", output(1, b"a"))
        await peer.notify("process/output", output(10, b"j"))
        while (read := await peer.recv_or_none()) is not None:
            assert read["method"] == "process/read"
            await peer.reply(read, read_result([chunk(10, b"j")], 11))

    async with scripted_server(script) as url:
        async with await connect(url) as client:
            proc = await client.start_process(["x"], process_id=PID)
            events: list[ProcessEvent] = []
            with pytest.raises(ProcessFailed) as info:
                async for event in proc:
                    events.append(event)  # noqa: PERF401 (what came before the raise)
            again = [event async for event in proc.events(raise_on_failure=False)]
    assert events == [Output(1, "stdout", b"a")]
    assert "no longer retained" in info.value.message
    assert info.value.process_id == PID
    assert again == []  # consumed already; the failure stays readable on the process
    assert proc.failure is not None and "no longer retained" in proc.failure


async def test_resume_drains_notifications_pushed_before_the_initialize_response() -> None:
    resume_params: list[dict[str, Any]] = []

    async def first(peer: ScriptedPeer) -> None:
        await peer.handshake("s-1")
        await start_reply(peer)
        await peer.notify("process/output", output(1, b"0\n"))
        await peer.ws.close()  # the connection drops

    async def second(peer: ScriptedPeer) -> None:
        init = await peer.expect("initialize")
        resume_params.append(init["params"])
        for seq in range(2, 258):
            await peer.notify("process/output", output(seq, f"{seq - 1}\n".encode()))
        await peer.reply(init, {"sessionId": "s-1", "environmentInfo": _env()})
        await peer.expect("initialized")
        read = await peer.expect("process/read")
        assert read["params"]["afterSeq"] == 257
        await peer.reply(read, read_result([], 260, exited=True, exit_code=0, closed=True))

    async with scripted_server(first, second) as url:
        async with await connect(url) as client:
            proc = await client.start_process(["x"], process_id=PID)
            events = await collect(proc)
            assert client.session_id == "s-1"
            assert client.reconnects == 1
    assert resume_params == [{"clientName": "execserver-client", "resumeSessionId": "s-1"}]
    lines = b"".join(e.data for e in events if isinstance(e, Output)).split()
    assert lines == [str(i).encode() for i in range(257)]
    assert events[-2:] == [Exited(258, 0, False), Closed(259)]


async def test_replays_cursor_read_once_after_disconnect() -> None:
    async def first(peer: ScriptedPeer) -> None:
        await peer.handshake()
        await start_reply(peer)
        await peer.expect("process/read")
        await peer.ws.close()  # drop while the long-poll is in flight

    seen: list[dict[str, Any]] = []

    async def second(peer: ScriptedPeer) -> None:
        await peer.handshake()
        catch_up = await peer.expect("process/read")
        assert catch_up["params"]["waitMs"] == 0
        await peer.reply(catch_up, read_result([], 1))
        replay = await peer.expect("process/read")
        seen.append(replay["params"])
        await peer.reply(replay, read_result([chunk(1, b"late")], 2))
        after = await peer.recv()
        seen.append(after)
        await peer.reply(after, {"status": "ready"})

    async with scripted_server(first, second) as url:
        async with await connect_detached(url) as client:
            proc = await client.start_process(["x"], process_id=PID)
            result = await proc.read(after_seq=0, wait_ms=30_000)
            assert await client.environment_status() == "ready"
    assert [c.chunk for c in result.chunks] == [b"late"]
    assert seen[0]["afterSeq"] == 0 and seen[0]["waitMs"] == 30_000
    assert seen[1]["method"] == "environment/status"  # the read was sent only once


async def test_does_not_replay_non_read_apis_after_disconnect() -> None:
    async def first(peer: ScriptedPeer) -> None:
        await peer.handshake()
        await start_reply(peer)
        await peer.expect("process/write")
        await peer.ws.close()

    after: list[dict[str, Any]] = []

    async def second(peer: ScriptedPeer) -> None:
        await peer.handshake()
        catch_up = await peer.expect("process/read")
        await peer.reply(catch_up, read_result([], 1))
        message = await peer.recv()
        after.append(message)
        await peer.reply(message, {"status": "ready"})

    async with scripted_server(first, second) as url:
        async with await connect_detached(url) as client:
            proc = await client.start_process(["cat"], process_id=PID, pipe_stdin=True)
            with pytest.raises(ExecServerTransportClosed):
                await proc.write(b"maybe written, maybe not")
            assert await client.environment_status() == "ready"
    assert after[0]["method"] == "environment/status"


async def test_concurrent_callers_share_one_reconnect() -> None:
    connections = 0

    async def first(peer: ScriptedPeer) -> None:
        nonlocal connections
        connections += 1
        await peer.handshake()
        await peer.ws.close()

    async def second(peer: ScriptedPeer) -> None:
        nonlocal connections
        connections += 1
        await peer.handshake()
        for _ in range(5):
            status = await peer.expect("environment/status")
            await peer.reply(status, {"status": "ready"})

    async with scripted_server(first, second) as url:
        async with await connect(url) as client:
            await wait_for_drop(client)
            results = await asyncio.gather(*(client.environment_status() for _ in range(5)))
    assert results == ["ready"] * 5
    assert connections == 2


async def test_transport_disconnect_fails_sessions_and_rejects_new_sessions() -> None:
    async def only(peer: ScriptedPeer) -> None:
        await peer.handshake()
        await start_reply(peer)
        await peer.ws.close()  # and no later connection is accepted

    async with scripted_server(only) as url:
        async with await connect(url, recovery_deadline=0.5) as client:
            proc = await client.start_process(["x"], process_id=PID)
            events = [event async for event in proc.events(raise_on_failure=False)]
            assert isinstance(events[-1], Failed)
            assert client.state is ClientState.FAILED
            with pytest.raises(ExecServerUnavailable):
                await client.start_process(["x"])
            with pytest.raises(ProcessFailed):
                await proc.wait()
            # A read on the failed process is answered locally.
            local = await proc.read(after_seq=0)
            assert (local.exited, local.closed, local.failure) == (True, True, proc.failure)
            with pytest.raises(BrokenPipeError):
                await client.fs.read_file("/etc/hostname")


async def test_resume_answered_with_another_session_fails_the_client() -> None:
    async def first(peer: ScriptedPeer) -> None:
        await peer.handshake("s-1")
        await peer.ws.close()

    async def second(peer: ScriptedPeer) -> None:
        init = await peer.expect("initialize")
        await peer.reply(init, {"sessionId": "s-2", "environmentInfo": _env()})

    async with scripted_server(first, second) as url:
        async with await connect(url) as client:
            await wait_for_drop(client)
            with pytest.raises(ExecServerUnavailable, match="unexpected session"):
                await client.environment_status()


async def test_session_still_attached_is_retried_until_free() -> None:
    async def first(peer: ScriptedPeer) -> None:
        await peer.handshake("s-1")
        await peer.ws.close()

    async def busy(peer: ScriptedPeer) -> None:
        init = await peer.expect("initialize")
        await peer.error(init, -32010, "session s-1 is already attached to another connection")

    async def third(peer: ScriptedPeer) -> None:
        await peer.handshake("s-1")
        status = await peer.expect("environment/status")
        await peer.reply(status, {"status": "ready"})

    async with scripted_server(first, busy, third) as url:
        async with await connect(url) as client:
            await wait_for_drop(client)
            assert await client.environment_status() == "ready"
            assert client.reconnects == 1


async def test_initialize_timeout_is_reported_as_such() -> None:
    async def silent(peer: ScriptedPeer) -> None:
        await peer.expect("initialize")

    async with scripted_server(silent) as url:
        with pytest.raises(ExecServerTimeout) as info:
            await connect(url, initialize_timeout=0.2)
    assert info.value.phase == "initialize"


def _env() -> dict[str, Any]:
    from tests.support.client_peers import ENVIRONMENT_INFO

    return ENVIRONMENT_INFO


async def test_token_callable_is_asked_again_on_reconnect() -> None:
    async def first(peer: ScriptedPeer) -> None:
        assert peer.authorization == "Bearer t-1"
        await peer.handshake("s-1")
        await peer.ws.close()

    async def second(peer: ScriptedPeer) -> None:
        assert peer.authorization == "Bearer t-2"
        await peer.handshake("s-1")
        status = await peer.expect("environment/status")
        await peer.reply(status, {"status": "ready"})

    tokens = iter(["t-1", "t-2"])
    asked: list[str] = []

    def token() -> str:
        asked.append(next(tokens))
        return asked[-1]

    async with scripted_server(first, second) as url:
        async with await connect(url, token=token) as client:
            await wait_for_drop(client)
            assert await client.environment_status() == "ready"
    assert asked == ["t-1", "t-2"]


async def test_wake_notifications_do_not_block_other_sessions() -> None:
    async def script(peer: ScriptedPeer) -> None:
        await peer.handshake()
        await start_reply(peer)  # noisy
        await start_reply(peer)  # quiet
        for seq in range(1, 4098):
            await peer.notify("process/output", output(seq, b"n", pid="noisy"))
        await peer.notify("process/output", output(1, b"q", pid="quiet"))
        await peer.notify(
            "process/exited",
            {"processId": "quiet", "seq": 2, "exitCode": 0, "sandboxDenied": False},
        )
        await peer.notify("process/closed", {"processId": "quiet", "seq": 3})

    async with scripted_server(script) as url:
        async with await connect_detached(url) as client:
            noisy = await client.start_process(["x"], process_id="noisy")
            quiet = await client.start_process(["x"], process_id="quiet")
            # Nobody reads the noisy process; the quiet one still gets everything.
            events = await collect(quiet)
            assert events == [Output(1, "stdout", b"q"), Exited(2, 0, False), Closed(3)]
            assert noisy.last_seq == 4097
