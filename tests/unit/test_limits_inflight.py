"""--max-inflight-requests through a Connection driven in memory (a blocking handler
makes the number in flight deterministic), plus the limit helpers services use."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest

from execserver.config import LimitsConfig, ServerConfig
from execserver.kernel.context import RequestContext
from execserver.kernel.limits import LIMIT_EXCEEDED, LimitExceeded, Slots, check_below
from execserver.server.connection import Connection
from execserver.server.runner import build_method_table
from execserver.server.runtime import ServerRuntime
from execserver.server.sessions import SessionRegistry


class Empty(msgspec.Struct):
    pass


class Outbox:
    """What the connection wrote, awaited one message at a time."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    async def send_frame(self, frame: bytes) -> None:
        self.queue.put_nowait(json.loads(frame))

    async def next(self) -> Any:
        return await asyncio.wait_for(self.queue.get(), 10)


async def make_connection(max_inflight: int) -> tuple[Connection, asyncio.Event, Outbox]:
    config = ServerConfig(
        concurrent_requests=8, limits=LimitsConfig(max_inflight_requests=max_inflight)
    )
    table = build_method_table()
    release = asyncio.Event()

    async def block(ctx: RequestContext, params: Empty) -> dict[str, str]:
        await release.wait()
        return {"done": "yes"}

    table.add("test/block", block, family="test", params_type=Empty)
    runtime = ServerRuntime(config=config, methods=table, sessions=SessionRegistry(1.0))
    sent = Outbox()
    conn = Connection(runtime, sent.send_frame, peer="test", parse_error_prefix="p: ")
    await conn.handle_frame(b'{"id":0,"method":"initialize","params":{"clientName":"t"}}')
    await conn.handle_frame(b'{"method":"initialized"}')
    return conn, release, sent


async def test_request_over_the_inflight_limit_is_refused_naming_it() -> None:
    conn, release, sent = await make_connection(max_inflight=2)
    try:
        assert (await sent.next())["id"] == 0  # initialize answered
        for request_id in (1, 2, 3):
            frame: dict[str, Any] = {"id": request_id, "method": "test/block", "params": {}}
            await conn.handle_frame(json.dumps(frame).encode())
        refusal = await sent.next()
        assert refusal["id"] == 3
        assert refusal["error"]["code"] == LIMIT_EXCEEDED
        assert "--max-inflight-requests=2" in refusal["error"]["message"]
        release.set()
        assert sorted([(await sent.next())["id"], (await sent.next())["id"]]) == [1, 2]
        # Healthy afterwards: a new request is served.
        await conn.handle_frame(b'{"id":4,"method":"environment/status"}')
        assert await sent.next() == {"id": 4, "result": {"status": "ready"}}
        metrics = conn.runtime.metrics.render().decode()
        assert 'execserver_limit_rejections_total{limit="max_inflight_requests"} 1.0' in metrics
    finally:
        await conn.aclose()
        await conn.runtime.aclose()


def test_check_below_names_the_flag_and_none_means_unlimited() -> None:
    limits = LimitsConfig(max_processes_per_session=3, max_open_files=None)
    check_below(limits, "max_processes_per_session", 2, "too many processes")
    check_below(limits, "max_open_files", 10**6, "too many handles")
    with pytest.raises(LimitExceeded) as refused:
        check_below(limits, "max_processes_per_session", 3, "too many processes")
    assert (
        refused.value.message == "too many processes (limit --max-processes-per-session=3 reached)"
    )
    assert refused.value.code == LIMIT_EXCEEDED


def test_slots_refuse_past_the_ceiling_and_free_on_exit() -> None:
    slots = Slots("max_concurrent_http_requests", 1, "too many http requests")
    with slots.hold():
        with pytest.raises(LimitExceeded, match="--max-concurrent-http-requests=1"):
            with slots.hold():
                pass
    with slots.hold():
        assert slots.in_use == 1
    assert slots.in_use == 0
