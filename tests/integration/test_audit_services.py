"""Audit and metrics of a scripted workload: processes (start/exit) and fs changes."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from tests.support.http import http_get
from tests.support.rpc import RpcClient, connect
from tests.support.servers import start_server

SECRET = "hunter2-in-argv"


async def run_to_close(rpc: RpcClient, params: dict[str, Any]) -> dict[str, Any]:
    assert "result" in await rpc.call("process/start", params)
    after = 0
    while True:
        reply = await rpc.call(
            "process/read", {"processId": params["processId"], "afterSeq": after, "waitMs": 2000}
        )
        result: dict[str, Any] = reply["result"]
        if result["closed"]:
            return result
        after = result["nextSeq"] - 1


async def test_processes_and_fs_changes_are_audited_and_counted(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    work = tmp_path / "work"
    work.mkdir()
    async with start_server("execserver", ["--audit-log", str(audit), "--metrics"]) as server:
        async with connect(server.url, handshake=False) as rpc:
            session_id = (await rpc.handshake()).result["sessionId"]
            argv = ["/bin/sh", "-c", f"echo hello; exit 3 # {SECRET}"]
            params = {
                "processId": "p1",
                "argv": argv,
                "cwd": work.as_uri(),
                "env": {"TOKEN": SECRET},
                "tty": False,
            }
            result = await run_to_close(rpc, params)
            assert result["exitCode"] == 3
            target = (work / "a.txt").as_uri()
            data = base64.b64encode(b"abc").decode()
            calls = [
                ("fs/writeFile", {"path": target, "dataBase64": data}),
                ("fs/createDirectory", {"path": (work / "d").as_uri(), "recursive": True}),
                (
                    "fs/copy",
                    {
                        "sourcePath": target,
                        "destinationPath": (work / "b.txt").as_uri(),
                        "recursive": False,
                    },
                ),
                ("fs/remove", {"path": (work / "b.txt").as_uri()}),
            ]
            for method, call_params in calls:
                assert "result" in await rpc.call(method, call_params), method
        _, metrics = await http_get(server.url, "/metrics")
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert SECRET not in audit.read_text()
    by_event = {r["event"]: r for r in records}
    start, exit_ = by_event["process.start"], by_event["process.exit"]
    assert start["session"] == session_id and start["processId"] == "p1"
    assert start["argv0"] == "/bin/sh" and start["argc"] == 3
    assert start["cwd"] == str(work)
    assert start["sandbox"] is None
    assert exit_["exitCode"] == 3 and exit_["sandboxDenied"] is False
    # A small command without a cgroup: its peak cannot be told apart from the forked
    # daemon image, so none is claimed (test_process_limits measures real peaks).
    assert exit_["wallS"] >= 0 and exit_["peakRssKib"] is None
    assert by_event["fs.write"]["path"] == str(work / "a.txt")
    assert by_event["fs.write"]["bytes"] == 3
    assert by_event["fs.mkdir"]["path"] == str(work / "d")
    assert by_event["fs.copy"]["path"] == str(work / "b.txt")
    assert by_event["fs.copy"]["source"] == str(work / "a.txt")
    assert by_event["fs.remove"]["path"] == str(work / "b.txt")
    assert "execserver_processes_started_total 1.0" in metrics
    assert "execserver_processes_live 0.0" in metrics
    assert "execserver_process_duration_seconds_count 1.0" in metrics
    assert 'execserver_bytes_streamed_total{stream="stdout"} 6.0' in metrics
