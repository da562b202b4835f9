"""A process's managed network, held by its keeper across a daemon restart.

With ``--state-dir`` a process behind the daemon's proxy (``networkProxy``) or
its sandbox's bridge to a client-side loopback proxy is kept like any other
(execserver/keeper/): its keeper also holds duplicates of the proxy's and the
bridge's listening sockets, and removes their socket directory when the
process ends. ``network.json`` in the process directory says what they were
(the proxy's launch config, its ports, which socket is which). A restarted
daemon gets the sockets back from the keeper and serves them again
(``launch.restore_network``): the child's proxy variables and its bridge's
descriptor of the socket directory stay right, and a connection the child opened
while no daemon ran waits in the backlog. Connections open at the crash are
cut (the relays were the daemon's).

Not kept this way: a proxy with masked credentials (``launch.NetworkSetup``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from execserver.wire.process import RemoteNetworkProxyLaunchConfig

# The proxy and the bridge are loaded with the first managed network (launch.py
# says why); only their types are needed here before that.
if TYPE_CHECKING:
    from execserver.netproxy.loopback import LoopbackBridge
    from execserver.netproxy.proxy import ProcessNetworkProxy

__all__ = ["NETWORK_FILE", "KeptNetwork", "SavedListeners", "saved_listeners"]

NETWORK_FILE = "network.json"
PROXY, BRIDGE = "proxy", "bridge"


@dataclass
class KeptNetwork:
    """What goes to a keeper: ``description`` (written as ``network.json``),
    duplicates of every listening socket in its order (the keeper's from the
    spawn on; closed here once sent), the socket directories the keeper removes
    when its process ends, and ``kept`` (called once the keeper holds them: the
    daemon's proxies stop owning the directories)."""

    description: dict[str, Any]
    fds: list[int]
    dirs: list[str]
    kept: Callable[[], None]

    def close(self) -> None:
        """Not sent after all (the fds go with the keeper's spawn otherwise)."""
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    @classmethod
    def of(cls, resources: Sequence[ProcessNetworkProxy | LoopbackBridge]) -> KeptNetwork:
        from execserver.netproxy.proxy import ProcessNetworkProxy

        entries: list[dict[str, Any]] = []
        fds: list[int] = []
        dirs: list[str] = []
        try:
            for resource in resources:
                listeners = resource.listeners()
                entry: dict[str, Any] = {
                    "roles": [role for role, _ in listeners],
                    "socket_dir": resource.socket_dir,
                }
                if isinstance(resource, ProcessNetworkProxy):
                    entry |= {
                        "kind": PROXY,
                        "config": msgspec.json.encode(resource.config).decode(),
                        "http_port": resource.http_port,
                        "socks_port": resource.socks_port,
                    }
                else:
                    entry["kind"] = BRIDGE
                entries.append(entry)
                fds += [os.dup(fd) for _, fd in listeners]
                if resource.socket_dir is not None:
                    dirs.append(resource.socket_dir)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

        def kept() -> None:
            for resource in resources:
                resource.kept()

        return cls({"resources": entries}, fds, dirs, kept)


@dataclass(frozen=True)
class SavedListeners:
    """One proxy or bridge as ``network.json`` describes it, with its sockets."""

    kind: str
    roles: list[str]
    sockets: list[Any]  # socket.socket, in ``roles`` order
    socket_dir: str | None
    config: RemoteNetworkProxyLaunchConfig | None = None
    http_port: int = 0
    socks_port: int | None = None


def saved_listeners(description: dict[str, Any], sockets: Sequence[Any]) -> list[SavedListeners]:
    """``network.json``'s resources, each with its share of the keeper's sockets.
    Raises ValueError when the two do not match."""
    found: list[SavedListeners] = []
    offset = 0
    for entry in description["resources"]:
        roles = [str(r) for r in entry["roles"]]
        mine = list(sockets[offset : offset + len(roles)])
        offset += len(roles)
        if len(mine) != len(roles):
            raise ValueError("the keeper holds fewer sockets than network.json names")
        config = None
        if entry["kind"] == PROXY:
            config = msgspec.json.decode(entry["config"], type=RemoteNetworkProxyLaunchConfig)
        elif entry["kind"] != BRIDGE:
            raise ValueError(f"unknown network resource {entry['kind']!r}")
        found.append(
            SavedListeners(
                str(entry["kind"]),
                roles,
                mine,
                entry.get("socket_dir"),
                config,
                int(entry.get("http_port") or 0),
                entry.get("socks_port"),
            )
        )
    if offset != len(sockets):
        raise ValueError("the keeper holds more sockets than network.json names")
    return found
