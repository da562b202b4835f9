"""Helpers for the managed-network tests (no tests here).

Everything stays on 127.0.0.1: an aiohttp "upstream" stands for the internet,
and the policy names it by made-up domains that execserver's proxy resolves
through the resolver overrides tests/support/netproxy_serve.py injects (no DNS). Tests
that also run against the reference use ``localhost`` (resolved from /etc/hosts)
instead.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support import netproxy_serve
from tests.support.rpc import RpcClient, connect
from tests.support.servers import RunningServer, start_server

MADE_UP = ("upstream.test", "other.test", "review.test", "slow.test")
# execserver with the made-up names resolving to 127.0.0.1 (start_server's ``serve``).
SERVE_WITH_HOSTS = netproxy_serve.command(dict.fromkeys(MADE_UP, "127.0.0.1"))

BASE_PROXY: dict[str, Any] = {
    "enabled": True,
    "mode": "full",
    "enableSocks5": False,
    "enableSocks5Udp": False,
    "allowUpstreamProxy": False,
    "dangerouslyAllowAllUnixSockets": False,
    "allowLocalBinding": False,
}

ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
SANDBOX_READ_ONLY = {
    "permissions": {
        "type": "managed",
        "file_system": {"type": "restricted", "entries": [ROOT_READ]},
        "network": "restricted",
    },
    "windowsSandboxLevel": "disabled",
}

# The child: runs a list of operations through the proxy variables and prints
# one JSON line per operation (status, headers, body, or the error).
CHILD = r"""
import json, os, socket, struct, sys

def addr(var):
    hostport = os.environ[var].split("://", 1)[1]
    host, port = hostport.rsplit(":", 1)
    return host, int(port)

def read_response(s, method="GET"):
    # Content-Length when given (a proxy may keep the connection open), else EOF.
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = None
    for line in head.split(b"\r\n")[1:]:
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if method == "HEAD":
        length = 0
    while length is None or len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return {"status": int(lines[0].split(" ")[1]), "headers": headers, "body": body.decode()}

def fetch(method, url):
    s = socket.create_connection(addr("HTTP_PROXY"), timeout=60)
    host = url.split("/")[2]
    head = f"{method} {url} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n"
    s.sendall((head + "Connection: close\r\n\r\n").encode())
    return read_response(s, method)

def read_head(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(1)
        if not chunk:
            break
        data += chunk
    return data

def tunnel(hostport, path):
    s = socket.create_connection(addr("HTTP_PROXY"), timeout=60)
    s.sendall(f"CONNECT {hostport} HTTP/1.1\r\nHost: {hostport}\r\n\r\n".encode())
    head = read_head(s)
    status = int(head.split(b" ")[1])
    if status != 200:
        return {"status": status, "connect": True}
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n".encode())
    return read_response(s)

def socks(host, port, path):
    s = socket.create_connection(addr("ALL_PROXY"), timeout=60)
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    name = host.encode()
    s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack("!H", port))
    reply = s.recv(10)
    if reply[1] != 0:
        return {"socks_reply": reply[1]}
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    return read_response(s)

def direct(host, port):
    try:
        socket.create_connection((host, port), timeout=10).close()
        return {"direct": "connected"}
    except OSError as exc:
        return {"direct": "failed", "errno": exc.errno}

def env(prefixes):
    keep = lambda k: k.upper().startswith(tuple(prefixes)) or "PROXY" in k.upper()
    return {"env": {k: v for k, v in os.environ.items() if keep(k)}}

for op in json.loads(sys.argv[1]):
    try:
        result = globals()[op[0]](*op[1:])
    except Exception as exc:
        result = {"error": repr(exc)}
    print(json.dumps(result), flush=True)
