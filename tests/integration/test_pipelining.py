"""Pipelined requests on one connection: answers to a burst read in one segment
(answered inline, leaving corked together) all arrive, in order, and a request
never overtakes the one sent before it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.rpc import connect
from tests.support.servers import RunningServer


async def test_a_burst_of_metadata_calls_is_answered_completely_and_in_order(
    any_server: RunningServer, tmp_path: Path
) -> None:
    target = tmp_path / "f.txt"
    target.write_text("x" * 123)
    async with connect(any_server.url) as peer:
        await peer.handshake()
        burst = [
            json.dumps({"id": i, "method": "fs/getMetadata", "params": {"path": target.as_uri()}})
            for i in range(1, 301)
        ]
        for frame in burst:  # back to back: many frames per TCP segment
            await peer.ws.send_str(frame)
        answers = [await peer.recv() for _ in burst]
    assert [a["id"] for a in answers] == list(range(1, 301))
    assert all(a["result"]["size"] == 123 and a["result"]["isFile"] for a in answers)


async def test_a_read_sent_right_behind_its_start_finds_the_process(
    any_server: RunningServer,
) -> None:
    async with connect(any_server.url) as peer:
        await peer.handshake()
        start = {
            "id": 1,
            "method": "process/start",
            "params": {
                "processId": "p",
                "argv": ["sh", "-c", "echo hi"],
                "cwd": "file:///tmp",
                "env": {"PATH": "/usr/bin:/bin"},
                "tty": False,
            },
        }
        read = {"id": 2, "method": "process/read", "params": {"processId": "p"}}
        await peer.ws.send_str(json.dumps(start))
        await peer.ws.send_str(json.dumps(read))
        answers: dict[int, dict[str, object]] = {}
        while len(answers) < 2:
            reply = await peer.recv()
            if "id" in reply and "method" not in reply:
                answers[reply["id"]] = reply
    assert "result" in answers[1], answers[1]
    assert "result" in answers[2], answers[2]
