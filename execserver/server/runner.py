"""Start-up -> serve -> graceful shutdown (one owner for the daemon's lifetime).

This is the composition root: the only module that imports every service. It
registers their methods in one table, builds the runtime they are served from,
and hands each service the start-up objects it needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from execserver import REFERENCE_VERSION, __version__
from execserver.aio.tasks import TaskSet
from execserver.config import LimitsConfig, ProcessLimitsConfig, ServerConfig
from execserver.containment import ContainmentError, ProcessCgroups, open_process_cgroups
from execserver.discovery import service as discovery
from execserver.fs import service as fs
from execserver.http_request import service as http_request
from execserver.kernel.limits import describe_limit
from execserver.kernel.methods import MethodTable
from execserver.netproxy import service as netproxy
from execserver.netproxy.guard import protect_listener, release_listener
from execserver.netproxy.kept import SavedListeners
from execserver.netproxy.launch import NetworkHost, restore_network
from execserver.processes import service as processes
from execserver.processes.keepers import KeeperHost
from execserver.processes.managed import ManagedProcess
from execserver.processes.orphan_guard import OrphanGuard
from execserver.processes.supervisor import Supervisor, server_supervisor
from execserver.processes.table import ProcessTable
from execserver.sandbox.backend import SandboxBackend, log_backend, probe_backend
from execserver.sandbox.hidden import use_private_dir
from execserver.sandbox.keyring import isolate_session_keyring
from execserver.server import auth, lifecycle
from execserver.server.audit import AuditLog
from execserver.server.gil_tuning import shorten_switch_interval
from execserver.server.handover import (
    ControlServer,
    ControlSocketBusy,
    HandoverError,
    SuccessorLink,
    send_listeners,
    serving_pid,
    systemd_listeners,
    take_over,
)
from execserver.server.http_surface import HttpRequest, HttpResponse, UpgradeCheck
from execserver.server.listen import ListenAddress, parse_listen
from execserver.server.memory_tuning import freeze_startup_objects, tune_collector, tune_malloc
from execserver.server.runtime import ServerRuntime
from execserver.server.sessions import Session, SessionRegistry
from execserver.server.transport_stdio import serve_stdio
from execserver.server.transport_ws import WebsocketServer
from execserver.tenancy.directory import TenantDirectory, TenantGone
from execserver.tenancy.shares import connection_refusal
from execserver.tenancy.tenants_file import TenantTable

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 10.0
# How often a drain with --state-dir looks for processes that end with the daemon.
DRAIN_POLL_S = 0.2
# The reference exits with status 2 when --exit-on-stdin-close fires.
EXIT_STATUS_STDIN_CLOSED = 2


__all__ = [
    "EXIT_STATUS_STDIN_CLOSED",
    "SHUTDOWN_GRACE_S",
    "Server",
    "build_method_table",
    "build_runtime",
    "operational_checks",
    "too_many_connections",
]


def build_method_table() -> MethodTable:
    """Every method the daemon serves: the server's lifecycle methods and each service's."""
    table = MethodTable()
    lifecycle.register(table)
    processes.register(table)
    fs.register(table)
    http_request.register(table)
    discovery.register(table)
    netproxy.register(table)
    return table


def build_runtime(config: ServerConfig, tenants: TenantDirectory | None = None) -> ServerRuntime:
    runtime = ServerRuntime(
        config=config,
        methods=build_method_table(),
        sessions=SessionRegistry(config.session_ttl_s, tenants),
        audit=AuditLog(config.audit_log),
    )
    # Raises ContainmentError when limits are set and cannot be applied; None
    # without --process-*-max limits. Closed by ServerRuntime.aclose.
    cgroups = open_process_cgroups(config.process_limits, _quotas(tenants), config.child_nice)
    if cgroups is not None:
        runtime.resources.provide(ProcessCgroups, cgroups)
    # --state-dir: the keeper zygote (processes then outlive the daemon).
    open_keepers(runtime)
    return runtime


def _quotas(tenants: TenantDirectory | None) -> dict[str, ProcessLimitsConfig] | None:
    """Each principal's cgroup quota, for the containment factory (None: no tenants)."""
    if tenants is None:
        return None
    return {name: profile.quota for name, profile in tenants.table.tenants.items()}


