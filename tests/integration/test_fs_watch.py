"""fs/watchMissing and fs/missingChanged: one one-shot watch per connection.

"Did not fire" is checked without timing: inotify queues an event before the
creating syscall returns, so a request sent afterwards (a stale watchMissing,
which changes nothing) is answered only after the server has seen the event;
a notification it caused would be queued ahead of that answer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.support.rpc import RpcClient, connect, uri
from tests.support.servers import RunningServer

MISSING_CHANGED = "fs/missingChanged"


async def watch(
    client: RpcClient, watch_id: Any, missing: list[Path], present: Path | None = None
) -> bool:
    params: dict[str, Any] = {"watchId": watch_id, "missing": [uri(p) for p in missing]}
    if present is not None:
        params["present"] = uri(present)
    result = await client.ok("fs/watchMissing", params)
    watching: bool = result["watching"]
    return watching


async def assert_quiet(client: RpcClient) -> None:
    assert await watch(client, 0, []) is False  # barrier: id 0 is always stale
    assert not client.unread_notifications(), client.unread_notifications()


async def test_fires_once_on_creation(any_server: RunningServer, tmp_path: Path) -> None:
    async with connect(any_server.url) as client:
        assert await watch(client, 1, [tmp_path / "a", tmp_path / "b"]) is True
        (tmp_path / "unrelated").write_text("x")
        await assert_quiet(client)
        (tmp_path / "b").write_text("x")
        assert await client.next_notification(MISSING_CHANGED) == {"watchId": 1}
        (tmp_path / "a").write_text("x")
        await assert_quiet(client)


async def test_missing_ancestor_and_rename(any_server: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "staged").write_text("x")
    async with connect(any_server.url) as client:
        assert await watch(client, 4, [tmp_path / "a" / "b" / "c"]) is True
        (tmp_path / "a").mkdir()
        assert await client.next_notification(MISSING_CHANGED) == {"watchId": 4}
        assert await watch(client, 5, [tmp_path / "zz"]) is True
        os.rename(tmp_path / "staged", tmp_path / "zz")
        assert await client.next_notification(MISSING_CHANGED) == {"watchId": 5}


async def test_present_path(any_server: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "ex").write_text("x")
    async with connect(any_server.url) as client:
        assert await watch(client, 1, [tmp_path / "zz"], present=tmp_path / "ex") is True
        with (tmp_path / "ex").open("a") as stream:
            stream.write("more")
        assert await client.next_notification(MISSING_CHANGED) == {"watchId": 1}
        # a present directory: new entries inside do not count, its own attributes do
        assert await watch(client, 2, [tmp_path / "zz"], present=tmp_path / "w") is True
        (tmp_path / "w" / "inner").write_text("x")
        await assert_quiet(client)
        os.utime(tmp_path / "w")
        assert await client.next_notification(MISSING_CHANGED) == {"watchId": 2}
        assert await watch(client, 3, [tmp_path / "zz"], present=tmp_path / "ex") is True
        (tmp_path / "ex").unlink()
        assert await client.next_notification(MISSING_CHANGED) == {"watchId": 3}
        # present must exist to arm
        assert await watch(client, 4, [tmp_path / "zz"], present=tmp_path / "ex") is False


async def test_ids_and_replacement(any_server: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "ex").write_text("x")
    async with connect(any_server.url) as client:
        assert await watch(client, 1, [tmp_path / "ex", tmp_path / "nope"]) is False
        assert await watch(client, 2, [tmp_path / "nope", tmp_path / "ex"]) is False
        assert await watch(client, 3, []) is False
        assert await watch(client, 14, [tmp_path / "qq"]) is True
        # stale ids answer false and leave watch 14 armed
        assert await watch(client, 14, [tmp_path / "qq2"]) is False
        assert await watch(client, 9, [tmp_path / "qq2"]) is False
        (tmp_path / "qq2").write_text("x")
        await assert_quiet(client)
        (tmp_path / "qq").write_text("x")
        assert await client.next_notification(MISSING_CHANGED) == {"watchId": 14}
        # a higher id replaces the watch even when it ends up inactive
        assert await watch(client, 20, [tmp_path / "mm"]) is True
        assert await watch(client, 21, []) is False
        (tmp_path / "mm").write_text("x")
        await assert_quiet(client)
        assert await client.err("fs/watchMissing", {"watchId": -1, "missing": []}) == (
            -32602,
            "invalid number",
        )
        assert await client.err("fs/watchMissing", {"watchId": 30, "missing": ["rel"]}) == (
            -32602,
            "invalid URI: relative URL without a base",
        )
    async with connect(any_server.url) as client:
        # the id high-water mark belongs to the connection
        assert await watch(client, 1, [tmp_path / "later"]) is True
        (tmp_path / "later").write_text("x")
        assert await client.next_notification(MISSING_CHANGED) == {"watchId": 1}
