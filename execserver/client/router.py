"""ProcessRouter: which :class:`RemoteProcess` gets a ``process/*`` notification.

The client registers a process here before it sends ``process/start`` (its
events can arrive before the start's answer) and the process leaves by itself
once its stream is finished. The router decodes the three process
notifications and hands each event to its process; everything it does goes
through the process's public methods.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from execserver.client.calls import Caller
from execserver.client.events import Closed, Exited, Output
from execserver.client.params import decode_result
from execserver.client.process import RemoteProcess
from execserver.wire import methods
from execserver.wire.process import (
    ProcessClosedNotification,
    ProcessExitedNotification,
    ProcessOutputNotification,
)

__all__ = ["PROCESS_NOTIFICATIONS", "ProcessInfo", "ProcessRouter", "ProcessState"]

log = logging.getLogger(__name__)

PROCESS_NOTIFICATIONS = frozenset(
    {methods.PROCESS_OUTPUT, methods.PROCESS_EXITED, methods.PROCESS_CLOSED}
)


# How many finished processes ``client.processes()`` remembers (oldest go first).
FINISHED_KEPT: Final = 10_000

ProcessState = Literal["starting", "running", "exited", "closed", "failed"]


@dataclass(frozen=True)
class ProcessInfo:
    """One process this client started, as ``client.processes()`` lists it.

    ``state``: ``starting`` (``process/start`` not answered yet), ``running``,
    ``exited`` (exit code known, output may still come), ``closed`` (all
    output delivered), ``failed`` (the stream could not be completed; see
    ``failure``). ``argv`` is what was sent (for ``run`` with ``stdin=``, the
    staging shell's argv ending with the command's)."""

    process_id: str
    argv: list[str]
    tty: bool
    state: ProcessState
    exit_code: int | None
    sandbox_denied: bool
    failure: str | None
    started_at: datetime.datetime


class _Record:
    """Bookkeeping for one process: the process while it runs, then its end."""

    __slots__ = ("argv", "final", "proc", "started_at")

    def __init__(self, proc: RemoteProcess, argv: list[str]) -> None:
        self.proc: RemoteProcess | None = proc
        self.argv = argv
        self.started_at = datetime.datetime.now(datetime.UTC)
        self.final: ProcessInfo | None = None

    def info(self, proc: RemoteProcess) -> ProcessInfo:
        status = proc.exit_status
        state: ProcessState
        if proc.failure is not None:
            state = "failed"
        elif proc.finished:
            state = "closed"
        elif status is not None:
            state = "exited"
        elif proc.is_live:
            state = "running"
        else:
            state = "starting"
        return ProcessInfo(
            process_id=proc.process_id,
            argv=list(self.argv),
            tty=proc.tty,
            state=state,
            exit_code=None if status is None else status.exit_code,
            sandbox_denied=False if status is None else status.sandbox_denied,
            failure=proc.failure,
            started_at=self.started_at,
        )

    def snapshot(self) -> ProcessInfo:
        if self.final is not None:
            return self.final
        assert self.proc is not None
        return self.info(self.proc)


class ProcessRouter:
    """The live processes of one client, by process id; calling it lists every
    process of this client (running and finished), oldest first."""

    def __init__(self) -> None:
        self._processes: dict[str, RemoteProcess] = {}
        self._records: dict[str, _Record] = {}

    def __call__(self) -> list[ProcessInfo]:
        """Every process this client started (and not failed to start), oldest
        first: id, argv, state, exit code. Client-side bookkeeping: the protocol
        has no list method; a resumed session's processes started by another
        client are not in it."""
        return [record.snapshot() for record in self._records.values()]

    def __contains__(self, process_id: object) -> bool:
        return process_id in self._processes

    def get(self, process_id: str) -> RemoteProcess | None:
        return self._processes.get(process_id)

    def open(
        self, caller: Caller, process_id: str, *, tty: bool, argv: Sequence[str] = ()
    ) -> RemoteProcess:
        """A new process routed from now on; leaves the router when it finishes."""
        if process_id in self._processes:
            raise ValueError(f"process id {process_id!r} is already in use by this client")
        proc = RemoteProcess(caller, process_id, tty=tty, on_finished=self._finished)
        self._processes[process_id] = proc
        self._records.pop(process_id, None)  # an id used again lists the new process
        self._records[process_id] = _Record(proc, list(argv))
        return proc

    def discard(self, proc: RemoteProcess) -> None:
        """Forget ``proc`` (a start that failed): no route, not listed."""
        if self._processes.get(proc.process_id) is proc:
            del self._processes[proc.process_id]
        record = self._records.get(proc.process_id)
        if record is not None and record.proc is proc:
            del self._records[proc.process_id]

    def _finished(self, proc: RemoteProcess) -> None:
        """``proc``'s stream ended: stop routing, keep how it ended for the list."""
        if self._processes.get(proc.process_id) is proc:
            del self._processes[proc.process_id]
        record = self._records.get(proc.process_id)
        if record is not None and record.proc is proc:
            record.final, record.proc = record.info(proc), None
        finished = [pid for pid, r in self._records.items() if r.final is not None]
        for pid in finished[: max(0, len(finished) - FINISHED_KEPT)]:
            del self._records[pid]

    def live(self) -> list[RemoteProcess]:
        """Started processes whose stream is not finished."""
        return [proc for proc in self._processes.values() if proc.is_live]

    def fail_all(self, message: str) -> None:
        """End every routed process with ``Failed(message)`` and forget them all."""
        for proc in list(self._processes.values()):
            proc.fail(message)
        self._processes.clear()

    def route(self, method: str, params: msgspec.Raw) -> bool:
        """Deliver one notification; False when ``method`` is not a process event."""
        if method == methods.PROCESS_OUTPUT:
            out = decode_result(params, ProcessOutputNotification)
            self._deliver(out.process_id, Output(out.seq, out.stream, out.chunk))
        elif method == methods.PROCESS_EXITED:
            ex = decode_result(params, ProcessExitedNotification)
            self._deliver(ex.process_id, Exited(ex.seq, ex.exit_code, ex.sandbox_denied))
        elif method == methods.PROCESS_CLOSED:
            cl = decode_result(params, ProcessClosedNotification)
            self._deliver(cl.process_id, Closed(cl.seq))
        else:
            return False
        return True

    def _deliver(self, process_id: str, event: Output | Exited | Closed) -> None:
        proc = self._processes.get(process_id)
        if proc is None:
            log.debug("event for unknown process %s ignored", process_id)
            return
        proc.deliver(event)
