"""The per-process proxy holds its line against its own sandboxed child:

* the local-address block cannot be dodged by a name that fails to resolve
  when checked and resolves (to a local address) when connecting: the proxy
  decides on one resolution and connects to exactly those addresses;
* ``x-unix-socket`` obeys limited mode's method guard, and socket paths are
  compared resolved (``/a/../b.sock``, ``//``, links), never as raw strings;
  the daemon's private directory (other proxies' sockets) is never reachable;
* a child cannot exhaust the daemon's file descriptors through its proxy:
  connections are capped per proxy and a reserve is kept for other clients.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

from execserver.netproxy.proxy import ProcessNetworkProxy
from execserver.netproxy.resolver import Resolution, ResolveError, Resolver
from execserver.wire.network import NetworkPolicyDecisionNotification
from execserver.wire.process import RemoteNetworkProxyLaunchConfig
from tests.support.attacks import (
    ROOT_READ,
    attack,
    bash,
    python,
    sandbox,
    short_tmp_dir,
    unix_stream_service,
    unrestricted,
)
from tests.support.netproxy import proxy_params, proxy_sockets, upstream_server
from tests.support.rpc import connect
from tests.support.servers import start_server
from tests.unit.test_netproxy_policy import config


class FlippingResolver(Resolver):
    """DNS that fails the first time a name is asked and answers 127.0.0.1 after
    (a rebinding name server). The only stand-in here: DNS is the external
    boundary, everything else is the real proxy on real sockets."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def resolve(self, host: str, port: int) -> Resolution:
        self.asked += 1
        if self.asked == 1:
            raise ResolveError(f"{host}: temporary failure in name resolution")
        return Resolution(("127.0.0.1",))


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


async def test_a_name_that_resolves_only_at_connect_time_is_not_connected() -> None:
    notes: list[NetworkPolicyDecisionNotification] = []

    async def notify(note: NetworkPolicyDecisionNotification) -> None:
        notes.append(note)

    resolver = FlippingResolver()
    launch = RemoteNetworkProxyLaunchConfig(proxy=config(domains={"*": "allow"}))
    proxy = ProcessNetworkProxy(
        launch, process_id="p", notify=notify, ask=None, resolver=resolver, upstream_environ={}
    )
    async with upstream_server() as local:
        await proxy.start()
        try:
            plain = await _exchange(
                proxy.http_port,
                f"GET http://rebind.example:{local.port}/x HTTP/1.1\r\nHost: h\r\n\r\n".encode(),
            )
            resolver.asked = 0
            tunnel = await _exchange(
                proxy.http_port, f"CONNECT rebind.example:{local.port} HTTP/1.1\r\n\r\n".encode()
            )
        finally:
            await proxy.aclose()
    assert plain.startswith(b"HTTP/1.1 502"), plain
    assert tunnel.startswith(b"HTTP/1.1 502"), tunnel
    assert local.seen == []
    assert resolver.asked == 1  # decided once, never looked up again


UNIX_PAYLOAD = r"""
import os, socket, sys

def proxy(path, method):
    hostport = os.environ["HTTP_PROXY"].split("://", 1)[1]
    host, port = hostport.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=20)
    s.sendall(f"{method} http://docker/containers/create HTTP/1.1\r\nHost: docker\r\n"
              f"x-unix-socket: {path}\r\nContent-Length: 0\r\n\r\n".encode())
    return s.recv(300).split(b"\r\n")[0].decode()

for i, (path, method) in enumerate(zip(sys.argv[1::2], sys.argv[2::2])):
    print(f"r{i}=" + proxy(path, method), flush=True)
"""


async def _unix_attack(
    tmp_path: Path, proxy: dict[str, Any], attempts: list[tuple[str, str]]
) -> tuple[list[str], int]:
    sockets = Path(short_tmp_dir())
    flat = [x for pair in attempts for x in pair]
    flat = [x.replace("{dir}", str(sockets)).replace("{base}", sockets.name) for x in flat]
    try:
        async with (
            start_server("execserver") as server,
            unix_stream_service(sockets, "docker.sock") as docker,
            connect(server.url) as client,
        ):
            proxy = {
                **proxy,
                "proxy": {
                    **proxy["proxy"],
                    "unixSockets": {
                        k.replace("{dir}", str(sockets)): v
                        for k, v in proxy["proxy"].get("unixSockets", {}).items()
                    },
                },
            }
            result = await attack(
                client,
                python(UNIX_PAYLOAD, *flat),
                cwd=tmp_path,
                context=sandbox([ROOT_READ]),
                networkProxy=proxy,
                enforceManagedNetwork=True,
            )
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    return [result.marker(f"r{i}") for i in range(len(attempts))], docker.accepted


