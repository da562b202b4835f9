"""A tenant's managed network within its profile's ``network_allow``, through a real
daemon (root) and its real proxy: B's request cannot allow a host beyond the
ceiling, a request without an allow-list gets the ceiling's, and the proxy denies
every host outside it even when B's own client answers ``allow`` to the policy
request, from a sandboxed process (as the codex CLI runs its commands: a
workspace-write sandbox, restricted network, the daemon's managed network) as
from an unsandboxed one of an ``optional`` tenant. A tenant's sandboxed bridge
reaches its proxy's socket directory, which is its account's and no one else's:
B, sandboxed or not, can neither list it nor connect to A's proxy, and the
command never holds the descriptor its bridge reaches it by. Everything stays on
127.0.0.1: ``upstream.test`` and ``other.test`` are made-up names the daemon's
resolver maps there (tests/support/netproxy_serve.py)."""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support.netproxy import (
    CHILD,
    SANDBOX_READ_ONLY,
    SERVE_WITH_HOSTS,
    proxy_params,
    proxy_sockets,
    run_on,
    upstream_server,
)
from tests.support.rpc import RpcClient, connect, poll_until, uri
from tests.support.sandbox import ROOT_READ, context_json, entry, managed
from tests.support.servers import RunningServer
from tests.support.state_dir import end_keepers
from tests.support.tenants import TOKEN_A, TOKEN_B, TenantHost, output_of, start, tenant_host

INVALID_REQUEST = -32600
CEILING = ["upstream.test"]


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        made.write_tenants(bob={"network": "managed", "network_allow": CEILING})
        yield made


@pytest.fixture
def managed_host() -> Iterator[TenantHost]:
    """A (``sandbox = "required"``) and B (``optional``), both with a managed
    network bounded by the ceiling."""
    with tenant_host() as made:
        made.write_tenants(
            alice={"network": "managed", "network_allow": CEILING},
            bob={"network": "managed", "network_allow": CEILING},
        )
        yield made


# The CHILD, plus an operation that lists the command's own descriptors and one that
# waits until stdin is closed.
CHILD_FDS = (
    r"""
def fds():
    import os
    seen = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            seen[name] = os.readlink("/proc/self/fd/" + name)
        except OSError as exc:
            seen[name] = repr(exc)
    return {"fds": seen}

def hold():
    import sys
    sys.stdin.read()
    return {"held": "until stdin closed"}
"""
    + CHILD
)


def _child(ops: list[list[Any]]) -> dict[str, Any]:
    """A start of the CHILD with ``ops`` (the system's python: the tenant's account
    runs it), unsandboxed (B's sandbox is optional): it reaches its proxy on
    127.0.0.1, whose decisions are what is tested here."""
    return {"argv": ["/usr/bin/python3", "-c", CHILD_FDS, json.dumps(ops)]}


def _workspace_sandbox(workspace: Path) -> dict[str, Any]:
    """What the codex CLI asks for a command: workspace-write (the root readable, the
    workspace writable), restricted network, run in the workspace."""
    return context_json(
        managed([ROOT_READ, entry(workspace, "write")], network="restricted"), cwd=uri(workspace)
    )


def _sandboxed_child(ops: list[list[Any]], workspace: Path) -> dict[str, Any]:
    """The CHILD in a workspace-write sandbox whose only way out is the daemon's
    managed network (``enforceManagedNetwork`` with the request's ``networkProxy``)."""
    return {
        **_child(ops),
        "cwd": uri(workspace),
        "sandbox": _workspace_sandbox(workspace),
        "enforceManagedNetwork": True,
    }


