"""Tenant B's fs/* calls against tenant A's files, through a real daemon (root):
confined to B's roots on canonical paths (a symlink planted in B's own workspace
leads nowhere) and performed with B's file-system identity, so what B's account
cannot read stays unread even where B's ceiling allows reads. A's own calls work,
and what A creates is A's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.rpc import RpcClient, b64, connect, unb64, uri
from tests.support.sandbox import ROOT_READ, context_json, entry, managed
from tests.support.tenants import TOKEN_A, TOKEN_B, TenantHost, tenant_host


@pytest.fixture
def host() -> Iterator[TenantHost]:
    with tenant_host() as made:
        made.write_tenants(bob={"readable_roots": [str(made.b), str(made.shared)]})
        yield made


async def _error(client: RpcClient, method: str, params: dict[str, Any]) -> str:
    reply = await client.call(method, params)
    assert not reply.ok, f"{method} {params} succeeded: {reply}"
    return reply.error[1]


async def test_b_cannot_read_or_write_as_files_through_fs(host: TenantHost) -> None:
    secret = host.a / "secret.txt"
    # Planted in B's own workspace: links to A's file and directory.
    os.symlink(secret, host.b / "link")
    os.symlink(host.a, host.b / "dirlink")
    async with host.serve() as server, connect(server.url, token=TOKEN_B) as b:
        attempts = {
            "read": await _error(b, "fs/readFile", {"path": uri(secret)}),
            "read via link": await _error(b, "fs/readFile", {"path": uri(host.b / "link")}),
            "read via dir link": await _error(
                b, "fs/readFile", {"path": uri(host.b / "dirlink" / "secret.txt")}
            ),
            "stat": await _error(b, "fs/getMetadata", {"path": uri(secret)}),
            "list": await _error(b, "fs/readDirectory", {"path": uri(host.a)}),
            "write": await _error(
                b, "fs/writeFile", {"path": uri(host.a / "planted"), "dataBase64": b64("x")}
            ),
            "write via link": await _error(
                b, "fs/writeFile", {"path": uri(host.b / "link"), "dataBase64": b64("x")}
            ),
            "remove": await _error(b, "fs/remove", {"path": uri(secret), "force": True}),
            "copy out": await _error(
                b,
                "fs/copy",
                {
                    "sourcePath": uri(secret),
                    "destinationPath": uri(host.b / "stolen"),
                    "recursive": False,
                },
            ),
            "open": await _error(b, "fs/open", {"path": uri(secret), "handleId": "h1"}),
            "mkdir": await _error(b, "fs/createDirectory", {"path": uri(host.a / "d")}),
        }
    for what, message in attempts.items():
        assert message.startswith("tenant bob: path "), (what, message)
    assert secret.read_text() == "alice's secret\n"
    assert not (host.a / "planted").exists() and not (host.b / "stolen").exists()


async def test_b_reads_with_its_own_permissions_inside_its_readable_roots(
    host: TenantHost,
) -> None:
    # In B's readable roots but not B's to read: the kernel refuses B's identity.
    private = host.shared / "root-only.txt"
    private.write_text("root's\n")
    os.chmod(private, 0o600)
    async with host.serve() as server, connect(server.url, token=TOKEN_B) as b:
        message = await _error(b, "fs/readFile", {"path": uri(private)})
        written = await b.call(
            "fs/writeFile", {"path": uri(host.b / "mine.txt"), "dataBase64": b64("b's")}
        )
    assert message == "Permission denied (os error 13)"
    assert written.ok
    assert os.stat(host.b / "mine.txt").st_uid == host.b_uid


async def test_a_works_in_its_workspace_and_owns_what_it_creates(host: TenantHost) -> None:
    async with host.serve() as server, connect(server.url, token=TOKEN_A) as a:
        read = await a.ok("fs/readFile", {"path": uri(host.a / "secret.txt")})
        await a.ok("fs/createDirectory", {"path": uri(host.a / "sub")})
        await a.ok("fs/writeFile", {"path": uri(host.a / "sub" / "f"), "dataBase64": b64("1")})
        outside = await _error(
            a, "fs/writeFile", {"path": uri(host.shared / "f"), "dataBase64": b64("1")}
        )
    assert unb64(read["dataBase64"]) == b"alice's secret\n"
    assert os.stat(host.a / "sub").st_uid == host.a_uid
    assert os.stat(host.a / "sub" / "f").st_uid == host.a_uid
    assert outside == f"tenant alice: path {host.shared}/f is outside the tenant's writable roots"


async def test_a_request_sandbox_narrows_a_tenants_fs_call_further(host: TenantHost) -> None:
    # The request's own policy (read-only) still applies inside the ceiling.
    read_only = context_json(managed([ROOT_READ]))
    writable = context_json(managed([ROOT_READ, entry(host.a, "write")]))
    async with host.serve() as server, connect(server.url, token=TOKEN_A) as a:
        refused = await _error(
            a,
            "fs/writeFile",
            {"path": uri(host.a / "x"), "dataBase64": b64("1"), "sandbox": read_only},
        )
        allowed = await a.call(
            "fs/writeFile",
            {"path": uri(host.a / "y"), "dataBase64": b64("1"), "sandbox": writable},
        )
        wider = await _error(
            a,
            "fs/readFile",
            {
                "path": uri(host.a / "y"),
                "sandbox": context_json(managed([entry(special_root(), "write")])),
            },
        )
    assert refused == "Permission denied (os error 13)"
    assert allowed.ok
    assert wider == "tenant alice: writable root / is outside the tenant's ceiling"


def special_root() -> dict[str, Any]:
    return {"type": "special", "value": {"kind": "root"}}
