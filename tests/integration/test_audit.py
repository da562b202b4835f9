"""The audit log of a scripted session: open, detach, resume, refused upgrade, close at
shutdown - one JSON object per line, and no credentials in it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.support.http import http_get, raw_request
from tests.support.rpc import connect
from tests.support.servers import execserver_command, start_server

TOKEN = "audit-secret-token"


def read_audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def wait_for_events(path: Path, event: str, count: int) -> None:
    """The server notices a client's close asynchronously; wait until it has logged it
    (the deadline only bounds a hang)."""
    async with asyncio.timeout(30):
        while True:
            if count_events(path, event) >= count:
                return
            await asyncio.sleep(0.05)


def count_events(path: Path, event: str) -> int:
    return sum(r["event"] == event for r in read_audit(path)) if path.exists() else 0


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
        async with connect(server.url, handshake=False, token=TOKEN) as rpc:
            session_id = (await rpc.handshake()).result["sessionId"]
        await wait_for_events(audit, "session.detach", 1)  # detached: resumable now
        async with connect(server.url, handshake=False, token=TOKEN) as rpc:
            assert (await rpc.handshake(resume=session_id)).result["sessionId"] == session_id
        await wait_for_events(audit, "session.detach", 2)
        assert (await raw_request(server.url, "/", {"Authorization": "Bearer wrong"}))[0] == 401
    # The server has exited (SIGTERM, graceful): everything is flushed.
    records = read_audit(audit)
    story = [(r["event"], r["session"]) for r in records if r["event"].startswith("session.")]
    assert story == [
        ("session.open", session_id),
        ("session.detach", session_id),
        ("session.resume", session_id),
        ("session.detach", session_id),
        ("session.close", session_id),
    ]
    assert records[-1]["reason"] == "shutdown"
    rejects = [r for r in records if r["event"] == "auth.reject"]
    assert [r["reason"] for r in rejects] == ["invalid websocket bearer token"]
    assert rejects[0]["peer"] == "127.0.0.1"
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


async def test_expired_session_is_audited_and_counted(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    flags = ["--audit-log", str(audit), "--session-ttl", "0.2", "--metrics"]
    async with start_server("execserver", flags) as server:
        async with connect(server.url, handshake=False) as rpc:
            session_id = (await rpc.handshake()).result["sessionId"]
        await wait_for_events(audit, "session.close", 1)
        _, text = await http_get(server.url, "/metrics")
    closes = [r for r in read_audit(audit) if r["event"] == "session.close"]
    assert closes == [
        {
            "ts": closes[0]["ts"],
            "event": "session.close",
            "session": session_id,
            "reason": "expired",
        }
    ]
    assert "execserver_sessions_expired_total 1.0" in text
    assert "execserver_sessions 0.0" in text
