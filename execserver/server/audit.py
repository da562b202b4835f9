"""The audit log: one JSON object per line (``--audit-log PATH``).

Records who did what on this executor: sessions opening, detaching, resuming
and closing; processes starting and exiting; fs writes and removals; refused
websocket upgrades. It never records secrets: no environment values, no
tokens, and of a command line only ``argv[0]`` plus a SHA-256 of the full
argv (arguments often carry credentials; the hash still lets an operator
match a known command).

Lines are written by one background thread, so a slow disk never blocks the
event loop; ``aclose`` flushes everything before the daemon exits. Services
report through the runtime's telemetry (execserver.server.telemetry), which
writes the process and fs records here.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import os
import queue
import threading
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from execserver.server.runtime import ServerRuntime
    from execserver.server.sessions import Session

__all__ = [
    "AuditLog",
    "AuditLogError",
    "argv_digest",
    "process_start_fields",
    "sandbox_summary",
    "session_attached",
    "session_detached",
]

log = logging.getLogger(__name__)

_STOP = object()


class AuditLogError(Exception):
    """The audit log cannot be opened: the daemon refuses to start without it."""


class AuditLog:
    """``emit`` is a cheap no-op when no path is configured."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._file: IO[bytes] | None = None
        if path is not None:
            try:
                # 0600: the log names paths and commands of every client.
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise AuditLogError(f"cannot open audit log {path}: {exc.strerror}") from None
            self._file = os.fdopen(fd, "ab")
            self._thread = threading.Thread(target=self._write_loop, name="audit-log", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def emit(self, event: str, **fields: Any) -> None:
        if self._file is None:
            return
        record = {"ts": _now(), "event": event, **fields}
        self._queue.put(msgspec.json.encode(record) + b"\n")

    def _write_loop(self) -> None:
        assert self._file is not None
        while True:
            item = self._queue.get()
            batch = [item]
            # Drain what is queued so a burst costs one flush.
            while not self._queue.empty():
                batch.append(self._queue.get())
            stop = any(line is _STOP for line in batch)
            try:
                self._file.write(b"".join(line for line in batch if isinstance(line, bytes)))
                self._file.flush()
            except OSError:
                log.exception("audit log write failed")
            if stop:
                return

    def close_sync(self) -> None:
        if self._thread is None or self._file is None:
            return
        self._queue.put(_STOP)
        self._thread.join()
        self._file.close()
        self._thread = None
        self._file = None

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close_sync)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")


def argv_digest(argv: Sequence[str]) -> str:
    """SHA-256 over the NUL-separated argv: identifies a command without storing it."""
    joined = b"\0".join(arg.encode("utf-8", "surrogateescape") for arg in argv)
    return "sha256:" + hashlib.sha256(joined).hexdigest()


def process_start_fields(argv: Sequence[str], cwd: str | None, tty: bool) -> dict[str, Any]:
    """The ``process.start`` fields for a command line (callers add ids)."""
    return {
        "argv0": argv[0] if argv else "",
        "argvSha256": argv_digest(argv),
        "argc": len(argv),
        "cwd": cwd,
        "tty": tty,
    }


def sandbox_summary(sandbox: object | None) -> dict[str, Any] | None:
    """What kind of isolation a request asked for (not its paths): profile type,
    filesystem type with its entry count, network mode."""
    if sandbox is None:
        return None
    plain = msgspec.to_builtins(sandbox)
    permissions = (plain.get("permissions") if isinstance(plain, dict) else None) or {}
    file_system = permissions.get("file_system") or {}
    return {
        "permissions": permissions.get("type"),
        "fileSystem": file_system.get("type"),
        "entries": len(file_system.get("entries") or []),
        "network": permissions.get("network"),
    }


# ---- session lifecycle (called by the connection) ------------------------------


class _SessionWatch:
    """Lives in the session's scoped state; its ``aclose`` runs when the session ends
    (TTL expiry or shutdown), which is where the close is audited and counted."""

    def __init__(self, runtime: ServerRuntime, session_id: str) -> None:
        self._runtime = runtime
        self._session_id = session_id

    async def aclose(self) -> None:
        reason = "shutdown" if self._runtime.shutting_down else "expired"
        if reason == "expired":
            self._runtime.metrics.sessions_expired.inc()
        self._runtime.audit.emit("session.close", session=self._session_id, reason=reason)


def session_attached(runtime: ServerRuntime, session: Session, peer: str) -> None:
    resumed = session.state.peek(_SessionWatch) is not None
    if resumed:
        runtime.metrics.sessions_resumed.inc()
        runtime.audit.emit("session.resume", session=session.id, peer=peer)
        return
    session.state.get(_SessionWatch, lambda: _SessionWatch(runtime, session.id))
    runtime.metrics.sessions_opened.inc()
    runtime.audit.emit("session.open", session=session.id, peer=peer)


def session_detached(runtime: ServerRuntime, session: Session, peer: str) -> None:
    if not runtime.shutting_down and not session.closed:
        runtime.audit.emit("session.detach", session=session.id, peer=peer)
