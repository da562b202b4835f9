"""credentialMasking / credentialProviders: the proxy holds the secrets.

The child is started with two secrets: ``VENDOR_TOKEN`` from the request's
env and ``GHOST_TOKEN`` inherited from the executor's own environment. With
masking on, the child only ever sees placeholders; the proxy swaps the real
values into allowed plain-HTTP requests bound to each provider's URL prefix
and nowhere else. The secrets must never show up in the child's environment
or output, in any message the client receives (policyDecision notifications
included), in the daemon's log or in its audit log.

execserver only for the masking itself: the reference 0.169.0 passes both
secrets to the child unchanged (probed), so there is nothing to compare.
Both servers advertise the capabilities and validate the provider objects
the same way.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.netproxy import (
    SERVE_WITH_HOSTS,
    proxy_params,
    run_child,
    server_with_hosts,
    upstream_server,
)
from tests.support.rpc import connect
from tests.support.servers import RunningServer, start_server

VENDOR_SECRET = "vendor_r34lS3cretValue0001"
GHOST_SECRET = "gh0st-daemon-side-secret-0002"

# Prints its env, then sends each request (headers may name $VAR) and prints
# the status of each; response bodies are not echoed by the upstream.
CHILD = r"""
import base64, json, os, socket, sys
print("ENV " + json.dumps({k: os.environ.get(k) for k in ("VENDOR_TOKEN", "GHOST_TOKEN")}))
def send(url, headers):
    host, port = os.environ["HTTP_PROXY"].split("://", 1)[1].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=30)
    extra = ""
    for k, v in headers.items():
        if v == "$BASIC_VENDOR":  # Basic auth built from what the child has
            pair = ("me:" + os.environ["VENDOR_TOKEN"]).encode()
            v = "Basic " + base64.b64encode(pair).decode()
        for var in ("VENDOR_TOKEN", "GHOST_TOKEN"):
            v = v.replace("$" + var, os.environ.get(var, ""))
        extra += f"{k}: {v}\r\n"
    head = f"GET {url} HTTP/1.1\r\nHost: {url.split('/')[2]}\r\n{extra}"
    s.sendall((head + "Connection: close\r\n\r\n").encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data.split(b" ")[1].decode()
for url, headers in json.loads(sys.argv[1]):
    print("STATUS", url, send(url, headers), flush=True)
"""


@asynccontextmanager
async def logged_execserver(tmp: Path) -> AsyncIterator[tuple[RunningServer, Path, Path]]:
    """execserver with an audit log and its own log (DEBUG) in files."""
    audit, log = tmp / "audit.jsonl", tmp / "daemon.log"
    env = {**os.environ, "GHOST_TOKEN": GHOST_SECRET}
    flags = ["--audit-log", str(audit), "--log-level", "DEBUG"]
    with log.open("wb") as err:
        async with start_server(
            "execserver", flags, env=env, stderr=err, serve=SERVE_WITH_HOSTS
        ) as server:
            yield server, audit, log


def providers(port: int) -> dict[str, Any]:
    return {
        "vendor": {
            "env": ["VENDOR_TOKEN"],
            "patterns": ["^vendor_[A-Za-z0-9]+$"],
            "url_prefixes": [f"http://upstream.test:{port}/api"],
            "auth": ["bearer"],
        },
        "ghost": {
            "env": ["GHOST_TOKEN"],
            "url_prefix_from_env": "GHOST_URL",
            "auth": ["header"],
            "header": "X-Api-Key",
            "prefix": "Key ",
        },
    }


async def test_secrets_are_injected_by_the_proxy_and_never_seen_by_the_child(
    tmp_path: Path,
) -> None:
    async with upstream_server() as up, logged_execserver(tmp_path) as (server, audit, log):
        api = f"http://upstream.test:{up.port}/api/v1"
        requests = [
            [api, {"Authorization": "Bearer $VENDOR_TOKEN"}],  # bound: real value
            [f"http://other.test:{up.port}/api/v1", {"Authorization": "Bearer $VENDOR_TOKEN"}],
            [
                f"http://upstream.test:{up.port}/elsewhere",
                {"Authorization": "Bearer $VENDOR_TOKEN"},
            ],
            [f"http://upstream.test:{up.port}/ghost/q", {}],  # no header: auth "header" adds it
            [api, {"Authorization": "$BASIC_VENDOR"}],
        ]
        params = {
            "processId": "cred",
            "argv": [sys.executable, "-c", CHILD, json.dumps(requests)],
            "cwd": "file:///tmp",
            "env": {
                "PATH": "/usr/bin:/bin",
                "VENDOR_TOKEN": VENDOR_SECRET,
                "GHOST_URL": f"http://upstream.test:{up.port}/ghost",
            },
            "envPolicy": {
                "inherit": "all",
                "ignoreDefaultExcludes": True,
                "exclude": [],
                "set": {},
                "includeOnly": ["PATH", "GHOST_TOKEN", "GHOST_URL", "VENDOR_TOKEN", "LANG"],
            },
            "tty": False,
            "networkProxy": proxy_params(
                domains={"upstream.test": "allow", "other.test": "allow"},
                credentialMasking=True,
                credentialProviders=providers(up.port),
            ),
        }
        received: list[str] = []
        output = b""
        async with connect(server.url, handshake=False) as peer:
            await peer.handshake()
            await peer.send({"id": 1, "method": "process/start", "params": params})
            while True:
                msg = await peer.recv(timeout=60)
                received.append(json.dumps(msg))
                if msg.get("method") == "process/output":
                    output += base64.b64decode(msg["params"]["chunk"])
                if msg.get("method") == "process/closed":
                    break
        daemon_log = log.read_text()
        audit_log = audit.read_text()

    text = output.decode()
    env_line = next(line for line in text.splitlines() if line.startswith("ENV "))
    child_env = json.loads(env_line[4:])
    vendor_placeholder, ghost_placeholder = child_env["VENDOR_TOKEN"], child_env["GHOST_TOKEN"]
    assert vendor_placeholder.startswith("codex-masked-")
    assert ghost_placeholder.startswith("codex-masked-")
    assert text.count("STATUS") == 5 and "STATUS" in text and " 200" in text

    headers = [h for _, h in up.requests]
    assert [path for path, _ in up.requests] == [
        "/api/v1",
        "/api/v1",
        "/elsewhere",
        "/ghost/q",
        "/api/v1",
    ]
    assert headers[0]["Authorization"] == f"Bearer {VENDOR_SECRET}"
    assert headers[1]["Authorization"] == f"Bearer {vendor_placeholder}"  # not bound: other.test
    assert headers[2]["Authorization"] == f"Bearer {vendor_placeholder}"  # outside the prefix
    assert headers[3]["X-Api-Key"] == f"Key {GHOST_SECRET}"
    assert (
        headers[4]["Authorization"]
        == "Basic " + base64.b64encode(f"me:{VENDOR_SECRET}".encode()).decode()
    )
    assert any('"network/policyDecision"' in m for m in received)
    for secret in (VENDOR_SECRET, GHOST_SECRET):
        assert secret not in text
        assert all(secret not in m for m in received[1:])  # [0] echoes nothing of ours
        assert secret not in daemon_log
        assert secret not in audit_log
    assert audit_log  # the audit log was written


async def test_without_masking_the_child_sees_its_environment_unchanged() -> None:
    async with server_with_hosts("execserver") as server:
        run = await run_child(
            server.url,
            [["env", ["VENDOR"]]],
            network_proxy=proxy_params(credentialMasking=False, credentialProviders=providers(1)),
            extra={"env": {"PATH": "/usr/bin:/bin", "VENDOR_TOKEN": VENDOR_SECRET}},
        )
    assert run.results[0]["env"]["VENDOR_TOKEN"] == VENDOR_SECRET


async def test_credential_masking_is_advertised(any_server: RunningServer) -> None:
    async with connect(any_server.url, handshake=False) as peer:
        init = await peer.handshake()
    caps = init["result"]["environmentInfo"]["capabilities"]
    assert caps["credentialMasking"] is True
    assert caps["credentialMaskingCustomProviders"] is True


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        (
            {"bogus": 1},
            "unknown field `bogus`, expected one of `env`, `patterns`, `url_prefixes`, "
            "`url_prefix_from_env`, `auth`, `header`, `prefix`",
        ),
        (
            {"auth": ["bogus"]},
            "unknown variant `bogus`, expected one of `bearer`, `token`, `basic`, `header`",
        ),
        ({"auth": "bearer"}, 'invalid type: string "bearer", expected a sequence'),
        ({"env": "A"}, 'invalid type: string "A", expected a sequence'),
    ],
)
async def test_provider_objects_are_validated_like_the_reference(
    any_server: RunningServer, provider: dict[str, Any], message: str
) -> None:
    params = {
        "processId": "v",
        "argv": ["true"],
        "cwd": "file:///tmp",
        "env": {},
        "tty": False,
        "networkProxy": proxy_params(credentialMasking=True, credentialProviders={"x": provider}),
    }
    async with connect(any_server.url, handshake=False) as peer:
        await peer.handshake()
        reply = await peer.call("process/start", params)
    assert reply["error"] == {"code": -32602, "message": message}
