"""A managed-network child (enforceManagedNetwork + its own proxy) must reach
nothing but its proxy: no host unix socket by path (a docker.sock stand-in), no
other sandbox's proxy socket, and never the daemon's own websocket listener,
whatever the proxy's domain policy allows. Before the fix all three worked, and
the last one ran an unsandboxed process as the daemon's uid (root)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.support.attacks import (
    ROOT_READ,
    attack,
    python,
    sandbox,
    short_tmp_dir,
    unix_stream_service,
)
from tests.support.netproxy import proxy_params, proxy_sockets, upstream_server
from tests.support.rpc import connect
from tests.support.servers import start_server

# Runs inside the sandbox. argv: docker socket, daemon port, upstream port, then
# the sibling proxies' socket paths as the host sees them.
PAYLOAD = r"""
import errno, glob, json, os, socket, sys
docker, private = sys.argv[1], sys.argv[4]
daemon_port, upstream_port = int(sys.argv[2]), int(sys.argv[3])
siblings = sys.argv[5:]

def attempt(name, func):
    try:
        print(f"{name}={func()}", flush=True)
    except OSError as exc:
        print(f"{name}={errno.errorcode.get(exc.errno, exc.errno)}", flush=True)

def unix_http(path, request):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(request)
    return s.recv(200).split(b"\r\n")[0].decode() or "connected"

def proxy(request):
    hostport = os.environ["HTTP_PROXY"].split("://", 1)[1]
    host, port = hostport.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=20)
    s.sendall(request)
    return s.recv(200).split(b"\r\n")[0].decode()

create = b"POST /containers/create HTTP/1.1\r\nHost: docker\r\nContent-Length: 0\r\n\r\n"
attempt("docker", lambda: unix_http(docker, create))
for i, path in enumerate(siblings):
    upgrade = f"CONNECT localhost:{daemon_port} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    attempt(f"sibling{i}", lambda: unix_http(path, upgrade))
