"""Host side of the sandbox bridge for a proxy the executor did not launch.

``enforceManagedNetwork`` with proxy variables pointing at a loopback proxy
(a client-side proxy, ``managedNetwork.loopbackPorts``) and no
``networkProxy``: the reference bridges the sandboxed child to that proxy
(observed: requests through HTTP_PROXY arrive, direct connects are refused).
Each such port gets a unix socket here that forwards to 127.0.0.1:PORT; the
in-sandbox half is the same bridge as for our own proxy (``bridge.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from execserver.aio.tasks import TaskSet
from execserver.netproxy.guard import (
    DaemonEndpointRefused,
    accept_connection,
    is_daemon_endpoint,
)
from execserver.netproxy.proxy import KEEP_PATH, give_socket_dir
from execserver.netproxy.relay import close, relay
from execserver.sandbox.hidden import private_dir
from execserver.sandbox.proxy_routed import ProxyRoutes

__all__ = ["LoopbackBridge", "loopback_proxy_ports"]

log = logging.getLogger(__name__)

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def loopback_proxy_ports(env: Mapping[str, str]) -> tuple[list[int], bool]:
    """Ports of the proxy variables that name a loopback proxy, and whether any
    proxy variable names something else (which no bridge can reach)."""
    ports: list[int] = []
    foreign = False
    for name, value in env.items():
        if name.upper() not in PROXY_VARIABLES or not value:
            continue
        try:
            parts = urlsplit(value if "://" in value else f"http://{value}")
            port = parts.port
        except ValueError:
            foreign = True
            continue
        if parts.hostname in LOOPBACK_HOSTS and port is not None:
            if port not in ports:
                ports.append(port)
        else:
            foreign = True
    return ports, foreign


class LoopbackBridge:
    def __init__(self, ports: Iterable[int], *, owner: tuple[int, int] | None = None) -> None:
        """``owner``: the uid and gid of the tenant account whose sandboxed bridge
        connects to the sockets (None: the daemon's own)."""
        self.ports = sorted(set(ports))
        self.owner = owner
        self.socket_dir: str | None = None
        self._servers: list[asyncio.Server] = []
        # False once a keeper holds the listeners (ProcessNetworkProxy.kept).
        self._owns_socket_dir = True
        # The forwarding connections (asyncio's stream server starts their tasks).
        self._tasks = TaskSet("loopback bridge", logger=log)
        self._closed = False

    async def start(self, *, allow_local_binding: bool = False) -> ProxyRoutes:
        if any(is_daemon_endpoint("127.0.0.1", port) for port in self.ports):
            # A "proxy" on the daemon's own port would hand the sandbox its websocket.
            raise DaemonEndpointRefused("127.0.0.1", next(iter(self.ports)))
        self.socket_dir = tempfile.mkdtemp(prefix="execserver-loopback-", dir=private_dir())
        routes = []
        try:
            for port in self.ports:
                path = os.path.join(self.socket_dir, f"{port}.sock")
                self._servers.append(
                    await asyncio.start_unix_server(self._forwarder(port), path, **KEEP_PATH)
                )
                routes.append((port, path))
            give_socket_dir(self.socket_dir, self.owner)
        except BaseException:
            await self.aclose()
            raise
        return ProxyRoutes(tuple(routes), allow_local_binding)

    def listeners(self) -> list[tuple[str, int]]:
        """Each listening socket (its port as its role) and descriptor."""
        return [
            (str(port), server.sockets[0].fileno())
            for port, server in zip(self.ports, self._servers, strict=True)
        ]

    def kept(self) -> None:
        self._owns_socket_dir = False

    async def adopt(self, listeners: Sequence[tuple[str, socket.socket]], socket_dir: str) -> None:
        """Serve the sockets a keeper held across a daemon restart (``start``'s)."""
        self.socket_dir = socket_dir
        self._owns_socket_dir = False
        try:
            for role, sock in listeners:
                forward = self._forwarder(int(role))
                self._servers.append(
                    await asyncio.start_unix_server(forward, sock=sock, **KEEP_PATH)
                )
        except BaseException:
            await self.aclose()
            raise

    def _forwarder(
        self, port: int
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if not accept_connection(len(self._tasks)):
                await close(writer)
                return
            task = asyncio.current_task()
            assert task is not None
            # asyncio's stream server reports its failures already.
            self._tasks.adopt(task, log_failures=False)
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await close(writer)
                return
            try:
                await relay(reader, writer, up_reader, up_writer)
            except asyncio.CancelledError:
                pass  # aclose(); see ProcessNetworkProxy._serving
            finally:
                await close(up_writer)
                await close(writer)

        return forward

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for server in self._servers:
            server.close()
        await self._tasks.aclose()
        if self.socket_dir is not None and self._owns_socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