"""


@dataclass
class Upstream:
    port: int
    seen: list[str] = field(default_factory=list)
    # (path, headers) of each request, for header checks.
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)


@asynccontextmanager
async def upstream_server() -> AsyncIterator[Upstream]:
    """The stand-in for the internet; records what reached it."""
    app = web.Application()
    upstream = Upstream(0)

    async def handle(request: web.Request) -> web.Response:
        line = f"{request.method} {request.path_qs} host={request.headers.get('Host')}"
        upstream.seen.append(line)
        upstream.requests.append((request.path, dict(request.headers)))
        return web.Response(text=f"upstream saw {line}")

    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    upstream.port = int(runner.addresses[0][1])
    try:
        yield upstream
    finally:
        await runner.cleanup()


@asynccontextmanager
async def server_with_hosts(kind: str) -> AsyncIterator[RunningServer]:
    async with start_server(kind, serve=SERVE_WITH_HOSTS) as server:
        yield server


# What the test client answers to network/policyRequest: a decision object,
# "error" (a JSON-RPC error), or "silent" (never answers).
Answer = dict[str, Any] | str
Answerer = Callable[[dict[str, Any]], Answer]


@dataclass
class Run:
    results: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    exit_code: int | None
    start: dict[str, Any]
    raw_output: str
    sandbox_denied: bool | None = None


def proxy_params(*, timeout_ms: int | None = 5000, **proxy: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"proxy": {**BASE_PROXY, **proxy}, "executionId": "exec-1"}
    if timeout_ms is not None:
        params["policyDecisionTimeoutMs"] = timeout_ms
    return params


async def run_child(
    url: str,
    ops: list[list[Any]],
    *,
    network_proxy: dict[str, Any] | None,
    answer: Answerer | None = None,
    extra: dict[str, Any] | None = None,
    process_id: str = "np",
) -> Run:
    """Start the CHILD with ``ops`` and collect everything until process/closed."""
    async with connect(url, handshake=False) as peer:
        await peer.handshake()
        return await run_on(
            peer,
            ops,
            network_proxy=network_proxy,
            answer=answer,
            extra=extra,
            process_id=process_id,
        )


async def run_on(
    peer: RpcClient,
    ops: list[list[Any]],
    *,
    network_proxy: dict[str, Any] | None,
    answer: Answerer | None = None,
    extra: dict[str, Any] | None = None,
    process_id: str = "np",
) -> Run:
    params: dict[str, Any] = {
        "processId": process_id,
        "argv": [sys.executable, "-c", CHILD, json.dumps(ops)],
        "cwd": "file:///tmp",
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": False,
    }
    if network_proxy is not None:
        params["networkProxy"] = network_proxy
    params.update(extra or {})
    await peer.send({"id": 1, "method": "process/start", "params": params})
    out = b""
    run = Run([], [], [], None, {}, "")
    while True:
        msg = await peer.recv(timeout=60)
        method = msg.get("method")
        if method is None and msg.get("id") == 1:
            run.start = msg
            if "error" in msg:
                return run
        elif method == "process/output" and msg["params"]["processId"] == process_id:
            out += base64.b64decode(msg["params"]["chunk"])
        elif method == "network/policyDecision":
            run.decisions.append(msg["params"])
        elif method == "network/policyRequest":
            run.requests.append(msg)
            reply = answer(msg["params"]) if answer is not None else "silent"
            if reply == "error":
                await peer.send({"id": msg["id"], "error": {"code": -32000, "message": "no"}})
            elif reply != "silent":
                await peer.send({"id": msg["id"], "result": {"decision": reply}})
        elif method == "process/exited" and msg["params"]["processId"] == process_id:
            run.exit_code = msg["params"]["exitCode"]
            run.sandbox_denied = msg["params"]["sandboxDenied"]
        elif method == "process/closed" and msg["params"]["processId"] == process_id:
            break
    run.raw_output = out.decode(errors="replace")
    for line in run.raw_output.splitlines():
        if line.startswith("{"):
            run.results.append(json.loads(line))
    return run


def proxy_sockets(server: RunningServer) -> set[str]:
    """The paths of the unix sockets on which ``server``'s proxies serve HTTP (its
    own: other daemons of parallel tests have private directories too)."""
    import psutil

    paths = (str(c.laddr) for c in psutil.Process(server.process.pid).net_connections("unix"))
    return {path for path in paths if path.endswith("/http.sock")}