async def test_a_request_allowing_a_host_beyond_the_ceiling_is_refused(host: TenantHost) -> None:
    async with upstream_server() as upstream, host.serve(serve=SERVE_WITH_HOSTS) as server:
        async with connect(server.url, token=TOKEN_B) as b:
            url = f"http://other.test:{upstream.port}/"
            ops = [["fetch", "GET", url]]
            for allowed in ({"other.test": "allow"}, {"*.test": "allow"}, {"*": "allow"}):
                run = await run_on(
                    b, ops, network_proxy=proxy_params(domains=allowed), extra=_child(ops)
                )
                pattern = next(iter(allowed))
                assert run.start["error"] == {
                    "code": INVALID_REQUEST,
                    "message": f"tenant bob: network allow {pattern} is outside the tenant's "
                    "ceiling (network_allow upstream.test)",
                }, allowed
        assert upstream.seen == []


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
async def test_the_proxy_denies_a_host_outside_the_ceiling_even_when_bs_client_allows_it(
    host: TenantHost, sandboxed: bool
) -> None:
    async with upstream_server() as upstream, host.serve(serve=SERVE_WITH_HOSTS) as server:
        inside = f"http://upstream.test:{upstream.port}/inside"
        outside = f"http://other.test:{upstream.port}/outside"
        async with connect(server.url, token=TOKEN_B) as b:
            # No allow-list of its own, and B's client allows whatever it is asked.
            ops = [["fetch", "GET", inside], ["fetch", "GET", outside]]
            run = await run_on(
                b,
                ops,
                network_proxy=proxy_params(domains=None, reviewDomains=["other.test"]),
                answer=lambda request: {"type": "allow"},
                extra=_sandboxed_child(ops, host.b) if sandboxed else _child(ops),
            )
        assert "error" not in run.start, run.start
        got_inside, got_outside = run.results
        # Inside the ceiling: the ceiling's list is what the proxy allows.
        assert got_inside["status"] == 200, run.raw_output
        # Outside: denied before B's decider is asked, and nothing reached it.
        assert got_outside["status"] == 403, run.raw_output
        assert got_outside["headers"]["x-proxy-error"] == "blocked-by-allowlist"
        assert [r["params"]["request"]["host"] for r in run.requests] == []
        assert upstream.seen == [f"GET /inside host=upstream.test:{upstream.port}"]
        denied = [d for d in run.decisions if d["host"] == "other.test"]
        assert [(d["decision"], d["source"]) for d in denied] == [("deny", "baseline_policy")]


@pytest.mark.parametrize("keepers", [False, True], ids=["daemon", "state-dir"])
async def test_a_sandboxed_tenant_fetches_through_its_proxy_within_the_ceiling(
    managed_host: TenantHost, keepers: bool
) -> None:
    host = managed_host
    # With --state-dir the private directory is STATE_DIR/private, under the 0700
    # STATE_DIR that A's account cannot search (and its process runs in a keeper).
    state = host.base / "state"
    extra = ("--state-dir", str(state)) if keepers else ()
    try:
        async with (
            upstream_server() as upstream,
            host.serve(*extra, serve=SERVE_WITH_HOSTS) as server,
        ):
            inside = f"http://upstream.test:{upstream.port}/inside"
            outside = f"http://other.test:{upstream.port}/outside"
            ops: list[list[Any]] = [
                ["fetch", "GET", inside],
                ["fetch", "GET", outside],
                ["direct", "127.0.0.1", upstream.port],
                ["fds"],
            ]
            async with connect(server.url, token=TOKEN_A) as a:
                run = await run_on(
                    a,
                    ops,
                    network_proxy=proxy_params(domains=None),
                    extra=_sandboxed_child(ops, host.a),
                )
    finally:
        if keepers:
            await end_keepers(state)
    assert run.start.get("result", {}).get("sandboxType") == "linuxSeccomp", run.start
    assert len(run.results) == 4, run.raw_output
    got_inside, got_outside, direct, fds = run.results
    assert got_inside["status"] == 200, run.raw_output
    assert got_inside["body"] == f"upstream saw GET /inside host=upstream.test:{upstream.port}"
    assert got_outside["status"] == 403, run.raw_output
    assert got_outside["headers"]["x-proxy-error"] == "blocked-by-allowlist"
    # The sandbox has no way around its proxy.
    assert direct["direct"] == "failed"
    assert upstream.seen == [f"GET /inside host=upstream.test:{upstream.port}"]
    assert run.exit_code == 0, run.raw_output
    # The bridge reaches the socket directory by a descriptor the command never holds:
    # stdin, stdout, stderr and the listing's own descriptor, nothing else.
    held = fds["fds"]
    assert set(held) - {"0", "1", "2"} == {max(held, key=int)}, held
    assert not any("execserver" in target for target in held.values()), held


