"""``--state-dir``: the keepers opened at start-up, and the sessions a previous daemon
left re-adopted (execserver/processes/keepers.py, execserver/keeper/).

A restored session is detached with its TTL running from the start of this
daemon, exactly as if its connection had just dropped: ``initialize
{resumeSessionId}`` re-attaches it, and each of its processes replays its
keeper's journal, so ``process/read`` after the last seq a client saw returns
exactly what it missed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from execserver.containment import ProcessCgroups
from execserver.processes.keepers import KeeperHost
from execserver.processes.supervisor import Supervisor
from execserver.processes.table import ProcessTable
from execserver.server.runtime import ServerRuntime
from execserver.server.sessions import Session

__all__ = ["leave_keepers", "open_keepers", "readopt_sessions"]

log = logging.getLogger(__name__)


def open_keepers(runtime: ServerRuntime) -> KeeperHost | None:
    """With --state-dir: the keeper zygote started, and the server's Supervisor made
    with it (processes/service.py finds it in the server's state)."""
    config = runtime.config
    if config.state_dir is None:
        return None
    host = KeeperHost(
        config.state_dir,
        ttl_s=config.session_ttl_s,
        drain_timeout_s=config.process_drain_timeout_s,
        retained_bytes=config.process_retained_bytes,
    )
    runtime.resources.provide(KeeperHost, host)
    runtime.state.get(Supervisor, lambda: Supervisor(keepers=host))
    return host


def _new_session(session_id: str, principal: str | None) -> Session:
    if principal is None:
        return Session(session_id)
    make: Callable[..., Session] = Session  # Session(id, principal) with tenancy
    return make(session_id, principal)


def readopt_sessions(runtime: ServerRuntime) -> int:
    """Every session the state directory holds, restored detached; the count."""
    host = runtime.resources.get(KeeperHost)
    if host is None:
        return 0
    config = runtime.config
    supervisor = runtime.state.get(Supervisor, lambda: Supervisor(keepers=host))
    restored = 0
    telemetry = runtime.telemetry
    for saved in host.saved_sessions():
        session = _new_session(saved.id, saved.principal)
        runtime.sessions.restore(session)

        def table(session: Session = session) -> ProcessTable:
            # The same table processes/service.py makes on a session's first start.
            return ProcessTable(
                session,
                supervisor,
                retention_s=config.exited_process_retention_s,
                retained_bytes=config.process_retained_bytes,
                drain_timeout_s=config.process_drain_timeout_s,
                limits=config.limits,
                telemetry=runtime.telemetry,
                containment=runtime.resources.get(ProcessCgroups),
            )

        processes = session.state.get(ProcessTable, table)
        for process_id, name in saved.processes.items():
            proc = processes.readopt(process_id, name)
            if proc is not None:
                session_id = saved.id

                def closed(p: Any, session_id: str = session_id) -> None:
                    telemetry.process_closed(session_id, p)

                proc.close_hooks.append(closed)
        restored += 1
        log.info(
            "session %s re-adopted from %s: %d process(es)",
            saved.id,
            host.state_dir,
            len(processes),
        )
    return restored


def leave_keepers(runtime: ServerRuntime) -> None:
    """Daemon shutdown with --state-dir: the sessions close without killing anything
    (their keepers wait for the next daemon, each until the session TTL)."""
    host = runtime.resources.get(KeeperHost)
    if host is not None:
        host.leave()
