"""JSON-RPC frames recorded between the codex CLI and an exec-server."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLIENT = "C->S"
SERVER = "S->C"


@dataclass(frozen=True)
class Frame:
    conn: int  # which connection (the CLI may open more than one)
    direction: str  # CLIENT or SERVER
    message: dict[str, Any]


@dataclass
class FrameLog:
    frames: list[Frame] = field(default_factory=list)

    def add(self, conn: int, direction: str, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            message = {"unparsed": text}
        if not isinstance(message, dict):
            message = {"unparsed": text}
        self.frames.append(Frame(conn, direction, message))

    @classmethod
    def from_jsonl(cls, path: Path) -> FrameLog:
        """Read the log written by ``stdio_tee`` (one JSON object per line)."""
        log = cls()
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    record = json.loads(line)
                    if record["dir"] in (CLIENT, SERVER):
                        log.add(0, record["dir"], record["line"])
        return log

    def methods(self) -> list[str]:
        """Methods the CLI called (requests and notifications), in order."""
        return [
            f.message["method"]
            for f in self.frames
            if f.direction == CLIENT and "method" in f.message
        ]

    def requests(self, method: str) -> list[Frame]:
        return [
            f
            for f in self.frames
            if f.direction == CLIENT and f.message.get("method") == method and "id" in f.message
        ]

    def notifications(self, method: str) -> list[dict[str, Any]]:
        return [
            f.message.get("params", {})
            for f in self.frames
            if f.direction == SERVER and f.message.get("method") == method
        ]

    def reply(self, request: Frame) -> dict[str, Any]:
        """The server's answer (the whole response object) to one request."""
        for f in self.frames:
            if (
                f.conn == request.conn
                and f.direction == SERVER
                and "method" not in f.message
                and f.message.get("id") == request.message["id"]
            ):
                return f.message
        raise AssertionError(f"no reply to {request.message}")

    def calls(self, method: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(params, reply) of every request of ``method``."""
        return [(f.message.get("params") or {}, self.reply(f)) for f in self.requests(method)]

    def process_output(self, process_id: str) -> bytes:
        """All output of one process, from notifications and process/read answers.

        The CLI may learn output either way; a chunk seen both ways is counted once (by seq).
        """
        chunks: dict[int, str] = {}
        for params in self.notifications("process/output"):
            if params.get("processId") == process_id:
                chunks[params["seq"]] = params["chunk"]
        for params, reply in self.calls("process/read"):
            if params.get("processId") == process_id:
                for chunk in (reply.get("result") or {}).get("chunks", []):
                    chunks[chunk["seq"]] = chunk["chunk"]
        return b"".join(base64.b64decode(chunks[seq]) for seq in sorted(chunks))

    def process_exit(self, process_id: str) -> dict[str, Any] | None:
        """``{exitCode, sandboxDenied}`` as the server reported it (event or read)."""
        for params in self.notifications("process/exited"):
            if params.get("processId") == process_id:
                return {"exitCode": params["exitCode"], "sandboxDenied": params["sandboxDenied"]}
        for params, reply in self.calls("process/read"):
            result = reply.get("result") or {}
            if params.get("processId") == process_id and result.get("exited"):
                return {"exitCode": result["exitCode"], "sandboxDenied": result["sandboxDenied"]}
        return None

    def dump(self, limit: int = 400) -> str:
        """Readable transcript for assertion messages (each frame cut to ``limit`` chars)."""
        return "\n".join(
            f"[{f.conn}] {f.direction} {json.dumps(f.message)[:limit]}" for f in self.frames
        )