async def test_a_sandboxed_tenant_is_bridged_to_a_loopback_proxy_it_names(
    managed_host: TenantHost,
) -> None:
    # Without network_allow a managed network may also be a proxy on the executor's
    # loopback that the request names (no networkProxy): the daemon's loopback
    # bridge, whose per-port sockets are the account's as well.
    host = managed_host
    host.write_tenants(alice={"network": "managed", "network_allow": None})
    async with upstream_server() as proxy, host.serve() as server:
        ops: list[list[Any]] = [["fetch", "GET", "http://example.invalid/p"], ["fds"]]
        extra = {
            **_sandboxed_child(ops, host.a),
            "env": {"PATH": "/usr/bin:/bin", "HTTP_PROXY": f"http://127.0.0.1:{proxy.port}"},
        }
        async with connect(server.url, token=TOKEN_A) as a:
            run = await run_on(a, ops, network_proxy=None, extra=extra)
    assert run.start.get("result", {}).get("sandboxType") == "linuxSeccomp", run.start
    assert len(run.results) == 2, run.raw_output
    fetched, fds = run.results
    assert fetched["status"] == 200, run.raw_output
    assert proxy.seen == ["GET /p host=example.invalid"]
    held = fds["fds"]
    assert set(held) - {"0", "1", "2"} == {max(held, key=int)}, held


