"""The one observer services report to: audit records and metrics in one object.

Services say what happened (a process started, an fs path changed, bytes
streamed); the server's implementation decides what goes to the audit log and
what to the Prometheus counters. Neither audit fields nor metric objects leak
into the services.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["ClosedProcess", "ExitedProcess", "ProcessAccounting", "Telemetry"]


class ProcessAccounting(Protocol):
    """Resource use of an exited process tree."""

    wall_s: float
    cpu_s: float
    max_rss_kib: int | None
    peak_memory_bytes: int | None
    oom_kills: int
    pids_refused: int


class ExitedProcess(Protocol):
    """What the observer reads of a process that has exited."""

    sandbox_denied: bool

    @property
    def accounting(self) -> ProcessAccounting | None: ...


class ClosedProcess(ExitedProcess, Protocol):
    """What the observer reads of a process that is closed (exited, output drained)."""

    process_id: str
    exit_code: int | None
    output_bytes: dict[str, int]


class Telemetry(Protocol):
    def process_spawned(self) -> None:
        """A child process was spawned and registered (counted as live until it exits)."""
        ...

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
        """The start as the client asked for it: its argv (before any sandbox wrapper),
        cwd and the kind of isolation requested."""
        ...

    def process_exited(self, process: ExitedProcess) -> None:
        """The child exited (its output may still be draining)."""
        ...

    def process_closed(self, session_id: str, process: ClosedProcess) -> None:
        """The process is closed: its exit code, accounting and output byte counts are final."""
        ...

    def fs_changed(self, session_id: str | None, op: str, path: str, **fields: Any) -> None:
        """A successful change through fs/*; ``op``: write, remove, copy, mkdir, writeBlock."""
        ...

    def stream_counter(self, stream: str) -> Callable[[int], None]:
        """A counter of bytes produced for clients on ``stream`` (e.g. ``http``)."""
        ...