attempt("listing", lambda: json.dumps(sorted(glob.glob(private + "/*/*.sock"))))
attempt("dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) and "created")
def ask(line):
    return lambda: proxy(f"{line} HTTP/1.1\r\nHost: x\r\n\r\n".encode())

attempt("daemon_connect", ask(f"CONNECT localhost:{daemon_port}"))
attempt("daemon_get", ask(f"GET http://127.0.0.1:{daemon_port}/readyz"))
attempt("daemon_mapped", ask(f"CONNECT [::ffff:127.0.0.1]:{daemon_port}"))
attempt("upstream", ask(f"GET http://localhost:{upstream_port}/ok"))
"""

SLEEPER = "import time; time.sleep(120)"


def _managed(proxy: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"networkProxy": proxy, "enforceManagedNetwork": True, **extra}


async def test_managed_network_child_cannot_reach_host_sockets_siblings_or_the_daemon(
    tmp_path: Path,
) -> None:
    sockets = Path(short_tmp_dir())
    try:
        async with (
            start_server("execserver") as server,
            unix_stream_service(sockets, "docker.sock") as docker,
            upstream_server() as upstream,
            connect(server.url) as client,
        ):
            daemon_port = server.url.rsplit(":", 1)[1]
            read_only = sandbox([ROOT_READ])
            generous = proxy_params(
                mode="full",
                domains={"localhost": "allow", "127.0.0.1": "allow", "::ffff:127.0.0.1": "allow"},
            )
            before = proxy_sockets(server)
            # A sibling whose proxy lets everything local through, alive during the attack.
            await client.start(
                "sibling",
                python(SLEEPER),
                env={"PATH": "/usr/bin:/bin"},
                cwd="file:///tmp",
                sandbox=read_only,
                **_managed(generous),
            )
            siblings = sorted(proxy_sockets(server) - before)
            assert siblings, "the sibling's proxy socket should exist on the host"
            # This daemon's private directory (a socket's grandparent): the daemons of
            # parallel tests have theirs in the same temporary directory.
            private = str(Path(siblings[0]).parent.parent)
            result = await attack(
                client,
                python(PAYLOAD, docker.path, daemon_port, str(upstream.port), private, *siblings),
                cwd=tmp_path,
                context=read_only,
                **_managed(generous),
            )
            await client.ok("process/terminate", {"processId": "sibling"})
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    out = result.output
    assert result.marker("docker") == "EPERM", out
    for i in range(len(siblings)):
        assert result.marker(f"sibling{i}") == "EPERM", out
    # No proxy socket is visible in the daemon's private directory, its own included:
    # its bridge reaches its own through a descriptor (sandbox/proxy_routed.py).
    assert json.loads(result.marker("listing")) == [], out
    assert result.marker("dgram") == "EPERM", out
    for name in ("daemon_connect", "daemon_get", "daemon_mapped"):
        assert result.marker(name).startswith("HTTP/1.1 502"), (name, out)
    # The proxy itself works: the same child reaches an allowed upstream.
    assert result.marker("upstream") == "HTTP/1.1 200 OK", out
    assert docker.accepted == 0
    # Host comes from the URL the policy decided on, not from the child's header.
    assert upstream.seen == [f"GET /ok host=localhost:{upstream.port}"]


SIBLING_BY_PATH = r"""
import errno, socket, sys
for i, path in enumerate(sys.argv[1:]):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        print(f"sibling{i}=connected", flush=True)
    except OSError as exc:
        print(f"sibling{i}={errno.errorcode.get(exc.errno, exc.errno)}", flush=True)
"""


async def test_proxy_sockets_are_masked_even_where_unix_sockets_are_allowed(
    tmp_path: Path,
) -> None:
    """A network-enabled sandbox may create unix sockets; the proxies' private
    directory is still masked in its view, so no proxy socket is reachable."""
    async with start_server("execserver") as server, connect(server.url) as client:
        before = proxy_sockets(server)
        await client.start(
            "sibling",
            python(SLEEPER),
            env={"PATH": "/usr/bin:/bin"},
            cwd="file:///tmp",
            sandbox=sandbox([ROOT_READ]),
            **_managed(proxy_params(domains={"localhost": "allow"})),
        )
        siblings = sorted(proxy_sockets(server) - before)
        assert siblings
        result = await attack(
            client,
            python(SIBLING_BY_PATH, *siblings),
            cwd=tmp_path,
            context=sandbox([ROOT_READ], network="enabled"),
        )
        await client.ok("process/terminate", {"processId": "sibling"})
    for i in range(len(siblings)):
        assert result.marker(f"sibling{i}") in ("EACCES", "ENOENT"), result.output


async def test_unix_socket_allow_list_cannot_be_enforced_so_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    async with start_server("execserver") as server, connect(server.url) as client:
        result = await attack(
            client,
            python(f"open({str(marker)!r}, 'w').close()"),
            cwd=tmp_path,
            context=sandbox([ROOT_READ]),
            **_managed(
                proxy_params(domains={"localhost": "allow"}),
                managedNetwork={"allowUnixSockets": ["/var/run/docker.sock"]},
            ),
        )
    assert (result.exit_code, result.sandbox_denied) == (101, True)
    assert "allowUnixSockets cannot be enforced" in result.output
    assert not marker.exists()


async def test_loopback_bridge_never_points_at_the_daemon(tmp_path: Path) -> None:
    """enforceManagedNetwork with HTTP_PROXY naming the daemon's own port: the
    executor refuses to bridge it (the command never runs)."""
    async with start_server("execserver") as server, connect(server.url) as client:
        port = server.url.rsplit(":", 1)[1]
        result = await attack(
            client,
            python("print('ran')"),
            cwd=tmp_path,
            context=sandbox([ROOT_READ]),
            env={"PATH": "/usr/bin:/bin", "HTTP_PROXY": f"http://127.0.0.1:{port}"},
            enforceManagedNetwork=True,
        )
    assert result.exit_code == 101 and "ran" not in result.output.split()
    assert json.dumps(result.output)  # the refusal text is reported, not a traceback