def too_many_connections(limits: LimitsConfig, open_connections: int) -> HttpResponse | None:
    """The refusal of a websocket upgrade over --max-connections: 503 before any session
    exists (there is no JSON-RPC request to answer yet), so load balancers retry elsewhere."""
    maximum = limits.max_connections
    if maximum is None or open_connections < maximum:
        return None
    text = f"too many connections ({describe_limit('max_connections', maximum)} reached)"
    return HttpResponse.text(503, text, {"Retry-After": "1"})


def operational_checks(
    runtime: ServerRuntime, verifier: auth.TokenVerifier | None
) -> list[UpgradeCheck]:
    """Upgrade checks from the config: authentication first (an unauthenticated client
    learns nothing, not even the load), then the connection limit."""
    checks: list[UpgradeCheck] = []
    if verifier is not None:

        def rejected(request: HttpRequest, reason: str) -> None:
            runtime.metrics.connections_rejected.labels("auth").inc()
            runtime.metrics.auth_failures.labels(reason).inc()
            runtime.audit.emit("auth.reject", peer=request.remote, reason=reason)

        checks.append(auth.make_upgrade_check(verifier, rejected))

    tenants = runtime.resources.get(TenantDirectory)

    def connection_limit(request: HttpRequest) -> HttpResponse | None:
        principal = request.admission.principal
        if principal is not None and tenants is not None:
            # --tenants: the tenant's own share first, so that no tenant fills the
            # daemon's room; the daemon-wide limit stays as the backstop.
            refusal = tenant_connection_refusal(runtime, tenants, principal, request)
            if refusal is not None:
                return refusal
        refusal = too_many_connections(runtime.config.limits, len(runtime.connections))
        if refusal is not None:
            runtime.metrics.connections_rejected.labels("limit").inc()
            runtime.metrics.limit_rejections.labels("max_connections").inc()
        return refusal

    checks.append(connection_limit)
    return checks


def tenant_connection_refusal(
    runtime: ServerRuntime, tenants: TenantDirectory, principal: str, request: HttpRequest
) -> HttpResponse | None:
    """The refusal of a websocket upgrade over the tenant's ``max_connections`` share:
    503 + Retry-After as the daemon-wide one, its text naming the tenant's ceiling
    alone (never the daemon's count), and audited as every ceiling (tenant.refuse)."""
    try:
        profile = tenants.profile(principal)
    except TenantGone:
        return None  # initialize refuses it, naming the removal
    share = tenants.shares(profile).connections
    open_connections = sum(1 for conn in runtime.connections if conn.principal == principal)
    refusal = connection_refusal(profile, share, open_connections)
    if refusal is None:
        return None
    runtime.metrics.connections_rejected.labels("limit").inc()
    runtime.metrics.principal_refused(principal)
    runtime.audit.emit(
        "tenant.refuse",
        session=None,
        peer=request.remote,
        principal=principal,
        method="upgrade",
        reason=refusal.reason,
    )
    log.info("websocket upgrade refused: %s", refusal.message)
    return HttpResponse.text(503, refusal.message, {"Retry-After": "1"})


async def probe_sandbox_backend(config: ServerConfig) -> SandboxBackend:
    """The sandbox backend, probed once before serving: bwrap runs (seconds on a
    loaded host) happen in a worker thread, so no request ever waits for them."""
    backend = await asyncio.to_thread(
        probe_backend, bwrap=config.sandbox.bwrap, allow_landlock=config.sandbox.landlock
    )
    log_backend(backend)
    return backend


def _someone_serves(state_dir: str) -> bool:
    """Whether a daemon serves ``state_dir`` (one too busy to accept counts)."""
    try:
        return serving_pid(state_dir) is not None
    except ControlSocketBusy:
        return True


