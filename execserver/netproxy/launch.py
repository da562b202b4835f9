"""The seam between ``process/start`` and managed networking.

:func:`prepare_network` does everything ``process/start`` needs before it
plans the launch: start the process's own proxy (``networkProxy``) and inject
its variables, and for a sandboxed child under ``enforceManagedNetwork`` the
routes its in-sandbox bridge uses (to our proxy, or to a loopback proxy named
by its proxy variables / ``managedNetwork.loopbackPorts``). What it started is
stopped when the process is closed, or with the session.

The proxy itself (netproxy/proxy.py: the HTTP and SOCKS engines, h11, the policy
engine, the upstream proxies; 25 modules) is imported by the first process that
has a managed network, not at the daemon's start: most daemons never run one, and
every daemon start paid ~10 ms for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from execserver.aio.tasks import TaskSet
from execserver.netproxy.ceiling import socket_owner, tenant_ceiling
from execserver.netproxy.guard import is_daemon_endpoint
from execserver.netproxy.kept import PROXY, KeptNetwork, SavedListeners
from execserver.sandbox.proxy_routed import ProxyRoutes
from execserver.wire import methods as m
from execserver.wire.network import (
    NetworkPolicyDecisionNotification,
    NetworkPolicyRequestParams,
    NetworkRequestTarget,
)
from execserver.wire.process import ExecParams, RemoteNetworkProxyLaunchConfig

if TYPE_CHECKING:
    from execserver.config import ServerConfig
    from execserver.kernel.peer import SessionHandle
    from execserver.netproxy.loopback import LoopbackBridge
    from execserver.netproxy.proxy import ProcessNetworkProxy
    from execserver.netproxy.resolver import Resolver

__all__ = [
    "NetworkHost",
    "NetworkSetup",
    "new_process_proxy",
    "prepare_network",
    "restore_network",
    "session_proxies",
]

log = logging.getLogger(__name__)

# How long one closed-wait sleeps between checks (it wakes on every change).
CLOSE_POLL_S = 3600.0


class ClosableProcess(Protocol):
    @property
    def closed(self) -> bool: ...

    async def wait_closed(self, timeout: float) -> None: ...


class Resource(Protocol):
    async def aclose(self) -> None: ...


class SessionProxies:
    """Session-scoped: every live proxy/bridge of the session, closed with it."""

    def __init__(self) -> None:
        self._live: set[Resource] = set()
        # One per process started with a proxy: closes it once the process is closed.
        self._watchers = TaskSet("session proxies", logger=log)

    def add(self, resource: Resource) -> None:
        self._live.add(resource)

    async def discard(self, resource: Resource) -> None:
        self._live.discard(resource)
        await resource.aclose()

    def close_with(self, proc: ClosableProcess, resource: Resource) -> None:
        """Stop ``resource`` once ``proc`` is closed (all its output read)."""

        async def watch() -> None:
            while not proc.closed:
                await proc.wait_closed(CLOSE_POLL_S)
            await self.discard(resource)

        self._watchers.spawn(watch(), name="close with process")

    async def aclose(self) -> None:
        # Stopped (and awaited) first: none is left half-way through closing its
        # resource while the session closes the rest.
        await self._watchers.aclose()
        live = list(self._live)
        self._live.clear()
        await asyncio.gather(*(r.aclose() for r in live), return_exceptions=True)


def session_proxies(session: SessionHandle) -> SessionProxies:
    return session.state.get(SessionProxies, SessionProxies)


@dataclass(frozen=True)
class NetworkHost:
    """What the daemon hands every process's proxy: its own environment (whose
    proxy variables name the upstream proxy under ``allowUpstreamProxy``) and
    the resolver's static name overrides (None: real DNS)."""

    daemon_env: Mapping[str, str]
    host_overrides: Mapping[str, str] | None = None

    @classmethod
    def of(cls, config: ServerConfig) -> NetworkHost:
        """The daemon's: its own environment, its configured name overrides."""
        return cls(daemon_env=os.environ, host_overrides=config.netproxy_host_overrides)

    def resolver(self) -> Resolver:
        from execserver.netproxy.resolver import Resolver

        return Resolver(self.host_overrides)


