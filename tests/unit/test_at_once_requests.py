"""Methods registered with an ``at_once`` function, through a Connection driven in
memory: answered inline when nothing else is in flight, with the same checks and
errors as the handler path; served by the handler when they must wait or when an
earlier request is still in flight."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec

from execserver.config import ServerConfig
from execserver.kernel.context import RequestContext
from execserver.kernel.methods import MUST_WAIT, MustWait
from execserver.server.connection import Connection
from execserver.server.runner import build_method_table
from execserver.server.runtime import ServerRuntime
from execserver.server.sessions import SessionRegistry
from execserver.wire.errors import RpcError


class Ask(msgspec.Struct):
    mode: str = "now"


class Outbox:
    """What the connection wrote; ``hold`` makes each write wait (a transport draining)."""

    def __init__(self) -> None:
        self.frames: list[Any] = []
        self.arrived = asyncio.Event()
        self.hold: asyncio.Event | None = None

    async def send_frame(self, frame: bytes) -> None:
        self.frames.append(json.loads(frame))
        self.arrived.set()
        if self.hold is not None:
            await self.hold.wait()

    async def wait_for(self, count: int) -> list[Any]:
        while len(self.frames) < count:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 10)
        return self.frames


class Probe:
    """A method with both paths; records which one answered what, in order."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.seen: list[Ask] = []  # the params objects each path was given
        self.release = asyncio.Event()
        self.returning = asyncio.Event()  # set as the handler returns

    def at_once(self, ctx: RequestContext, params: Ask) -> dict[str, str] | MustWait:
        self.steps.append(f"at once {params.mode}")
        self.seen.append(params)
        if params.mode in ("wait", "block"):
            return MUST_WAIT
        if params.mode == "refuse":
            raise RpcError.invalid_params("refused at once")
        if params.mode == "crash":
            raise ValueError("a bug")
        return {"by": "at_once"}

    async def handler(self, ctx: RequestContext, params: Ask) -> dict[str, str]:
        self.steps.append(f"handler {params.mode}")
        self.seen.append(params)
        if params.mode in ("wait", "block"):
            await self.release.wait()
        self.returning.set()
        return {"by": "handler"}


async def make_connection(*, initialize: bool = True) -> tuple[Connection, Probe, Outbox]:
    table = build_method_table()
    probe = Probe()
    table.add("test/probe", probe.handler, family="test", params_type=Ask, at_once=probe.at_once)
    runtime = ServerRuntime(config=ServerConfig(), methods=table, sessions=SessionRegistry(1.0))
    sent = Outbox()
    conn = Connection(runtime, sent.send_frame, peer="test", parse_error_prefix="p: ")
    if initialize:
        await conn.handle_frame(b'{"id":0,"method":"initialize","params":{"clientName":"t"}}')
        await sent.wait_for(1)
        await conn.handle_frame(b'{"method":"initialized"}')
        sent.frames.clear()
    return conn, probe, sent


def probe_frame(request_id: int, mode: str) -> bytes:
    message = {"id": request_id, "method": "test/probe", "params": {"mode": mode}}
    return json.dumps(message).encode()


async def test_an_answer_ready_at_once_is_written_before_the_frame_is_done() -> None:
    conn, probe, sent = await make_connection()
    try:
        await conn.handle_frame(probe_frame(1, "now"))
        # No task, no loop round: the answer is out when handle_frame returns.
        assert sent.frames == [{"id": 1, "result": {"by": "at_once"}}]
        assert probe.steps == ["at once now"]
        metrics = conn.runtime.metrics.render().decode()
        assert 'execserver_requests_total{method="test/probe",result="ok"} 1.0' in metrics
    finally:
        await conn.aclose()
        await conn.runtime.aclose()