def _loopback_listeners(server: RunningServer) -> list[int]:
    """The daemon's TCP listeners on 127.0.0.1 other than its own websocket: its
    proxies' front ends."""
    import psutil

    own = int(server.url.rsplit(":", 1)[1])
    return sorted(
        c.laddr.port
        for c in psutil.Process(server.process.pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.ip == "127.0.0.1" and c.laddr.port != own
    )


# B's probe of A's proxy: list each socket directory and connect to its HTTP socket,
# connect through every descriptor it can see in /proc (A's bridge holds one), and
# ask A's proxy on its loopback TCP ports for a URL.
PROBE = r"""
import json, os, socket, sys
out = {}
for d in json.loads(sys.argv[1]):
    try:
        out[d + " list"] = os.listdir(d)
    except OSError as exc:
        out[d + " list"] = exc.errno
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(os.path.join(d, "http.sock"))
        out[d + " connect"] = "connected"
    except OSError as exc:
        out[d + " connect"] = exc.errno
reached = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(f"/proc/{pid}/fd/{fd}/http.sock")
            held = os.stat(f"/proc/{pid}/fd/{fd}")
            reached.append([f"{pid}/{fd}", held.st_dev, held.st_ino])
        except OSError:
            pass
out["reached"] = reached
# A's proxy also listens on the host's loopback (for an unsandboxed process).
for port in json.loads(sys.argv[2]):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(f"GET {sys.argv[3]} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        out[f"tcp {port}"] = s.recv(100).decode(errors="replace").split("\r\n")[0] or "closed"
    except OSError as exc:
        out[f"tcp {port}"] = exc.errno
print(json.dumps(out))
"""


async def test_b_cannot_list_or_connect_to_as_proxy_sandboxed_or_not(
    managed_host: TenantHost,
) -> None:
    host = managed_host
    async with upstream_server() as upstream, host.serve(serve=SERVE_WITH_HOSTS) as server:
        inside = f"http://upstream.test:{upstream.port}/inside"
        async with connect(server.url, token=TOKEN_A) as a, connect(server.url, token=TOKEN_B) as b:
            # A's sandboxed command fetches once, then waits on stdin: its proxy lives on.
            ops = json.dumps([["fetch", "GET", inside], ["hold"]])
            argv = ["/usr/bin/python3", "-c", CHILD_FDS, ops]
            ok, result = await start(
                a,
                "a-held",
                argv,
                host.a,
                sandbox=_workspace_sandbox(host.a),
                enforceManagedNetwork=True,
                networkProxy=proxy_params(domains=None),
                pipeStdin=True,
            )
            assert ok, result
            assert await poll_until(lambda: upstream.seen != [], 30), "A's fetch never arrived"
            sockets = proxy_sockets(server)
            assert len(sockets) == 1, sockets
            directory = os.path.dirname(next(iter(sockets)))
            # The socket directory and its sockets are A's account's, and only its.
            info = os.lstat(directory)
            held = (info.st_dev, info.st_ino)
            assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (host.a_uid, 0o700)
            for name in os.listdir(directory):
                assert os.lstat(os.path.join(directory, name)).st_uid == host.a_uid
            ports = _loopback_listeners(server)
            assert ports, "A's proxy should listen on the host's loopback too"
            stolen = f"http://upstream.test:{upstream.port}/stolen"
            probe = ["/usr/bin/python3", "-c", PROBE, json.dumps([directory]), json.dumps(ports)]
            probe.append(stolen)
            found: dict[str, dict[str, Any]] = {}
            # B unsandboxed and sandboxed; and A's own other sandbox, which has a
            # policy of its own and must not use this process's proxy either.
            for label, peer, workspace, sandbox in (
                ("unsandboxed", b, host.b, None),
                ("sandboxed", b, host.b, _workspace_sandbox(host.b)),
                ("a-sibling", a, host.a, _workspace_sandbox(host.a)),
            ):
                ok, result = await start(peer, label, probe, workspace, sandbox=sandbox)
                assert ok, result
                text, code = await output_of(peer, label)
                assert code == 0, text
                found[label] = json.loads(text.splitlines()[-1])
            await a.call("process/terminate", {"processId": "a-held"})
    for label, got in found.items():
        assert got[directory + " list"] in (13, 2), (label, got)  # EACCES / ENOENT
        assert got[directory + " connect"] != "connected", (label, got)
        # Through a descriptor of A's socket directory. (Others' own are no breach: a
        # test on another worker runs processes under the same two accounts, whose
        # proxy directories their own account may reach.)
        assert [r for r in got["reached"] if (r[1], r[2]) == held] == [], (label, got)
    # On the host's loopback A's proxy takes no connection of another account: it
    # closes B's at once (a restricted sandbox has no inet socket, and a loopback of
    # its own). Without an answer either way: an end of stream when the proxy closes
    # before B's request has arrived, ECONNRESET when it arrived first (the kernel
    # resets a socket closed with unread data; the proxy's owner check runs in a
    # thread, so on a loaded machine the request often wins).
    for port in ports:
        assert found["unsandboxed"][f"tcp {port}"] in ("closed", errno.ECONNRESET), found
        assert found["sandboxed"][f"tcp {port}"] in (1, 111), found  # EPERM, ECONNREFUSED
    # Unsandboxed, only the kernel's check on A's 0700 directory stops B.
    assert found["unsandboxed"][directory + " list"] == 13
    assert found["unsandboxed"][directory + " connect"] == 13
    # Nothing but A's own fetch went through A's proxy.
    assert upstream.seen == [f"GET /inside host=upstream.test:{upstream.port}"]


# B's UDP association: ASSOCIATE through its proxy (no client address named), print
# the relay's port, wait for the gate file, then send its own datagram through the
# relay to upstream.test and print what comes back.
B_UDP = r"""
import json, os, socket, struct, sys, time
host, port = os.environ["ALL_PROXY"].split("://", 1)[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=20)
s.sendall(b"\x05\x01\x00")
assert s.recv(2) == b"\x05\x00"
s.sendall(b"\x05\x03\x00\x01" + bytes(6))
r = s.recv(10)
relay = struct.unpack("!H", r[8:10])[0]
print(json.dumps({"reply": r[1], "relay": relay}), flush=True)
for _ in range(300):
    if os.path.exists(sys.argv[1]):
        break
    time.sleep(0.1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", 0))
u.settimeout(10)
head = b"\0\0\0\x03" + bytes([13]) + b"upstream.test" + struct.pack("!H", int(sys.argv[2]))
u.sendto(head + b"from-b", ("127.0.0.1", relay))
try:
    data, _ = u.recvfrom(65536)
    print(json.dumps({"echo": data[-6:].decode()}), flush=True)
except OSError as exc:
    print(json.dumps({"echo": repr(exc)}), flush=True)
"""

# A's datagram to B's relay, from a socket of A's account (autobound on sending),
# then the gate file that lets B go on.
A_UDP = r"""
import pathlib, socket, struct, sys
head = b"\0\0\0\x03" + bytes([13]) + b"upstream.test" + struct.pack("!H", int(sys.argv[2]))
relay = ("127.0.0.1", int(sys.argv[1]))
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(head + b"from-a", relay)
pathlib.Path(sys.argv[3]).touch()
"""


class _Echo(asyncio.DatagramProtocol):
    """The UDP destination: records every payload and sends it back."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.seen.append(data)
        assert self.transport is not None
        self.transport.sendto(data, addr)


async def _first_line(client: RpcClient, process_id: str) -> dict[str, Any]:
    """The first JSON line a running process printed (read as it comes)."""
    text, after = "", 0
    async with asyncio.timeout(30):
        while "\n" not in text:
            result = await client.read(process_id, waitMs=5000, afterSeq=after)
            for chunk in result["chunks"]:
                text += base64.b64decode(chunk["chunk"]).decode()
            after = result["nextSeq"] - 1
    return cast(dict[str, Any], json.loads(text.splitlines()[0]))


async def test_as_socks_udp_relay_takes_no_datagram_from_bs_socket(
    managed_host: TenantHost,
) -> None:
    # Unsandboxed processes (a sandbox's ASSOCIATE is refused): every account sends
    # from 127.0.0.1 on the host's loopback, so the relay checks the socket's owner.
    host = managed_host
    managed = {"network": "managed", "network_allow": CEILING}
    host.write_tenants(alice={**managed, "sandbox": "optional"}, bob=managed)
    loop = asyncio.get_running_loop()
    transport, echo = await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", 0))
    destination = int(transport.get_extra_info("sockname")[1])
    gate = host.shared / "gate"
    try:
        async with (
            host.serve(serve=SERVE_WITH_HOSTS) as server,
            connect(server.url, token=TOKEN_A) as a,
            connect(server.url, token=TOKEN_B) as b,
        ):
            udp = proxy_params(domains=None, enableSocks5=True, enableSocks5Udp=True)
            argv = ["/usr/bin/python3", "-c", B_UDP, str(gate), str(destination)]
            ok, result = await start(b, "b-udp", argv, host.b, networkProxy=udp)
            assert ok, result
            first = await _first_line(b, "b-udp")
            assert first["reply"] == 0, first
            attack = ["/usr/bin/python3", "-c", A_UDP, str(first["relay"]), str(destination)]
            ok, result = await start(a, "a-udp", [*attack, str(gate)], host.a)
            assert ok, result
            text, code = await output_of(a, "a-udp")
            assert code == 0, text
            text, code = await output_of(b, "b-udp")
            assert code == 0, text
    finally:
        transport.close()
    # A's datagram never left the relay, and it did not take B's place: B's own
    # went through and its answer came back.
    assert json.loads(text.splitlines()[-1]) == {"echo": "from-b"}, text
    assert echo.seen == [b"from-b"]


async def test_a_managed_network_without_the_daemons_proxy_is_refused(host: TenantHost) -> None:
    # A sandbox bridged to a proxy on the executor's loopback that the request names
    # (HTTP_PROXY): the daemon could not hold that proxy to the ceiling.
    async with (
        host.serve(serve=SERVE_WITH_HOSTS) as server,
        connect(server.url, token=TOKEN_B) as b,
    ):
        extra = {
            **_child([]),
            "sandbox": SANDBOX_READ_ONLY,
            "enforceManagedNetwork": True,
            "env": {"PATH": "/usr/bin:/bin", "HTTP_PROXY": "http://127.0.0.1:9"},
        }
        run = await run_on(b, [], network_proxy=None, extra=extra)
    assert run.start["error"] == {
        "code": INVALID_REQUEST,
        "message": "tenant bob: a managed network without the daemon's proxy (networkProxy) "
        "is outside the tenant's ceiling (network_allow)",
    }


def test_doctor_shows_the_ceiling_and_network_allow_needs_a_managed_level(
    host: TenantHost,
) -> None:
    doctor = [sys.executable, "-m", "execserver", "doctor", "--tenants", str(host.tenants_file)]
    shown = subprocess.run(doctor, capture_output=True, text=True, check=True).stdout
    assert "network managed (only hosts upstream.test);" in shown
    host.write_tenants(bob={"network": "none", "network_allow": CEILING})
    result = subprocess.run(doctor, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip().endswith('tenant bob: network_allow needs network = "managed"')
