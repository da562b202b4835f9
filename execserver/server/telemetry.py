"""The server's observer: services report events once, here they become audit
records (execserver.server.audit) and Prometheus metrics (execserver.server.metrics)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from execserver.config import ProcessLimitsConfig
from execserver.kernel.telemetry import ClosedProcess, ExitedProcess
from execserver.server.audit import AuditLog, process_start_fields, sandbox_summary
from execserver.server.metrics import Metrics

__all__ = ["ServerTelemetry"]


class ServerTelemetry:
    """Implements :class:`execserver.kernel.Telemetry` for one daemon."""

    def __init__(
        self,
        audit: AuditLog,
        metrics: Metrics,
        process_limits: ProcessLimitsConfig,
        principal_of: Callable[[str | None], str | None] | None = None,
    ) -> None:
        # With --tenants, every record of a session names its principal too.
        self._principal_of = principal_of
        self._audit_log = audit
        self._metrics = metrics
        # Named in process.limit records so an operator sees which cap was hit.
        self._process_limits = process_limits

    def _audit(self, event: str, **fields: Any) -> None:
        principal_of = self._principal_of
        if principal_of is not None:
            principal = principal_of(fields.get("session"))
            if principal is not None:
                fields["principal"] = principal
        self._audit_log.emit(event, **fields)

    def process_spawned(self) -> None:
        self._metrics.process_started()

    def process_started(
        self,
        session_id: str,
        process_id: str,
        argv: Sequence[str],
        *,
        cwd: str | None,
        tty: bool,
        sandbox: object | None,
    ) -> None:
        if self._principal_of is not None:
            self._metrics.principal_process_started(self._principal_of(session_id))
        self._audit(
            "process.start",
            session=session_id,
            processId=process_id,
            **process_start_fields(argv, cwd, tty),
            sandbox=sandbox_summary(sandbox),
        )

    def process_exited(self, process: ExitedProcess) -> None:
        acct = process.accounting
        wall = acct.wall_s if acct is not None else 0.0
        self._metrics.process_exited(wall, process.sandbox_denied)
        if acct is not None:
            self._metrics.process_usage(
                acct.cpu_s, acct.peak_memory_bytes, acct.oom_kills, acct.pids_refused
            )

    def process_closed(self, session_id: str, process: ClosedProcess) -> None:
        """Audits the exit and counts the process's output bytes per stream."""
        acct = process.accounting
        for stream, count in process.output_bytes.items():
            self._metrics.bytes_streamed.labels(stream).inc(count)
        emit = self._audit
        emit(
            "process.exit",
            session=session_id,
            processId=process.process_id,
            exitCode=process.exit_code,
            sandboxDenied=process.sandbox_denied,
            wallS=round(acct.wall_s, 3) if acct else None,
            cpuS=round(acct.cpu_s, 3) if acct else None,
            # The command's peak, never the daemon's (None when it cannot be told).
            peakRssKib=acct.max_rss_kib if acct else None,
            peakMemoryBytes=acct.peak_memory_bytes if acct else None,
        )
        if acct is not None and acct.oom_kills:
            emit(
                "process.limit",
                session=session_id,
                processId=process.process_id,
                limit="--process-memory-max",
                maxBytes=self._process_limits.memory_max_bytes,
                oomKills=acct.oom_kills,
                exitCode=process.exit_code,
            )
        if acct is not None and acct.pids_refused:
            emit(
                "process.limit",
                session=session_id,
                processId=process.process_id,
                limit="--process-pids-max",
                max=self._process_limits.pids_max,
                forksRefused=acct.pids_refused,
            )

    def fs_changed(self, session_id: str | None, op: str, path: str, **fields: Any) -> None:
        # Paths and sizes, never file contents.
        self._audit(f"fs.{op}", session=session_id, path=path, **fields)

    def stream_counter(self, stream: str) -> Callable[[int], None]:
        counter = self._metrics.bytes_streamed.labels(stream)
        return counter.inc
