"""The audit log of a scripted session: open, detach, resume, refused upgrade, close at
shutdown - one JSON object per line, and no credentials in it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.ops_client import raw_request, rpc_socket
from tests.servers import execserver_command, start_server

TOKEN = "audit-secret-token"


def read_audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_audit_log_records_the_session_story(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text(TOKEN)
    audit = tmp_path / "audit.jsonl"
    flags = [
        "--audit-log",
        str(audit),
        "--ws-auth",
        "capability-token",
        "--ws-token-file",
        str(tmp_path / "tok"),
    ]
    async with start_server("execserver", flags) as server:
        async with rpc_socket(server.url, TOKEN) as rpc:
            session_id = await rpc.handshake()
        async with rpc_socket(server.url, TOKEN) as rpc:
            assert await rpc.handshake(resume=session_id) == session_id
        assert (await raw_request(server.url, "/", {"Authorization": "Bearer wrong"}))[0] == 401
    # The server has exited (SIGTERM, graceful): everything is flushed.
    records = read_audit(audit)
    story = [(r["event"], r.get("session")) for r in records]
    assert story == [
        ("session.open", session_id),
        ("session.detach", session_id),
        ("session.resume", session_id),
        ("session.detach", session_id),
        ("auth.reject", None),
        ("session.close", session_id),
    ]
    assert records[-1]["reason"] == "shutdown"
    assert records[-2]["reason"] == "invalid websocket bearer token"
    assert all(r["ts"].endswith("+00:00") for r in records)
    assert TOKEN not in audit.read_text()
    assert audit.stat().st_mode & 0o777 == 0o600


async def test_unwritable_audit_log_stops_start_up(tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "audit.jsonl"
    proc = await asyncio.create_subprocess_exec(
        *execserver_command(["--audit-log", str(target)]),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert out == b""
    assert f"Error: cannot open audit log {target}" in err.decode()
