"""RpcConnection over an in-memory transport, and the error mapping."""

from __future__ import annotations

import asyncio
import errno
import json
from typing import Any

import msgspec
import pytest

from execserver.client.errors import (
    ExecServerRpcError,
    ExecServerTimeout,
    ExecServerTransportClosed,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    SessionAttached,
    rpc_error,
)
from execserver.client.fs import fs_error
from execserver.client.rpc import RpcConnection


class MemoryTransport:
    def __init__(self) -> None:
        self.inbound: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.aborted = False

    async def send(self, message: bytes) -> None:
        self.sent.put_nowait(json.loads(message))

    async def receive(self) -> bytes | None:
        return await self.inbound.get()

    async def close(self) -> None:
        self.inbound.put_nowait(None)

    def abort(self) -> None:
        self.aborted = True
        self.inbound.put_nowait(None)

    @property
    def restarting(self) -> bool:
        return False

    def push(self, obj: object) -> None:
        self.inbound.put_nowait(json.dumps(obj).encode())


def make() -> tuple[MemoryTransport, RpcConnection, list[tuple[str, Any]], list[str]]:
    transport = MemoryTransport()
    notes: list[tuple[str, Any]] = []
    lost: list[str] = []
    conn = RpcConnection(
        transport,
        on_notification=lambda m, p: notes.append((m, msgspec.json.decode(p))),
        on_lost=lambda c, reason: lost.append(reason),
    )
    conn.start()
    return transport, conn, notes, lost


async def test_requests_omit_jsonrpc_member_and_count_ids_from_one() -> None:
    transport, conn, _, _ = make()
    task = asyncio.create_task(conn.request("environment/status", {}))
    sent = await transport.sent.get()
    assert sent == {"id": 1, "method": "environment/status", "params": {}}
    transport.push({"id": 1, "result": {"status": "ready"}})
    assert msgspec.json.decode(await task) == {"status": "ready"}
    await conn.close()


async def test_responses_are_matched_by_id_not_order() -> None:
    transport, conn, _, _ = make()
    first = asyncio.create_task(conn.request("a", {}))
    second = asyncio.create_task(conn.request("b", {}))
    ids = {(await transport.sent.get())["method"]: m for m in range(2)}
    del ids
    transport.push({"id": 2, "result": "second", "jsonrpc": "2.0"})
    transport.push({"id": 1, "result": "first"})
    assert msgspec.json.decode(await first) == "first"
    assert msgspec.json.decode(await second) == "second"
    await conn.close()


async def test_notifications_reach_the_handler_before_a_later_response() -> None:
    transport, conn, notes, _ = make()
    task = asyncio.create_task(conn.request("process/start", {}))
    await transport.sent.get()
    transport.push({"method": "process/output", "params": {"seq": 1}})
    transport.push({"id": 1, "result": {}})
    await task
    assert notes == [("process/output", {"seq": 1})]
    await conn.close()


async def test_error_response_raises_the_class_for_its_code() -> None:
    transport, conn, _, _ = make()
    task = asyncio.create_task(conn.request("fs/readFile", {}))
    await transport.sent.get()
    transport.push({"error": {"code": -32004, "message": "No such file"}, "id": 1})
    with pytest.raises(NotFound) as info:
        await task
    assert info.value.code == -32004
    await conn.close()


async def test_transport_loss_fails_pending_calls_and_reports_once() -> None:
    transport, conn, _, lost = make()
    task = asyncio.create_task(conn.request("process/read", {}))
    await transport.sent.get()
    transport.inbound.put_nowait(None)
    with pytest.raises(ExecServerTransportClosed):
        await task
    await conn.wait_reader()
    assert len(lost) == 1
    with pytest.raises(ExecServerTransportClosed):
        await conn.request("environment/status", {})


async def test_undecodable_frame_drops_the_transport() -> None:
    transport, conn, _, lost = make()
    transport.inbound.put_nowait(b"{not json")
    await conn.wait_reader()
    assert transport.aborted
    assert lost and "undecodable" in lost[0]


async def test_server_request_is_answered_with_an_error() -> None:
    transport, conn, _, _ = make()
    transport.push({"id": 1, "method": "network/policyRequest", "params": {}})
    reply = await transport.sent.get()
    assert reply["id"] == 1 and reply["error"]["code"] == -32601
    await conn.close()


async def test_per_call_timeout_raises_and_forgets_the_call() -> None:
    transport, conn, _, _ = make()
    with pytest.raises(ExecServerTimeout) as info:
        await conn.request("process/read", {}, timeout=0.01)
    assert info.value.phase == "request"
    transport.push({"id": 1, "result": {}})  # a late answer is ignored
    await asyncio.sleep(0)
    await conn.close()


async def test_close_does_not_report_a_loss() -> None:
    _, conn, _, lost = make()
    await conn.close()
    assert lost == []


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (-32600, InvalidRequest),
        (-32601, MethodNotFound),
        (-32602, InvalidParams),
        (-32603, InternalError),
        (-32004, NotFound),
        (-32010, SessionAttached),
        (-32099, ExecServerRpcError),
    ],
)
def test_rpc_error_classes_mirror_server_codes(code: int, cls: type[Exception]) -> None:
    err = rpc_error(code, "m")
    assert type(err) is cls
    assert isinstance(err, ExecServerRpcError)


def test_fs_errors_map_to_the_local_oserror_subclass() -> None:
    assert isinstance(
        fs_error(NotFound(-32004, "No such file or directory (os error 2)"), "/x"),
        FileNotFoundError,
    )
    err = fs_error(InternalError(-32603, "Directory not empty (os error 39)"), "/d")
    assert err.errno == errno.ENOTEMPTY and err.strerror == "Directory not empty"
    assert isinstance(
        fs_error(InternalError(-32603, "File exists (os error 17)"), "/d"), FileExistsError
    )
    assert isinstance(
        fs_error(InvalidRequest(-32600, "Permission denied (os error 13)"), "/p"), PermissionError
    )
    plain = fs_error(InvalidRequest(-32600, "path contains a symbolic link"), "/l")
    assert plain.errno == errno.EINVAL
    assert isinstance(
        fs_error(NotFound(-32004, "unknown file handle `h`"), "/f"), FileNotFoundError
    )


def test_transport_errors_map_to_broken_pipe() -> None:
    assert isinstance(fs_error(ExecServerTransportClosed("gone"), "/x"), BrokenPipeError)