async def test_a_request_that_must_wait_is_served_by_its_handler() -> None:
    conn, probe, sent = await make_connection()
    try:
        await conn.handle_frame(probe_frame(1, "wait"))
        assert sent.frames == []
        probe.release.set()
        assert await sent.wait_for(1) == [{"id": 1, "result": {"by": "handler"}}]
        assert probe.steps == ["at once wait", "handler wait"]
        # Decoded once: the handler gets the params the at-once attempt decoded (a
        # sandboxed fs call's context is not decoded a second time).
        at_once_params, handler_params = probe.seen
        assert handler_params is at_once_params
    finally:
        await conn.aclose()
        await conn.runtime.aclose()


async def test_errors_raised_at_once_are_answered_as_the_handler_path_answers_them() -> None:
    conn, _, sent = await make_connection()
    try:
        await conn.handle_frame(probe_frame(1, "refuse"))
        await conn.handle_frame(probe_frame(2, "crash"))
        await conn.handle_frame(b'{"id":3,"method":"test/probe","params":{"mode":7}}')
        first, second, third = await sent.wait_for(3)
        assert first == {"id": 1, "error": {"code": -32602, "message": "refused at once"}}
        assert second == {"id": 2, "error": {"code": -32603, "message": "internal error"}}
        assert third["id"] == 3 and third["error"]["code"] == -32602
        assert "expected a string" in third["error"]["message"]
        metrics = conn.runtime.metrics.render().decode()
        assert 'execserver_requests_total{method="test/probe",result="-32603"} 1.0' in metrics
        assert 'execserver_requests_total{method="test/probe",result="-32602"} 2.0' in metrics
    finally:
        await conn.aclose()
        await conn.runtime.aclose()


async def test_the_lifecycle_is_checked_before_anything_runs() -> None:
    conn, probe, sent = await make_connection(initialize=False)
    try:
        await conn.handle_frame(probe_frame(1, "now"))
        (refusal,) = await sent.wait_for(1)
        assert refusal["error"] == {
            "code": -32600,
            "message": "client must call initialize before using test methods",
        }
        assert probe.steps == []
    finally:
        await conn.aclose()
        await conn.runtime.aclose()


async def test_a_request_behind_one_in_flight_waits_for_its_first_step() -> None:
    conn, probe, sent = await make_connection()
    try:
        # Back to back, no loop round between: the first has not started when the
        # second arrives, so the second must not be answered inline ahead of it.
        await conn.handle_frame(probe_frame(1, "block"))
        await conn.handle_frame(probe_frame(2, "now"))
        assert sent.frames == []
        probe.release.set()
        assert [f["id"] for f in await sent.wait_for(2)] == [1, 2]
        assert probe.steps == ["at once block", "handler block", "handler now"]
    finally:
        await conn.aclose()
        await conn.runtime.aclose()


async def test_a_request_after_a_finished_one_is_answered_at_once() -> None:
    """The task that answered the first request has finished, but the set of tasks
    lets it go only in a callback of the loop's next round; a frame read before that
    round (a client scheduled right after the answer was written, the first request
    after initialize) is answered inline all the same."""
    conn, probe, sent = await make_connection()
    try:
        await conn.handle_frame(probe_frame(1, "wait"))
        probe.release.set()
        # Woken by the handler's last step, so before its task's done callbacks run.
        await probe.returning.wait()
        await conn.handle_frame(probe_frame(2, "now"))
        assert probe.steps == ["at once wait", "handler wait", "at once now"]
        assert [f["id"] for f in await sent.wait_for(2)] == [1, 2]
    finally:
        await conn.aclose()
        await conn.runtime.aclose()


async def test_an_answer_whose_write_waits_lets_the_reader_go_on_in_order() -> None:
    conn, probe, sent = await make_connection()
    sent.hold = asyncio.Event()
    try:
        await conn.handle_frame(probe_frame(1, "now"))  # its write now waits to drain
        await conn.handle_frame(probe_frame(2, "now"))  # returns: the reader is not held
        await conn.handle_frame(probe_frame(3, "now"))
        sent.hold.set()
        assert [f["id"] for f in await sent.wait_for(3)] == [1, 2, 3]
        assert probe.steps == ["at once now", "handler now", "handler now"]
    finally:
        await conn.aclose()
        await conn.runtime.aclose()
