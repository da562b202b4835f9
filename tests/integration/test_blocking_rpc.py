"""The blocking websocket session of the one-shot commands
(``execserver.client.blocking_rpc``), against both servers: the handshake,
big frames both ways, the same errors as the async client, refusals, pings."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from execserver.client.blocking_rpc import BlockingRpcSession, run_blocking
from execserver.client.connection import ExecServerClient
from execserver.client.errors import (
    ExecServerConnectError,
    InvalidParams,
    MethodNotFound,
)
from execserver.core.apply_patch.blocking_fs import BlockingFileSystem
from tests.support.servers import RunningServer, start_server


def _session_calls(url: str, directory: Path) -> dict[str, Any]:
    big = os.urandom(3 * 1024 * 1024 + 7)  # > 64 KiB: 8-byte frame lengths both ways
    with BlockingRpcSession.connect(url) as session:
        fs = BlockingFileSystem(session, None)
        target = str(directory / "big.bin")
        run_blocking(fs.write_file(target, big))
        back = run_blocking(fs.read_file(target))
        meta = run_blocking(fs.get_metadata(str(directory)))
        return {
            "session": session.session_id,
            "same": back == big,
            "on_disk": Path(target).read_bytes() == big,
            "is_directory": meta.is_directory,
        }


async def test_session_and_big_frames_both_ways(any_server: RunningServer, tmp_path: Path) -> None:
    seen = await asyncio.to_thread(_session_calls, any_server.url, tmp_path)
    assert seen["session"]
    assert seen["same"] and seen["on_disk"] and seen["is_directory"]


def _blocking_failure(url: str, operation: str, path: str) -> OSError:
    with BlockingRpcSession.connect(url) as session:
        fs = BlockingFileSystem(session, None)
        try:
            run_blocking(_OPERATIONS[operation](fs, path))
        except OSError as exc:
            return exc
    raise AssertionError(f"{operation} {path} did not fail")


_OPERATIONS: dict[str, Any] = {
    "read_missing": lambda fs, p: fs.read_file(p + "/missing"),
    "metadata_missing": lambda fs, p: fs.get_metadata(p + "/missing"),
    "remove_full_directory": lambda fs, p: fs.remove(p, recursive=False, force=False),
    "write_into_missing_directory": lambda fs, p: fs.write_file(p + "/no/such/f", b"x"),
    "directory_over_a_file": lambda fs, p: fs.create_directory(p + "/file/sub", recursive=True),
}


@pytest.mark.parametrize("operation", sorted(_OPERATIONS))
async def test_errors_are_the_async_clients_oserrors(
    any_server: RunningServer, tmp_path: Path, operation: str
) -> None:
    (tmp_path / "file").write_text("x")
    blocking = await asyncio.to_thread(_blocking_failure, any_server.url, operation, str(tmp_path))
    async with await ExecServerClient.connect(any_server.url) as client:
        with pytest.raises(OSError) as caught:
            await _OPERATIONS[operation](client.fs, str(tmp_path))
    expected = caught.value
    assert type(blocking) is type(expected)
    assert (blocking.errno, blocking.strerror, blocking.filename) == (
        expected.errno,
        expected.strerror,
        expected.filename,
    )


def _call(url: str, method: str, params: dict[str, Any]) -> Any:
    with BlockingRpcSession.connect(url) as session:
        return session.call(method, params)


async def test_json_rpc_errors_keep_their_code_and_text(any_server: RunningServer) -> None:
    with pytest.raises(MethodNotFound) as unknown:
        await asyncio.to_thread(_call, any_server.url, "no/such", {})
    assert unknown.value.code == -32601
    with pytest.raises(InvalidParams) as bad:
        await asyncio.to_thread(_call, any_server.url, "fs/readFile", {"path": 3})
    assert bad.value.code == -32602 and "invalid type" in bad.value.message


@pytest.mark.parametrize("kind", ["execserver", "reference"])
async def test_refused_upgrade_names_status_and_reason(kind: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("blocking-token-42\n")
    extra = ["--ws-auth", "capability-token", "--ws-token-file", str(token_file)]
    async with start_server(kind, extra) as server:
        with pytest.raises(ExecServerConnectError) as missing:
            await asyncio.to_thread(BlockingRpcSession.connect, server.url)
        assert missing.value.status == 401
        assert missing.value.reason == "missing websocket bearer token"
        with pytest.raises(ExecServerConnectError) as wrong:
            await asyncio.to_thread(BlockingRpcSession.connect, server.url, token="nope")
        assert wrong.value.status == 401 and wrong.value.reason == "invalid websocket bearer token"

        def with_token() -> str:
            with BlockingRpcSession.connect(server.url, token="blocking-token-42") as session:
                return session.session_id

        assert await asyncio.to_thread(with_token)


async def test_connection_refused_keeps_the_os_error_as_cause() -> None:
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    with pytest.raises(ExecServerConnectError) as refused:
        await asyncio.to_thread(BlockingRpcSession.connect, f"ws://127.0.0.1:{port}")
    cause = refused.value.__cause__
    assert isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED


def _calls_until_pinged(url: str, pings: int) -> tuple[int, int]:
    """Calls one after the other until the server's pings were answered ``pings``
    times (they arrive between and inside the calls' answers)."""
    import time

    calls = 0
    with BlockingRpcSession.connect(url) as session:
        deadline = time.monotonic() + 10
        while session.websocket.pings_answered < pings and time.monotonic() < deadline:
            meta = session.call("fs/getMetadata", {"path": "file:///", "sandbox": None})
            assert meta["isDirectory"]
            calls += 1
        return calls, session.websocket.pings_answered


async def test_server_pings_between_answers_are_answered_and_skipped() -> None:
    async with start_server("execserver", ["--ping-interval", "0.02"]) as server:
        calls, pinged = await asyncio.to_thread(_calls_until_pinged, server.url, 5)
    assert pinged >= 5
    assert calls > 0


def _big_write(url: str, target: Path, data: bytes) -> None:
    with BlockingRpcSession.connect(url) as session:
        run_blocking(BlockingFileSystem(session, None).write_file(str(target), data))


async def test_a_write_beyond_one_message_streams_through_a_handle(
    any_server: RunningServer, tmp_path: Path
) -> None:
    # 48 MiB: its base64 alone (64 MiB) would not fit one message (the server would
    # close the connection with 1009): it goes block by block through fs/open,
    # which both servers have.
    data = os.urandom(48 * 1024 * 1024 + 5)
    target = tmp_path / "big.bin"
    await asyncio.to_thread(_big_write, any_server.url, target, data)
    assert target.read_bytes() == data