def new_process_proxy(
    session: SessionHandle,
    process_id: str,
    config: RemoteNetworkProxyLaunchConfig,
    host: NetworkHost,
) -> ProcessNetworkProxy:
    """The proxy for ``process_id``, not listening yet, registered with the session
    (closed with it)."""
    from execserver.netproxy.proxy import ProcessNetworkProxy

    # A tenant's network_allow: the proxy allows nothing beyond it (netproxy.ceiling).
    ceiling = tenant_ceiling(session)

    async def notify(note: NetworkPolicyDecisionNotification) -> None:
        await session.notify(m.NETWORK_POLICY_DECISION, note)

    async def ask(protocol: str, host: str, port: int, timeout: float) -> object:
        params = NetworkPolicyRequestParams(process_id, NetworkRequestTarget(protocol, host, port))
        return await session.request(m.NETWORK_POLICY_REQUEST, params, timeout)

    proxy = ProcessNetworkProxy(
        config,
        process_id=process_id,
        notify=notify,
        ask=ask,
        resolver=host.resolver(),
        upstream_environ=host.daemon_env,
        ceiling=None if ceiling is None else ceiling.patterns,
        # A tenant's sandboxed bridge connects as its account (netproxy.ceiling).
        owner=socket_owner(session),
    )
    session_proxies(session).add(proxy)
    return proxy


async def start_process_proxy(
    session: SessionHandle,
    process_id: str,
    config: RemoteNetworkProxyLaunchConfig,
    host: NetworkHost,
) -> ProcessNetworkProxy:
    """Start the proxy for ``process_id``; registered with the session at once so a
    cancelled request never leaks its listeners."""
    proxy = new_process_proxy(session, process_id, config, host)
    try:
        await proxy.start()
    except BaseException:
        await session_proxies(session).discard(proxy)
        raise
    log.info(
        "process %s: network proxy on 127.0.0.1:%d (socks %s), mode %s",
        process_id,
        proxy.http_port,
        proxy.socks_port,
        config.proxy.mode,
    )
    return proxy


@dataclass
class NetworkSetup:
    """What process/start launches with: the child's environment (proxy
    variables injected, secrets masked), the sandbox bridge's routes, and what to
    stop when the process is gone."""

    session: SessionHandle
    env: dict[str, str]
    routes: ProxyRoutes | None = None
    owned: list[Resource] = field(default_factory=list)

    @property
    def outlives_daemon(self) -> bool:
        """Whether the process may outlive this daemon (with --state-dir): its proxy's
        and bridge's listeners then go to its keeper (``hand_over``) and a restarted
        daemon serves them again. Not with masked credentials: the real secrets live
        only in this daemon's memory (never written to disk), so such a process
        ends with the daemon."""
        if not self.owned:
            return True
        from execserver.netproxy.proxy import ProcessNetworkProxy

        return not any(
            isinstance(r, ProcessNetworkProxy) and r.credentials is not None for r in self.owned
        )

    def hand_over(self) -> KeptNetwork | None:
        """What the process's keeper must hold for its network to outlive this daemon
        (None: it uses nothing of the daemon's)."""
        if not self.owned:
            return None
        from execserver.netproxy.loopback import LoopbackBridge
        from execserver.netproxy.proxy import ProcessNetworkProxy

        return KeptNetwork.of(
            [r for r in self.owned if isinstance(r, ProcessNetworkProxy | LoopbackBridge)]
        )

    def close_with(self, proc: ClosableProcess) -> None:
        for resource in self.owned:
            session_proxies(self.session).close_with(proc, resource)

    async def aclose(self) -> None:
        for resource in self.owned:
            await session_proxies(self.session).discard(resource)


