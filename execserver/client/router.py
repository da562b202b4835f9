"""ProcessRouter: which :class:`RemoteProcess` gets a ``process/*`` notification.

The client registers a process here before it sends ``process/start`` (its
events can arrive before the start's answer) and the process leaves by itself
once its stream is finished. The router decodes the three process
notifications and hands each event to its process; everything it does goes
through the process's public methods.
"""

from __future__ import annotations

import logging

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

__all__ = ["PROCESS_NOTIFICATIONS", "ProcessRouter"]

log = logging.getLogger(__name__)

PROCESS_NOTIFICATIONS = frozenset(
    {methods.PROCESS_OUTPUT, methods.PROCESS_EXITED, methods.PROCESS_CLOSED}
)


class ProcessRouter:
    """The live processes of one client, by process id."""

    def __init__(self) -> None:
        self._processes: dict[str, RemoteProcess] = {}

    def __contains__(self, process_id: object) -> bool:
        return process_id in self._processes

    def get(self, process_id: str) -> RemoteProcess | None:
        return self._processes.get(process_id)

    def open(self, caller: Caller, process_id: str, *, tty: bool) -> RemoteProcess:
        """A new process routed from now on; leaves the router when it finishes."""
        if process_id in self._processes:
            raise ValueError(f"process id {process_id!r} is already in use by this client")
        proc = RemoteProcess(caller, process_id, tty=tty, on_finished=self.discard)
        self._processes[process_id] = proc
        return proc

    def discard(self, proc: RemoteProcess) -> None:
        """Stop routing to ``proc`` (a start that failed, a finished stream)."""
        if self._processes.get(proc.process_id) is proc:
            del self._processes[proc.process_id]

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
