"""One process's egress proxy: listeners, policy engine, lifetime.

Listens on 127.0.0.1 (an ephemeral port) for HTTP and, with ``enableSocks5``,
SOCKS5. For a sandboxed child, whose network namespace has its own loopback,
the same front ends are also offered on unix sockets in a private directory
that the sandbox binds in (see ``execserver.sandbox.proxy_routed``). Closing the proxy closes
the listeners and every open client connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from execserver.aio.tasks import TaskSet
from execserver.netproxy import http_proxy, socks
from execserver.netproxy.credentials import credential_vault
from execserver.netproxy.engine import Asker, Notifier, PolicyEngine
from execserver.netproxy.env import proxy_environment
from execserver.netproxy.guard import accept_connection
from execserver.netproxy.peers import tcp_peer_uid
from execserver.netproxy.policy import NetworkPolicy
from execserver.netproxy.resolver import Resolver
from execserver.netproxy.upstream import UpstreamProxies
from execserver.sandbox.hidden import private_dir
from execserver.sandbox.proxy_routed import ProxyRoutes
from execserver.wire.process import RemoteNetworkProxyLaunchConfig

__all__ = ["ProcessNetworkProxy", "give_socket_dir"]

log = logging.getLogger(__name__)

Handler = Callable[[PolicyEngine, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HTTP_SOCKET = "http.sock"
SOCKS_SOCKET = "socks.sock"
# A listener's role: which front end, on loopback TCP or on a unix socket.
HTTP, SOCKS, HTTP_UNIX, SOCKS_UNIX = "http", "socks", "http-unix", "socks-unix"
# Python 3.13 unlinks a unix server's path when it closes: a proxy whose
# listeners a keeper holds (netproxy/kept.py) must leave the path to it.
KEEP_PATH: dict[str, Any] = {"cleanup_socket": False} if sys.version_info >= (3, 13) else {}


class ProcessNetworkProxy:
    def __init__(
        self,
        config: RemoteNetworkProxyLaunchConfig,
        *,
        process_id: str,
        notify: Notifier,
        ask: Asker | None,
        resolver: Resolver,
        upstream_environ: Mapping[str, str],
        ceiling: Sequence[str] | None = None,
        owner: tuple[int, int] | None = None,
    ) -> None:
        """``resolver``: how names are resolved (tests inject a static one);
        ``upstream_environ``: the daemon's environment, whose proxy variables
        name the upstream proxy under ``allowUpstreamProxy``; ``ceiling``: the
        host patterns of a tenant's ``network_allow``, beyond which nothing is
        allowed (None: no ceiling); ``owner``: the uid and gid of the tenant
        account whose process connects to the unix sockets (None: the daemon's
        own)."""
        timeout_ms = config.policy_decision_timeout_ms
        self.config = config
        self.credentials = credential_vault(config.proxy)
        if self.credentials is not None:
            notify = self.credentials.scrubbing(notify)
        self.engine = PolicyEngine(
            NetworkPolicy.from_config(config.proxy, ceiling),
            resolver,
            process_id=process_id,
            notify=notify,
            ask=ask,
            decision_timeout_s=timeout_ms / 1000 if timeout_ms else None,
        )
        if config.proxy.allow_upstream_proxy:
            self.engine.upstream = UpstreamProxies.from_environment(upstream_environ)
        self.engine.udp_associate = config.proxy.enable_socks5_udp
        self.engine.udp_owner = owner[0] if owner is not None else None
        self.engine.credentials = self.credentials
        self.http_port = 0
        self.socks_port: int | None = None
        self.socket_dir: str | None = None
        self.owner = owner
        self._servers: list[asyncio.Server] = []
        self._roles: list[str] = []  # each server's role (HTTP, SOCKS, ...)
        # False once a keeper holds the listeners: the socket directory is then
        # the keeper's to remove (its process may outlive this daemon).
        self._owns_socket_dir = True
        self._writers: set[asyncio.StreamWriter] = set()
        # The front ends' connections (asyncio's stream servers start their tasks).
        self._tasks = TaskSet("network proxy", logger=log)
        self._closed = False

    @property
    def socks_enabled(self) -> bool:
        return self.config.proxy.enable_socks5

    async def start(self) -> None:
        try:
            server = await asyncio.start_server(self._serving(http_proxy.handle), "127.0.0.1", 0)
            self._add(HTTP, server)
            self.http_port = _port_of(server)
            if self.socks_enabled:
                server = await asyncio.start_server(self._serving(socks.handle), "127.0.0.1", 0)
                self._add(SOCKS, server)
                self.socks_port = _port_of(server)
        except BaseException:
            await self.aclose()
            raise

    async def start_unix_sockets(self) -> str:
        """Offer the front ends on unix sockets too; returns their (0700) directory."""
        if self.socket_dir is None:
            self.socket_dir = tempfile.mkdtemp(prefix="execserver-netproxy-", dir=private_dir())
            path = os.path.join(self.socket_dir, HTTP_SOCKET)
            self._add(
                HTTP_UNIX,
                await asyncio.start_unix_server(
                    self._serving(http_proxy.handle), path, **KEEP_PATH
                ),
            )
            if self.socks_enabled:
                path = os.path.join(self.socket_dir, SOCKS_SOCKET)
                self._add(
                    SOCKS_UNIX,
                    await asyncio.start_unix_server(self._serving(socks.handle), path, **KEEP_PATH),
                )
            give_socket_dir(self.socket_dir, self.owner)
        return self.socket_dir

    def _add(self, role: str, server: asyncio.Server) -> None:
        self._servers.append(server)
        self._roles.append(role)

    def listeners(self) -> list[tuple[str, int]]:
        """Each listening socket's role and descriptor (still this proxy's: a keeper
        gets duplicates, netproxy/kept.py)."""
        return [
            (role, server.sockets[0].fileno())
            for role, server in zip(self._roles, self._servers, strict=True)
        ]

    def kept(self) -> None:
        """A keeper holds the listeners now, and removes the socket directory when
        its process ends: closing this proxy leaves the directory alone."""
        self._owns_socket_dir = False

    async def adopt(
        self,
        listeners: Sequence[tuple[str, socket.socket]],
        *,
        http_port: int,
        socks_port: int | None,
        socket_dir: str | None,
    ) -> None:
        """Serve the listening sockets a keeper held across a daemon restart
        (instead of ``start``): the same addresses, and connections made while no
        daemon ran are waiting in their backlogs."""
        self.http_port, self.socks_port, self.socket_dir = http_port, socks_port, socket_dir
        self._owns_socket_dir = False
        try:
            for role, sock in listeners:
                handler = self._serving(
                    socks.handle if role.startswith(SOCKS) else http_proxy.handle
                )
                if role in (HTTP_UNIX, SOCKS_UNIX):
                    server = await asyncio.start_unix_server(handler, sock=sock, **KEEP_PATH)
                else:
                    server = await asyncio.start_server(handler, sock=sock)
                self._add(role, server)
        except BaseException:
            await self.aclose()
            raise

    async def sandbox_routes(self) -> ProxyRoutes:
        """Where a sandboxed child's bridge sends each proxy port (unix sockets)."""
        directory = await self.start_unix_sockets()
        routes = [(self.http_port, os.path.join(directory, HTTP_SOCKET))]
        if self.socks_port is not None:
            routes.append((self.socks_port, os.path.join(directory, SOCKS_SOCKET)))
        return ProxyRoutes(tuple(routes), self.config.proxy.allow_local_binding)

    def environment(self) -> dict[str, str]:
        return proxy_environment(
            self.http_port,
            self.socks_port,
            allow_local_binding=self.config.proxy.allow_local_binding,
        )

    def _serving(
        self, handler: Handler
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if self._closed or not accept_connection(len(self._writers)):
                writer.close()
                return
            task = asyncio.current_task()
            assert task is not None
            self._writers.add(writer)
            # asyncio's stream server reports its failures already.
            self._tasks.adopt(task, log_failures=False)
            try:
                if not await self._from_owner(writer):
                    writer.close()
                    return
                await handler(self.engine, reader, writer)
            except asyncio.CancelledError:
                # Only aclose() cancels these; asyncio's stream callback would log a
                # cancelled connection task as an error.
                writer.close()
            finally:
                self._writers.discard(writer)

        return serve

    async def _from_owner(self, writer: asyncio.StreamWriter) -> bool:
        """Whether a connection may use this proxy: always for the daemon's own;
        for a tenant's, a unix socket (its account's 0700 directory guards it) or a
        loopback TCP connection from a socket of its account (netproxy.peers)."""
        if self.owner is None:
            return True
        sock = writer.get_extra_info("socket")
        if sock is None or sock.family == socket.AF_UNIX:
            return sock is not None
        local, peer = writer.get_extra_info("sockname"), writer.get_extra_info("peername")
        uid = await asyncio.to_thread(tcp_peer_uid, local, peer)
        if uid != self.owner[0]:
            log.warning(
                "network proxy: refused a loopback connection from uid %s (not the tenant's)", uid
            )
            return False
        return True

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.close()
        await self._tasks.aclose()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        if self.socket_dir is not None and self._owns_socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)


def give_socket_dir(directory: str, owner: tuple[int, int] | None) -> None:
    """A socket directory (0700) and the sockets in it made ``owner``'s: a tenant's
    sandboxed bridge, running as its account, connects to them. Made while the
    directory was the daemon's, inside its 0700 private directory, so no other
    account saw it in between; it stays 0700, so none reaches it after."""
    if owner is None:
        return
    uid, gid = owner
    for name in os.listdir(directory):
        os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)
    os.chown(directory, uid, gid, follow_symlinks=False)
    os.chmod(directory, 0o700)


def _port_of(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])