async def log_sandbox_report(backend: SandboxBackend) -> None:
    """The doctor's policy-shape table, in the start-up log: an operator learns at
    once that e.g. workspace-write requests will be refused on this host. The probe
    spawns sandboxes, so it runs in a thread while the daemon already serves."""
    from execserver.doctor import build_report, shape_lines
    from execserver.sandbox.shapes import DEFAULT_SHAPE

    try:
        report = await asyncio.to_thread(build_report, backend)
    except Exception as exc:  # a broken probe must not take the daemon down
        log.warning("sandbox probe failed: %s", exc)
        return
    default_ok = report.status(DEFAULT_SHAPE)
    emit = log.info if default_ok else log.warning
    # The shape table says what is refused; when the probe knows what would make
    # bubblewrap usable (an unmasked /proc in a container), say that too.
    remedy = f"\n  to use bubblewrap: {backend.bwrap_remedy}" if backend.bwrap_remedy else ""
    emit(
        "sandbox policy shapes (%s):\n%s%s",
        "workspace-write enforceable" if default_ok else "workspace-write WILL BE REFUSED",
        "\n".join(shape_lines(report.shapes)),
        remedy,
        extra={
            "shapes": {
                s.name: (s.mechanism if s.enforceable else f"refused: {s.detail}")
                for s in report.shapes
            }
        },
    )


