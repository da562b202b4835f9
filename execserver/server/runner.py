"""Start-up -> serve -> graceful shutdown (one owner for the daemon's lifetime)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys

from aiohttp import web

from execserver.config import ServerConfig
from execserver.containment import open_process_cgroups
from execserver.server import auth, limits
from execserver.server.audit import AuditLog
from execserver.server.listen import ListenAddress, parse_listen
from execserver.server.methods import build_method_table
from execserver.server.runtime import ServerRuntime
from execserver.server.sessions import SessionRegistry
from execserver.server.transport_stdio import serve_stdio
from execserver.server.transport_ws import UpgradeCheck, build_app

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 10.0
# The reference exits with status 2 when --exit-on-stdin-close fires (protocol §5.4).
EXIT_STATUS_STDIN_CLOSED = 2


def build_runtime(config: ServerConfig) -> ServerRuntime:
    return ServerRuntime(
        config=config,
        methods=build_method_table(),
        sessions=SessionRegistry(config.session_ttl_s),
        audit=AuditLog(config.audit_log),
        # Raises ContainmentError when limits are set and cannot be applied.
        containment=open_process_cgroups(config.process_limits),
    )


def operational_checks(
    runtime: ServerRuntime, verifier: auth.TokenVerifier | None
) -> list[UpgradeCheck]:
    """Upgrade checks from the config: authentication first (an unauthenticated client
    learns nothing, not even the load), then the connection limit."""
    checks: list[UpgradeCheck] = []
    if verifier is not None:

        def rejected(request: web.Request, reason: str) -> None:
            runtime.metrics.connections_rejected.labels("auth").inc()
            runtime.metrics.auth_failures.labels(reason).inc()
            runtime.audit.emit("auth.reject", peer=request.remote, reason=reason)

        checks.append(auth.make_upgrade_check(verifier, rejected))

    async def connection_limit(request: web.Request) -> web.StreamResponse | None:
        refusal = limits.too_many_connections(runtime.config.limits, len(runtime.connections))
        if refusal is not None:
            runtime.metrics.connections_rejected.labels("limit").inc()
            runtime.metrics.limit_rejections.labels("max_connections").inc()
        return refusal

    checks.append(connection_limit)
    return checks


class Server:
    def __init__(self, config: ServerConfig, upgrade_checks: list[UpgradeCheck] | None = None):
        self.config = config
        self.address: ListenAddress = parse_listen(config.listen)
        # Fail closed: a config that asks for auth (or that must have it) never serves
        # without it, however the Server was constructed.
        verifier = auth.startup_checks(config)
        self.runtime = build_runtime(config)
        self._upgrade_checks = [
            *operational_checks(self.runtime, verifier),
            *(upgrade_checks or []),
        ]
        self._stop = asyncio.Event()
        self._exit_status = 0
        self.url: str | None = None

    def stop(self, status: int = 0) -> None:
        self._exit_status = status
        self._stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop)
        try:
            if self.address.kind == "stdio":
                return await self._run_stdio()
            return await self._run_websocket()
        finally:
            await self.runtime.aclose()

    async def _run_stdio(self) -> int:
        serving = asyncio.ensure_future(serve_stdio(self.runtime))
        stopping = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not serving.done():
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            return self._exit_status
        return serving.result()

    async def _run_websocket(self) -> int:
        app = build_app(self.runtime, self._upgrade_checks)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.address.host, self.address.port, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        port = sockets[0].getsockname()[1] if sockets else self.address.port
        self.url = self.address.url(port)
        # The first (and only) stdout line is the URL, as the reference prints it.
        sys.stdout.write(self.url + "\n")
        sys.stdout.flush()
        log.info("listening on %s", self.url)
        stdin_watch = None
        if self.config.exit_on_stdin_close:
            stdin_watch = asyncio.ensure_future(self._watch_stdin())
        try:
            await self._stop.wait()
        finally:
            if stdin_watch is not None:
                stdin_watch.cancel()
            log.info("shutting down")
            self.runtime.shutting_down = True
            await self._close_connections()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(runner.cleanup(), SHUTDOWN_GRACE_S)
        return self._exit_status

    async def _close_connections(self) -> None:
        conns = list(self.runtime.connections)
        for conn in conns:
            abort = getattr(conn, "abort", None)
            if abort is not None:
                abort("server shutting down")

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
