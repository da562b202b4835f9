"""A message far over ``--max-frame-bytes`` closes the websocket with 1009
(message too big) and is logged, every time; one a little over the limit is
still answered with its id (tests/integration/test_limits.py)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import aiohttp

from tests.support.servers import start_server

LIMIT = 10_000_000


async def test_a_60_mib_frame_over_a_10_mb_limit_closes_with_1009_and_is_logged(
    tmp_path: Path,
) -> None:
    log_file = tmp_path / "daemon.log"
    big = json.dumps(
        {"id": 2, "method": "fs/writeFile",
         "params": {"path": (tmp_path / "x").as_uri(), "dataBase64": "A" * (60 * 1024 * 1024)}}
    )  # fmt: skip
    codes = []
    with log_file.open("wb") as sink:
        async with (
            start_server("execserver", ["--max-frame-bytes", str(LIMIT)], stderr=sink) as server,
            aiohttp.ClientSession() as session,
        ):
            for _ in range(3):
                async with session.ws_connect(server.url, max_msg_size=0) as ws:
                    init = {"id": 1, "method": "initialize", "params": {"clientName": "t"}}
                    await ws.send_str(json.dumps(init))
                    assert (await ws.receive()).type is aiohttp.WSMsgType.TEXT
                    await ws.send_str(big)
                    message = await ws.receive()
                    while message.type is aiohttp.WSMsgType.TEXT:  # nothing is answered
                        raise AssertionError(f"answered instead of closed: {message.data[:200]}")
                    assert message.type is aiohttp.WSMsgType.CLOSE, message
                    codes.append(message.data)
    assert codes == [1009, 1009, 1009]
    logged = [line for line in log_file.read_text().splitlines() if "1009" in line]
    assert len(logged) == 3, log_file.read_text()[-2000:]
    assert str(LIMIT) in logged[0]


async def test_a_frame_past_the_64_mib_message_limit_is_logged(tmp_path: Path) -> None:
    """Past the transport's hard limit the frame is refused from its header, never
    read; the drop is logged (the peer, still sending, may see only a reset)."""
    log_file = tmp_path / "daemon.log"
    big = "A" * (65 * 1024 * 1024)
    with log_file.open("wb") as sink:
        async with (
            start_server("execserver", stderr=sink) as server,
            aiohttp.ClientSession() as session,
        ):
            async with session.ws_connect(server.url, max_msg_size=0) as ws:
                with contextlib.suppress(ConnectionError):
                    await ws.send_str(big)
                    await ws.receive()
    text = log_file.read_text()
    logged = [line for line in text.splitlines() if "1009" in line]
    assert len(logged) == 1, text[-2000:]
    assert "67108864" in logged[0]