class Server:
    def __init__(self, config: ServerConfig, upgrade_checks: list[UpgradeCheck] | None = None):
        self.config = config
        self.address: ListenAddress = parse_listen(config.listen)
        # Fail closed: a config that asks for auth (or that must have it) never serves
        # without it, however the Server was constructed.
        verifier = auth.startup_checks(config)
        # --tenants: the live table the upgrade check identifies principals in and
        # the services read profiles from; SIGHUP reloads it.
        self.tenants: TenantDirectory | None = None
        if isinstance(verifier, auth.TenantVerifier):
            self.tenants = verifier.directory
        self.runtime = build_runtime(config, self.tenants)
        if self.tenants is not None:
            self.runtime.resources.provide(TenantDirectory, self.tenants)
        self._upgrade_checks = [
            *operational_checks(self.runtime, verifier),
            *(upgrade_checks or []),
        ]
        # /metrics asks for the websocket's credentials (not its connection limit); with
        # --tenants, the operator's token alone (a tenant's gets 403, on the audit log)
        # and it has per-principal series, whose live figures are the quotas' own.
        audit = self.runtime.audit

        def tenant_refused(request: HttpRequest, principal: str) -> None:
            audit.emit("metrics.refuse", peer=request.remote, principal=principal)

        self._metrics_checks = auth.metrics_checks(verifier, tenant_refused)
        if self.tenants is not None:
            directory, sessions = self.tenants, self.runtime.sessions
            self.runtime.metrics.track_principals(
                directory.names,
                live=lambda: directory.live_processes,
                sessions=lambda: Counter(s.principal for s in sessions.sessions() if s.principal),
            )
        self._stop = asyncio.Event()
        # Everything Server.run starts beside serving (the drain, the stdin watch, the
        # start-up probe): cancelled and awaited before run returns.
        self._tasks = TaskSet("server", logger=log)
        self._drain: asyncio.Task[None] | None = None
        self._exit_status = 0
        self.url: str | None = None
        # Upgrade without downtime (server/handover.py): the listening sockets this
        # daemon inherited (from a predecessor or systemd), its control socket, and
        # the successor it is handing over to.
        self._inherited: list[socket.socket] = []
        self._control: ControlServer | None = None
        self._successor: SuccessorLink | None = None
        self._ws_server: WebsocketServer | None = None

    def stop(self, status: int = 0) -> None:
        self._exit_status = status
        self._stop.set()

    def _on_sigterm(self) -> None:
        # A second SIGTERM during a drain stops at once.
        if self.config.drain_timeout_s <= 0 or self._drain is not None:
            self.stop()
            return
        self._drain = self._tasks.spawn(self.drain(self.config.drain_timeout_s), name="drain")

    async def drain(self, timeout_s: float) -> None:
        """Refuse new sessions (resumes still work; /readyz answers 503), wait up to
        ``timeout_s`` for running processes to exit, then stop. For rolling updates:
        the sessions on this executor finish their commands instead of dying with it."""
        runtime = self.runtime
        runtime.draining = True
        log.info(
            "draining: no new sessions; waiting up to %.0f s for %d running process(es)",
            timeout_s,
            self._running_mortal(),
        )
        with contextlib.suppress(TimeoutError):
            if runtime.resources.get(KeeperHost) is None:
                await asyncio.wait_for(runtime.metrics.no_live_processes.wait(), timeout_s)
            else:
                # --state-dir: kept processes outlive the daemon; wait only for the
                # ones that end with it. Polled: no one event says "one of those
                # ended" across sessions, and a drain is rare and short.
                async with asyncio.timeout(timeout_s):
                    while self._running_mortal():  # noqa: ASYNC110
                        await asyncio.sleep(DRAIN_POLL_S)
        left = self._running_mortal()
        if left:
            log.warning("drain timed out with %d process(es) still running", left)
        else:
            log.info("drained: no process is running")
        self.stop()

    def _running_mortal(self) -> int:
        """Running processes that end with this daemon (kept ones excluded)."""
        runtime = self.runtime
        if runtime.resources.get(KeeperHost) is None:
            return runtime.metrics.live_processes
        tables = (s.state.peek(ProcessTable) for s in runtime.sessions.sessions())
        return sum(t.running_mortal() for t in tables if t is not None)

    async def run(self) -> int:
        # Before any large message: glibc keeps multi-megabyte buffers (memory_tuning).
        tune_malloc()
        # The loop takes the GIL back from a busy worker thread within 1 ms (gil_tuning).
        shorten_switch_interval()
        # Children must not inherit (possess) the keys of whoever started us.
        isolate_session_keyring()
        handlers = {signal.SIGTERM: self._on_sigterm, signal.SIGINT: self.stop}
        if self.tenants is not None:
            # Only with --tenants: without it SIGHUP keeps its default (as before).
            handlers[signal.SIGHUP] = self.reload_tenants
        with _signals_handled(handlers):
            return await self._run()

    def reload_tenants(self) -> None:
        """SIGHUP: read the tenants file again. A bad file is logged and the old table
        kept; a removed tenant's connections are dropped and its sessions end (its
        processes with them). A changed token is checked at the next upgrade."""
        directory = self.tenants
        if directory is None:
            return
        runtime = self.runtime
        try:
            table = directory.reload(admit=self._admit_quotas)
        except (ValueError, ContainmentError) as exc:
            log.error("tenants file reload failed; keeping the previous table: %s", exc)
            runtime.audit.emit("tenants.reload", ok=False, reason=str(exc))
            return
        names = frozenset(table.tenants)
        removed: set[str] = set()
        for conn in list(runtime.connections):
            if conn.principal is not None and conn.principal not in names:
                removed.add(conn.principal)
                conn.abort("tenant removed")
        for session in runtime.sessions.sessions():
            if session.principal is not None and session.principal not in names:
                removed.add(session.principal)
                runtime.sessions.end(session)
        log.info("tenants file reloaded: %d tenant(s)", len(names))
        runtime.audit.emit(
            "tenants.reload", ok=True, tenants=sorted(names), removed=sorted(removed)
        )

    def _admit_quotas(self, table: TenantTable) -> None:
        """A reloaded table goes live only once its cgroup quotas are in place (the
        groups of new tenants made, changed limits written): else it is refused."""
        quotas = {name: profile.quota for name, profile in table.tenants.items()}
        cgroups = self.runtime.resources.get(ProcessCgroups)
        if cgroups is None:
            if any(quota.requested for quota in quotas.values()):
                raise ContainmentError(
                    "a tenant quota (memory_max, pids_max, cpu_max) needs cgroups, which "
                    "this daemon did not open at start-up: restart it to apply quotas"
                )
            return
        cgroups.set_groups(quotas)

    async def _run(self) -> int:
        log.info(
            "execserver %s (codex exec-server protocol %s) starting",
            __version__,
            REFERENCE_VERSION,
        )
        # First: whatever this daemon starts dies with it, however it ends (the
        # Supervisor, made on first use, tells the guard of every process).
        guard = OrphanGuard.start()
        if guard is not None:
            self.runtime.resources.provide(OrphanGuard, guard)
        try:
            return await self._start_and_serve()
        finally:
            # After the runtime: its close ended every process the guard was told of.
            if guard is not None:
                await guard.aclose()

    async def _start_and_serve(self) -> int:
        backend = await probe_sandbox_backend(self.config)
        # Services find it by class, as they find the cgroups (kernel.resources).
        self.runtime.resources.provide(SandboxBackend, backend)
        if self.config.startup_probe:
            self._tasks.spawn(log_sandbox_report(backend), name="sandbox report")
        # Before re-adopting: a predecessor still serving this state directory lets go
        # of its keepers first (--take-over), or this start is refused.
        await self._inherit_listeners()
        # --state-dir: what a previous daemon left, detached until resumed or expired.
        await readopt_sessions(self.runtime)
        # Everything start-up imported and built stays: keep it out of full collections.
        frozen = freeze_startup_objects()
        tune_collector()
        log.debug("%d start-up objects frozen out of garbage collection", frozen)
        try:
            if self.address.kind == "stdio":
                return await self._run_stdio()
            return await self._run_websocket()
        finally:
            # The probe, a drain still waiting, the stdin watch: stopped before the
            # runtime they use closes.
            await self._tasks.aclose()
            # With --state-dir the processes stay with their keepers for the next daemon.
            leave_keepers(self.runtime)
            await self.runtime.aclose()
            await self._end_control()

    async def _inherit_listeners(self) -> None:
        """The listening sockets this daemon serves on instead of binding --listen:
        a running predecessor's (--take-over, which also waits until it has let
        go of its keepers), else systemd's (socket activation)."""
        config = self.config
        websocket = self.address.kind == "ws"
        if config.take_over and (config.state_dir is None or not websocket):
            raise HandoverError("--take-over needs --state-dir and a ws:// --listen")
        activated = systemd_listeners(os.environ) if websocket else []
        state_dir = config.state_dir
        inherited = None
        if state_dir is not None and config.take_over:
            inherited = await asyncio.to_thread(take_over, state_dir, __version__)
            if inherited is None:
                log.info("--take-over: no daemon serves %s; starting as usual", state_dir)
        elif state_dir is not None and await asyncio.to_thread(_someone_serves, state_dir):
            for sock in activated:
                sock.close()
            # Two daemons adopting the same keepers would take them from each other.
            raise HandoverError(
                f"another daemon serves --state-dir {state_dir}; pass --take-over to "
                "replace it without downtime, or stop it first"
            )
        if inherited is None:
            self._inherited = activated
            return
        for sock in activated:
            sock.close()  # the predecessor's sockets are the ones its clients know
        log.info(
            "took over from pid %d: %d listening socket(s)",
            inherited.predecessor_pid,
            len(inherited.sockets),
        )
        self._inherited = inherited.sockets

    def _open_control(self) -> None:
        """--state-dir: the control socket a successor takes over through."""
        state_dir = self.config.state_dir
        if state_dir is None:
            return
        self._control = ControlServer(state_dir, self._on_take_over)
        self._control.open()

    async def _end_control(self) -> None:
        control = self._control
        successor = self._successor
        if successor is not None:
            # After runtime.aclose: every keeper link is closed, none will be used again.
            successor.released()
            log.info("handed over: keepers released to the successor")
        if control is not None:
            # After a handover the path is the successor's (it renames its own over it).
            await control.aclose(unlink=successor is None)
            self._control = None

    async def _on_take_over(self, successor: SuccessorLink, request: object) -> bool:
        server = self._ws_server
        if server is None or self._stop.is_set():
            return False
        try:
            send_listeners(successor, server.listening_fds())
        except OSError as exc:
            log.warning("take-over failed (the successor went away?): %s", exc)
            return False
        # From here on the successor holds the sockets: stop accepting, then close.
        server.stop_listening()
        self._successor = successor
        log.info("handing over: no longer accepting; closing connections with 1012")
        self.stop(0)
        return True

    async def _run_stdio(self) -> int:
        running = TaskSet("stdio", logger=log)
        try:
            # Awaited here: its exit status (or failure) is run's.
            serving = running.spawn(serve_stdio(self.runtime), name="serve", log_failures=False)
            stopping = running.spawn(self._stop.wait(), name="stop")
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if serving.done():
                return serving.result()
            return self._exit_status
        finally:
            await running.aclose()

    async def _run_websocket(self) -> int:
        server = WebsocketServer(self.runtime, self._upgrade_checks, self._metrics_checks)
        self._ws_server = server
        # Every listening socket's (host, port): one per address family the host resolves
        # to, or the inherited ones (whatever --listen says then).
        listening = await server.start(self.address.host, self.address.port, self._inherited)
        port = listening[0][1] if listening else self.address.port
        # No sandbox may reach this listener through a managed proxy or bridge.
        bound = listening or [(self.address.host, port)]
        for host, bound_port in bound:
            protect_listener(host, bound_port)
        address = self.address
        if self._inherited and listening:
            address = ListenAddress("ws", listening[0][0], port)
        self.url = address.url(port)
        self._open_control()
        # The first (and only) stdout line is the URL, as the reference prints it.
        sys.stdout.write(self.url + "\n")
        sys.stdout.flush()
        log.info("listening on %s", self.url)
        stdin_watch = None
        if self.config.exit_on_stdin_close:
            stdin_watch = self._tasks.spawn(self._watch_stdin(), name="stdin watch")
        try:
            await self._stop.wait()
        finally:
            if stdin_watch is not None:
                stdin_watch.cancel()
                # Its read pipe is closed before the listeners go.
                await asyncio.wait({stdin_watch})
            log.info("shutting down")
            self.runtime.shutting_down = True
            if self._successor is not None:
                await self._hand_over_connections(server)
            await self._close_connections()
            with contextlib.suppress(Exception):
                await server.close(SHUTDOWN_GRACE_S)
            for host, bound_port in bound:
                release_listener(host, bound_port)
        return self._exit_status

    async def _hand_over_connections(self, server: WebsocketServer) -> None:
        """Every websocket closed with 1012 once what it read is answered, then every
        session saved for the successor (one with no process yet has no file)."""
        clean = await server.restart_connections(SHUTDOWN_GRACE_S)
        if not clean:
            log.warning("handover: a request outlived the grace; its connection closed with 1001")
        host = self.runtime.resources.get(KeeperHost)
        if host is not None:
            for session in self.runtime.sessions.sessions():
                host.keep_session(session.id, session.principal)

    async def _close_connections(self) -> None:
        for conn in list(self.runtime.connections):
            conn.abort("server shutting down")

    async def _watch_stdin(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        except (ValueError, OSError):
            return
        while await reader.read(65536):
            pass
        log.info("stdin closed; exiting (--exit-on-stdin-close)")
        self.stop(EXIT_STATUS_STDIN_CLOSED)


# What signal.getsignal returns: a function, SIG_DFL/SIG_IGN, or None (set from C).
_SignalHandler = Callable[[int, FrameType | None], Any] | int | None


@contextlib.contextmanager
def _signals_handled(handlers: dict[signal.Signals, Callable[[], None]]) -> Iterator[None]:
    """The loop runs ``handlers`` while the block runs; on the way out each signal gets
    back the handler it had before (as uvicorn's ``capture_signals``): a daemon run
    inside a host program (``serve_local``, the tests) leaves its signals as it found
    them."""
    loop = asyncio.get_running_loop()
    installed: list[tuple[signal.Signals, _SignalHandler]] = []
    for sig, handler in handlers.items():
        previous = signal.getsignal(sig)
        try:
            loop.add_signal_handler(sig, handler)
        except (NotImplementedError, RuntimeError):  # no signals here (not the main thread)
            continue
        installed.append((sig, previous))
    try:
        yield
    finally:
        for sig, previous in reversed(installed):
            loop.remove_signal_handler(sig)
            # remove_signal_handler leaves SIG_DFL (SIGINT: default_int_handler); put
            # back what was there, e.g. a host's own handler.
            if previous is not None:
                with contextlib.suppress(ValueError, TypeError):
                    signal.signal(sig, previous)


# ---- --state-dir: the keepers opened at start-up, and the sessions a previous daemon
# left re-adopted (execserver/processes/keepers.py, execserver/keeper/). A restored
# session is detached with its TTL running from this daemon's start, as if its
# connection had just dropped: initialize {resumeSessionId} re-attaches it and each
# process replays its keeper's journal. Here, in the composition root, because it
# builds the process tables that processes/service.py otherwise makes.


def open_keepers(runtime: ServerRuntime) -> KeeperHost | None:
    """With --state-dir: the keeper zygote started (the server's Supervisor, made on
    first use by ``server_supervisor``, leaves its processes to it)."""
    config = runtime.config
    if config.state_dir is None:
        return None
    host = KeeperHost(
        config.state_dir,
        ttl_s=config.session_ttl_s,
        drain_timeout_s=config.process_drain_timeout_s,
        retained_bytes=config.process_retained_bytes,
        child_nice=config.child_nice,
    )
    runtime.resources.provide(KeeperHost, host)
    # Shared by the daemons of this state directory: a kept process's proxy sockets
    # stay masked in a successor's sandboxes (sandbox/hidden.py).
    use_private_dir(host.private_dir)
    return host


async def readopt_sessions(runtime: ServerRuntime) -> int:
    """Every session the state directory holds, restored detached; the count."""
    host = runtime.resources.get(KeeperHost)
    if host is None:
        return 0
    config = runtime.config
    supervisor = runtime.state.get(
        Supervisor, lambda: server_supervisor(runtime.resources, runtime.config.child_nice)
    )
    restored = 0
    telemetry = runtime.telemetry
    tenants = runtime.resources.get(TenantDirectory)
    # What processes/service.py gives a proxy at a process's start.
    network_host = NetworkHost.of(config)
    claimed: set[str] = set()
    for saved in host.saved_sessions():
        session = Session(saved.id, saved.principal, tenants)
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
            readopted = processes.readopt(process_id, name)
            if readopted is not None:
                proc, network = readopted
                if network:
                    claimed.update(n.socket_dir for n in network if n.socket_dir is not None)
                    await _restore_network(session, process_id, network, proc, network_host)
                session_id = saved.id

                def closed(p: Any, session_id: str = session_id) -> None:
                    telemetry.process_closed(session_id, p)

                proc.close_hooks.append(closed)
                if tenants is not None and saved.principal is not None:
                    # Its tenant's max_processes counts it as before the restart.
                    tenants.count_process(saved.principal, proc.close_hooks)
        restored += 1
        log.info(
            "session %s re-adopted from %s: %d process(es)",
            saved.id,
            host.state_dir,
            len(processes),
        )
    host.sweep_private(claimed)
    return restored


async def _restore_network(
    session: Session,
    process_id: str,
    network: list[SavedListeners],
    proc: ManagedProcess,
    network_host: NetworkHost,
) -> None:
    """The re-adopted process's proxy or bridge, serving the listeners its keeper
    held (netproxy/kept.py). If that fails the process's network is closed (its
    connections refused), never opened: it runs on, and the log says why."""
    try:
        await restore_network(session, process_id, network, network_host, proc)
    except Exception as exc:
        log.error("process %s of session %s: its network is gone: %s", process_id, session.id, exc)


def leave_keepers(runtime: ServerRuntime) -> None:
    """Daemon shutdown with --state-dir: the sessions close without killing anything
    (their keepers wait for the next daemon, each until the session TTL)."""
    host = runtime.resources.get(KeeperHost)
    if host is not None:
        host.leave()
