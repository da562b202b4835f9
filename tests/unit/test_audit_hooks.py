"""The telemetry services report to (audit + metrics): what a record holds, and what it
never holds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from execserver.config import ServerConfig
from execserver.server import audit
from execserver.server.audit import AuditLog
from execserver.server.runner import build_method_table
from execserver.server.runtime import ServerRuntime
from execserver.server.sessions import SessionRegistry
from execserver.wire.sandbox import (
    DisabledPermissions,
    FileSystemSandboxContext,
)


def runtime_with_audit(path: Path) -> ServerRuntime:
    return ServerRuntime(
        config=ServerConfig(),
        methods=build_method_table(),
        sessions=SessionRegistry(1.0),
        audit=AuditLog(str(path)),
    )


def read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@dataclass
class FakeAccounting:
    wall_s: float
    cpu_s: float
    max_rss_kib: int | None
    peak_memory_bytes: int | None = None
    oom_kills: int = 0
    pids_refused: int = 0


@dataclass
class FakeProcess:
    """The attributes of ManagedProcess the close hook reads."""

    process_id: str
    exit_code: int | None
    sandbox_denied: bool
    output_bytes: dict[str, int]
    accounting: FakeAccounting | None


async def test_process_records_keep_argv0_and_a_digest_but_not_the_arguments(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.jsonl"
    runtime = runtime_with_audit(log)
    argv = ["curl", "-H", "Authorization: Bearer SUPERSECRET", "https://example.test"]
    telemetry = runtime.telemetry
    telemetry.process_started("s1", "p1", argv, cwd="/work", tty=False, sandbox=None)
    closed = FakeProcess(
        "p1", 0, True, {"stdout": 5, "stderr": 2}, FakeAccounting(1.23456, 0.5, 2048)
    )
    telemetry.process_closed("s1", closed)
    telemetry.process_closed("s1", FakeProcess("p2", None, False, {}, None))
    await runtime.aclose()
    start, exit_, bare = read(log)
    assert "SUPERSECRET" not in log.read_text()
    assert start["event"] == "process.start"
    assert start["argv0"] == "curl" and start["argc"] == 4
    assert start["argvSha256"] == audit.argv_digest(argv)
    assert start["cwd"] == "/work" and start["sandbox"] is None
    assert exit_ == {
        "ts": exit_["ts"],
        "event": "process.exit",
        "session": "s1",
        "processId": "p1",
        "exitCode": 0,
        "sandboxDenied": True,
        "wallS": 1.235,
        "cpuS": 0.5,
        "peakRssKib": 2048,
        "peakMemoryBytes": None,
    }
    assert bare["exitCode"] is None and bare["wallS"] is None
    metrics = runtime.metrics.render().decode()
    assert 'execserver_bytes_streamed_total{stream="stdout"} 5.0' in metrics
    assert 'execserver_bytes_streamed_total{stream="stderr"} 2.0' in metrics


def test_argv_digest_tells_commands_apart() -> None:
    assert audit.argv_digest(["a", "b"]) != audit.argv_digest(["a b"])
    assert audit.argv_digest(["ab"]) != audit.argv_digest(["a", "b"])


def test_sandbox_summary_names_the_profile_without_paths() -> None:
    ctx = FileSystemSandboxContext(
        permissions=DisabledPermissions(), windows_sandbox_level="disabled"
    )
    assert audit.sandbox_summary(ctx) == {
        "permissions": "disabled",
        "fileSystem": None,
        "entries": 0,
        "network": None,
    }
    assert audit.sandbox_summary(None) is None


async def test_fs_records_name_the_operation_and_path(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    runtime = runtime_with_audit(log)
    runtime.telemetry.fs_changed("s1", "write", "/work/a.txt", bytes=3)
    await runtime.aclose()
    (record,) = read(log)
    assert record["event"] == "fs.write"
    assert record["path"] == "/work/a.txt" and record["bytes"] == 3


async def test_disabled_audit_log_writes_nothing(tmp_path: Path) -> None:
    disabled = AuditLog()
    disabled.emit("session.open", session="x")
    assert not disabled.enabled
    await disabled.aclose()
