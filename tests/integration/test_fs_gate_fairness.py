"""The daemon's bound on concurrent sandboxed fs calls (``EXECSERVER_FS_CONCURRENCY``,
execserver/kernel/fair_gate.py) serves sessions in turn: a session that queues many
calls does not go ahead of another session's one; and calls that need no sandbox
helper never wait for it. Real daemon, real helpers, real fifos to hold a call in
flight (opening a fifo for writing blocks until a reader comes)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from tests.support.rpc import Reply, b64, connect, uri
from tests.support.sandbox import ROOT_READ, entry
from tests.support.servers import start_server

# A daemon of its own: one sandboxed fs call at a time, several requests per connection
# (with the default of one, as the reference, a session has one call in the queue at most).
pytestmark = pytest.mark.fresh_daemon


def _box(ws: Path) -> dict[str, Any]:
    return {
        "permissions": {
            "type": "managed",
            "file_system": {"type": "restricted", "entries": [ROOT_READ, entry(ws, "write")]},
            "network": "restricted",
        },
        "windowsSandboxLevel": "disabled",
    }


def _unblock(fifo: Path) -> int:
    """A reader for ``fifo``: the helper's blocked open for writing goes on."""
    return os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)


async def _answered(pending: Awaitable[Reply], seconds: float) -> Reply | None:
    try:
        return await asyncio.wait_for(asyncio.shield(pending), seconds)
    except TimeoutError:
        return None


async def test_a_session_queueing_many_calls_does_not_go_ahead_of_another(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    fifos = [ws / f"fifo{i}" for i in range(4)]
    for fifo in fifos:
        os.mkfifo(fifo)
    box = _box(ws)
    readers: list[int] = []
    a_calls: list[Awaitable[Reply]] = []
    async with (
        start_server(
            "execserver",
            # Each connection may run several requests at once (the reference runs one).
            ["--concurrent-requests", "8"],
            env={**os.environ, "EXECSERVER_FS_CONCURRENCY": "1"},
        ) as srv,
        connect(srv.url) as a,
        connect(srv.url) as b,
    ):
        try:
            # A's first call takes the one slot and blocks in its helper; its next three
            # queue behind it, each of them blocking too once it runs.
            for fifo in fifos:
                params = {"path": uri(fifo), "dataBase64": b64("a"), "sandbox": box}
                a_calls.append(await a.send_request("fs/writeFile", params))
            # A call that needs no helper is not held by the gate.
            await a.ok("fs/getMetadata", {"path": uri(ws)}, timeout=10)
            b_call = await b.send_request(
                "fs/writeFile", {"path": uri(ws / "b.txt"), "dataBase64": b64("b"), "sandbox": box}
            )
            assert await _answered(b_call, 0.5) is None  # the slot is A's
            readers.append(_unblock(fifos[0]))
            assert (await asyncio.wait_for(a_calls[0], 30)).ok
            readers.append(_unblock(fifos[1]))  # A's second ran next: A queued first
            assert (await asyncio.wait_for(a_calls[1], 30)).ok
            # Now B's turn, before A's third (which would hold the slot until its reader).
            answer = await _answered(b_call, 30)
            assert answer is not None and answer.ok, "B waited behind A's queue"
            assert (ws / "b.txt").read_text() == "b"
            assert await _answered(a_calls[3], 0.2) is None
        finally:
            readers += [_unblock(fifo) for fifo in fifos[2:]]
            for call in a_calls[2:]:
                await asyncio.wait_for(call, 30)
            for fd in readers:
                os.close(fd)
