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
writes the process and fs records here; the session records come from
execserver.server.session_audit.

The queue to the writer holds at most ``QUEUE_RECORDS`` lines. When the disk is
so slow that it fills, ``emit`` drops the record instead of blocking the loop (or
growing memory without bound): the drops are counted (``dropped``, the
``execserver_audit_records_dropped`` metric), logged, and the writer puts an
``audit.dropped`` record with their number into the log once it catches up, so a
gap in the log is visible in the log itself.
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
from typing import IO, Any

import msgspec

__all__ = [
    "QUEUE_RECORDS",
    "AuditLog",
    "AuditLogError",
    "argv_digest",
    "process_start_fields",
    "sandbox_summary",
]

log = logging.getLogger(__name__)

_STOP = object()

# Records waiting for the writer thread: about 3 MB at ~300 bytes a record, many
# seconds of a busy daemon's records; past it a record is dropped (and counted).
QUEUE_RECORDS = 10_000


class AuditLogError(Exception):
    """The audit log cannot be opened: the daemon refuses to start without it."""


class AuditLog:
    """``emit`` is a cheap no-op when no path is configured."""

    def __init__(self, path: str | None = None, *, queue_records: int = QUEUE_RECORDS) -> None:
        self.path = path
        self._queue: queue.Queue[object] = queue.Queue(queue_records)
        # Records refused because the queue was full: ``dropped`` in all, and those
        # the log itself has not been told about yet (the writer reports them).
        self.dropped = 0
        self._unreported = 0
        self._unreported_lock = threading.Lock()
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
        try:
            self._queue.put_nowait(msgspec.json.encode(record) + b"\n")
        except queue.Full:
            self._dropped(event)

    def _dropped(self, event: str) -> None:
        with self._unreported_lock:
            self.dropped += 1
            self._unreported += 1
            first = self._unreported == 1
        if first:  # once per episode: a full queue must not flood the daemon log too
            log.warning(
                "audit log %s: writer %d records behind; dropping records (first: %s)",
                self.path,
                self._queue.maxsize,
                event,
            )

    def _take_unreported(self) -> bytes:
        """The ``audit.dropped`` record for drops not yet in the log, or nothing."""
        with self._unreported_lock:
            count, self._unreported = self._unreported, 0
        if not count:
            return b""
        record = {"ts": _now(), "event": "audit.dropped", "count": count}
        return msgspec.json.encode(record) + b"\n"

    def _write_loop(self) -> None:
        assert self._file is not None
        while True:
            item = self._queue.get()
            batch = [item]
            # Drain what is queued so a burst costs one flush.
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            # After the records that were queued before the drops began.
            batch.append(self._take_unreported())
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
        self._queue.put(_STOP)  # waits for room: the stop is never dropped
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
