"""The seam between ``process/start`` and the proxy: start one for a process
with ``networkProxy``, wire it to the session (``network/policyRequest`` out,
``network/policyDecision`` notifications), and stop it when the process is
closed or the session ends.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from execserver.netproxy.proxy import ProcessNetworkProxy
from execserver.wire import methods as m
from execserver.wire.network import (
    NetworkPolicyDecisionNotification,
    NetworkPolicyRequestParams,
    NetworkRequestTarget,
)
from execserver.wire.process import RemoteNetworkProxyLaunchConfig

if TYPE_CHECKING:
    from execserver.server.sessions import Session

log = logging.getLogger(__name__)

# How long a closed-wait poll sleeps between checks; the proxy outlives its
# process by at most this much (it only serves that process's children).
CLOSE_POLL_S = 3600.0


class ClosableProcess(Protocol):
    @property
    def closed(self) -> bool: ...

    async def wait_closed(self, timeout: float) -> None: ...


class SessionProxies:
    """Session-scoped: every live proxy of the session, closed with it."""

    def __init__(self) -> None:
        self._proxies: set[ProcessNetworkProxy] = set()
        self._watchers: set[asyncio.Task[None]] = set()

    def add(self, proxy: ProcessNetworkProxy) -> None:
        self._proxies.add(proxy)

    async def discard(self, proxy: ProcessNetworkProxy) -> None:
        self._proxies.discard(proxy)
        await proxy.aclose()

    def close_with(self, proc: ClosableProcess, proxy: ProcessNetworkProxy) -> None:
        """Stop ``proxy`` once ``proc`` is closed (its last output was read, so no
        child of it can still be talking through the proxy... or it is orphaned)."""

        async def watch() -> None:
            while not proc.closed:
                await proc.wait_closed(CLOSE_POLL_S)
            await self.discard(proxy)

        task = asyncio.get_running_loop().create_task(watch())
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def aclose(self) -> None:
        for task in list(self._watchers):
            task.cancel()
        proxies = list(self._proxies)
        self._proxies.clear()
        await asyncio.gather(*(p.aclose() for p in proxies), return_exceptions=True)


async def start_process_proxy(
    session: Session, process_id: str, config: RemoteNetworkProxyLaunchConfig
) -> ProcessNetworkProxy:
    """Start the proxy for ``process_id``; registered with the session at once so a
    cancelled request never leaks its listeners."""

    async def notify(note: NetworkPolicyDecisionNotification) -> None:
        await session.notify(m.NETWORK_POLICY_DECISION, note)

    async def ask(protocol: str, host: str, port: int, timeout: float) -> object:
        params = NetworkPolicyRequestParams(process_id, NetworkRequestTarget(protocol, host, port))
        return await session.request(m.NETWORK_POLICY_REQUEST, params, timeout)

    proxy = ProcessNetworkProxy(config, process_id=process_id, notify=notify, ask=ask)
    proxies = session.state.get(SessionProxies, SessionProxies)
    proxies.add(proxy)
    try:
        await proxy.start()
    except BaseException:
        await proxies.discard(proxy)
        raise
    log.info(
        "process %s: network proxy on 127.0.0.1:%d (socks %s), mode %s",
        process_id,
        proxy.http_port,
        proxy.socks_port,
        config.proxy.mode,
    )
    return proxy


def session_proxies(session: Session) -> SessionProxies:
    return session.state.get(SessionProxies, SessionProxies)