async def test_x_unix_socket_obeys_limited_mode(tmp_path: Path) -> None:
    limited = proxy_params(mode="limited", unixSockets={"{dir}/docker.sock": "allow"})
    replies, accepted = await _unix_attack(
        tmp_path, limited, [("{dir}/docker.sock", "POST"), ("{dir}/docker.sock", "GET")]
    )
    assert replies[0].startswith("HTTP/1.1 403"), replies
    assert replies[1].startswith("HTTP/1.1 201"), replies
    assert accepted == 1  # only the GET got through


async def test_x_unix_socket_paths_are_compared_resolved(tmp_path: Path) -> None:
    full = proxy_params(
        mode="full",
        dangerouslyAllowAllUnixSockets=True,
        unixSockets={"{dir}/docker.sock": "deny"},
    )
    replies, accepted = await _unix_attack(
        tmp_path,
        full,
        [
            ("{dir}//docker.sock", "POST"),
            ("{dir}/../{base}/docker.sock", "POST"),
            ("{dir}/./docker.sock", "POST"),
        ],
    )
    assert all(r.startswith("HTTP/1.1 403") for r in replies), replies
    assert accepted == 0


async def test_x_unix_socket_never_reaches_another_proxy(tmp_path: Path) -> None:
    everything = proxy_params(mode="full", dangerouslyAllowAllUnixSockets=True)
    async with start_server("execserver") as server, connect(server.url) as client:
        before = proxy_sockets(server)
        await client.start(
            "sibling",
            python("import time; time.sleep(120)"),
            env={"PATH": "/usr/bin:/bin"},
            cwd="file:///tmp",
            sandbox=sandbox([ROOT_READ]),
            networkProxy=proxy_params(mode="full", domains={"*": "allow"}),
            enforceManagedNetwork=True,
        )
        sibling = sorted(proxy_sockets(server) - before)
        assert sibling
        result = await attack(
            client,
            python(UNIX_PAYLOAD, sibling[0], "GET"),
            cwd=tmp_path,
            context=sandbox([ROOT_READ]),
            networkProxy=everything,
            enforceManagedNetwork=True,
        )
        await client.ok("process/terminate", {"processId": "sibling"})
    assert result.marker("r0").startswith("HTTP/1.1 403"), result.output


FLOOD = r"""
import os, resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
hostport = os.environ["HTTP_PROXY"].split("://", 1)[1]
host, port = hostport.rsplit(":", 1)
held = []
for _ in range(int(sys.argv[1])):
    try:
        held.append(socket.create_connection((host, int(port)), timeout=5))
    except OSError as exc:
        print(f"connect failed: {exc}", flush=True)
        break
print(f"opened={len(held)}", flush=True)
time.sleep(120)
"""

LOW_FD_LIMIT = (
    "import os, resource, sys\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (400, 4096))\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


async def test_a_child_cannot_exhaust_the_daemons_descriptors_through_its_proxy(
    tmp_path: Path,
) -> None:
    wrapper = [sys.executable, "-c", LOW_FD_LIMIT]
    async with (
        start_server("execserver", wrapper=wrapper) as server,
        connect(server.url) as flooder,
    ):
        await flooder.start(
            "flood",
            python(FLOOD, "700"),
            env={"PATH": "/usr/bin:/bin"},
            cwd="file:///tmp",
            sandbox=unrestricted(network="enabled"),
            networkProxy=proxy_params(mode="full", domains={"*": "allow"}),
        )
        await flooder.wait_output("flood", b"opened=", timeout=60)
        # Let the proxy accept (and refuse) what the child queued.
        await asyncio.sleep(0)
        for _ in range(3):
            async with connect(server.url) as other:
                result = await attack(
                    other,
                    bash("echo alive"),
                    cwd=tmp_path,
                    context=sandbox([ROOT_READ]),
                )
                assert result.output.strip() == "alive", result.output
        await flooder.ok("process/terminate", {"processId": "flood"})


async def test_proxy_still_serves_after_refusing_a_flood() -> None:
    """After the cap, connections closed by the child free their slots again."""
    launch = RemoteNetworkProxyLaunchConfig(proxy=config(domains={"*": "allow"}))

    async def notify(note: NetworkPolicyDecisionNotification) -> None:
        del note

    proxy = ProcessNetworkProxy(
        launch, process_id="p", notify=notify, ask=None, resolver=Resolver({}), upstream_environ={}
    )
    await proxy.start()
    try:
        held = [await asyncio.open_connection("127.0.0.1", proxy.http_port) for _ in range(300)]
        # The ones past the cap are closed by the proxy: reading gives EOF.
        extra_reader, _ = held[-1]
        assert await asyncio.wait_for(extra_reader.read(), 10) == b""
        for _, writer in held:
            writer.close()
        await asyncio.sleep(0.2)
        data = await _exchange(proxy.http_port, b"garbage\r\n\r\n")
    finally:
        await proxy.aclose()
    assert data.startswith(b"HTTP/1.1 400")
