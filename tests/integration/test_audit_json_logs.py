"""`--log-format json`: every stderr line is one JSON object; stdout still carries only
the listen URL."""

from __future__ import annotations

import asyncio
import json

from tests.support.servers import execserver_command


async def test_json_logs_are_one_object_per_line_on_stderr() -> None:
    proc = await asyncio.create_subprocess_exec(
        *execserver_command(["--listen", "ws://127.0.0.1:0", "--log-format", "json"]),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    url = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
    assert url.startswith("ws://127.0.0.1:")
    proc.terminate()
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert out == b""
    lines = [json.loads(line) for line in err.decode().splitlines()]
    assert lines, "no log lines"
    for entry in lines:
        assert {"ts", "level", "logger", "msg"} <= entry.keys()
    assert any(e["msg"] == f"listening on {url}" for e in lines)