async def prepare_network(
    session: SessionHandle,
    params: ExecParams,
    env: dict[str, str],
    *,
    sandboxed: bool,
    host: NetworkHost,
) -> NetworkSetup:
    """``env``: the child's environment as built from the request (env + envPolicy)."""
    setup = NetworkSetup(session, env)
    proxy_config = params.network_proxy
    ceiling = tenant_ceiling(session)
    if ceiling is not None:
        # A tenant's network_allow, before anything starts (netproxy.ceiling).
        if proxy_config is not None:
            proxy_config = ceiling.bound(proxy_config)
        elif sandboxed and params.enforce_managed_network:
            raise ceiling.refused(
                "a managed network without the daemon's proxy (networkProxy) is outside "
                "the tenant's ceiling (network_allow)"
            )
    try:
        if proxy_config is not None:
            proxy = await start_process_proxy(session, params.process_id, proxy_config, host)
            setup.owned.append(proxy)
            # The proxy's variables win over the request's env (as on the reference).
            final = {**env, **proxy.environment()}
            if proxy.credentials is not None:
                # Masked secrets: the child gets placeholders (netproxy.credentials).
                final.update(proxy.credentials.mask_environment(env))
            setup.env = final
            if sandboxed and params.enforce_managed_network:
                setup.routes = await proxy.sandbox_routes()
        elif sandboxed and params.enforce_managed_network:
            setup.routes = await _loopback_routes(setup, params)
        managed = params.managed_network
        if setup.routes is not None and managed is not None:
            setup.routes = dataclasses.replace(
                setup.routes,
                allow_unix_sockets=tuple(managed.allow_unix_sockets or ()),
                all_unix_sockets=bool(managed.dangerously_allow_all_unix_sockets),
            )
    except BaseException:
        await setup.aclose()
        raise
    return setup


async def _loopback_routes(setup: NetworkSetup, params: ExecParams) -> ProxyRoutes | None:
    """Bridge a client-side loopback proxy; None (the sandbox refuses: fail closed)
    when the variables name no loopback proxy or something unreachable."""
    from execserver.netproxy.loopback import LoopbackBridge, loopback_proxy_ports

    ports, foreign = loopback_proxy_ports(setup.env)
    if not ports or foreign:
        return None
    managed = params.managed_network
    extra = managed.loopback_ports or [] if managed is not None else []
    if any(is_daemon_endpoint("127.0.0.1", port) for port in [*ports, *extra]):
        return None  # never bridge a sandbox to the daemon's own listener
    bridge = LoopbackBridge([*ports, *extra], owner=socket_owner(setup.session))
    session_proxies(setup.session).add(bridge)
    setup.owned.append(bridge)
    allow_local = bool(managed is not None and managed.allow_local_binding)
    return await bridge.start(allow_local_binding=allow_local)


async def restore_network(
    session: SessionHandle,
    process_id: str,
    saved: list[SavedListeners],
    host: NetworkHost,
    proc: ClosableProcess,
) -> None:
    """A re-adopted process's proxy and bridge (netproxy/kept.py), serving the
    listening sockets its keeper held, closed with it as at its start. The
    sockets are theirs from now on (closed on failure: the child's connections
    are then refused, never let through unfiltered)."""
    from execserver.netproxy.loopback import LoopbackBridge

    proxies = session_proxies(session)
    for index, item in enumerate(saved):
        listeners = list(zip(item.roles, item.sockets, strict=True))
        resource: ProcessNetworkProxy | LoopbackBridge
        try:
            if item.kind == PROXY:
                assert item.config is not None
                proxy = new_process_proxy(session, process_id, item.config, host)
                resource = proxy
                await proxy.adopt(
                    listeners,
                    http_port=item.http_port,
                    socks_port=item.socks_port,
                    socket_dir=item.socket_dir,
                )
            else:
                assert item.socket_dir is not None
                bridge = LoopbackBridge(int(role) for role in item.roles)
                resource = bridge
                proxies.add(bridge)
                await bridge.adopt(listeners, item.socket_dir)
        except BaseException:
            for rest in saved[index:]:
                for sock in rest.sockets:
                    sock.close()
            raise
        proxies.close_with(proc, resource)
