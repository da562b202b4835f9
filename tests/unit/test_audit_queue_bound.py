"""The audit log's queue to its writer thread is bounded: a writer stuck on a slow
disk costs dropped records (counted, logged, reported in the log), never memory
without limit and never a blocked event loop."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from execserver.server.audit import AuditLog
from execserver.server.metrics import Metrics

# Over a pipe's 64 KiB buffer: the writer blocks on its first write.
_BIG = "x" * 100_000


def _drain(fd: int, into: list[bytes]) -> None:
    """Read the FIFO until the log closes its end (the disk catching up)."""
    os.set_blocking(fd, True)
    while chunk := os.read(fd, 1 << 20):
        into.append(chunk)


def test_a_stuck_writer_drops_records_without_blocking_and_says_so_in_the_log(
    tmp_path: Path,
) -> None:
    # A FIFO nobody reads yet is a disk that does not keep up.
    path = tmp_path / "audit.fifo"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    log = AuditLog(str(path), queue_records=4)
    metrics = Metrics()
    metrics.track_audit_drops(lambda: log.dropped)
    try:
        # Nobody reads the FIFO until the end: an emit that waited for the writer
        # would hang here (and the test time out), so getting past the loop is the
        # proof that emit never blocks.
        for index in range(50):
            log.emit("fs.write", index=index, pad=_BIG)
        # At most the writer's batch in hand (it takes all that is queued at once:
        # up to four) and the four queued since got through.
        assert log.dropped >= 50 - 4 - 4
        assert f"execserver_audit_records_dropped {float(log.dropped)}" in (
            metrics.render().decode()
        )
        dropped = log.dropped
    finally:
        received: list[bytes] = []
        draining = threading.Thread(target=_drain, args=(reader, received))
        draining.start()
        log.close_sync()  # flushes what was queued, then the drop report
        draining.join(10)
        os.close(reader)
    records = [json.loads(line) for line in b"".join(received).splitlines()]
    written = [r for r in records if r["event"] == "fs.write"]
    reports = [r for r in records if r["event"] == "audit.dropped"]
    assert len(written) + dropped == 50
    assert sum(r["count"] for r in reports) == dropped
