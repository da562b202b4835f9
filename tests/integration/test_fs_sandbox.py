"""fs/* with a ``sandbox`` context: the policy is enforced, never bypassed.

Restricted accesses run in the sandbox helper (bubblewrap); unrestricted ones
in-process, as the reference routes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.rpc import b64, check_cases, connect, uri
from tests.support.servers import RunningServer

OK: dict[str, Any] = {"result": {}}
EROFS = {"error": [-32603, "Read-only file system (os error 30)"]}
EACCES = {"error": [-32600, "Permission denied (os error 13)"]}
ROOT_READ = {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
CWD_WRITE = {
    "path": {"type": "special", "value": {"kind": "current_working_directory"}},
    "access": "write",
}


def sandbox(entries: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    context = {
        "permissions": {
            "type": "managed",
            "file_system": {"type": "restricted", "entries": entries},
            "network": "restricted",
        },
        "windowsSandboxLevel": "disabled",
    }
    context.update(extra)
    return context


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "ok.txt").write_text("ok")
    (tmp_path / "secret.txt").write_text("s")
    (tmp_path / "ro.txt").write_text("ro")
    ws = uri(tmp_path / "ws")
    deny = {"path": {"type": "path", "path": uri(tmp_path / "secret.txt")}, "access": "deny"}
    return {
        "read_only": sandbox([ROOT_READ]),
        "workspace": sandbox([ROOT_READ, CWD_WRITE], cwd=ws, workspaceRoots=[ws]),
        "deny": sandbox([ROOT_READ, deny]),
        "no_cwd": sandbox([ROOT_READ, CWD_WRITE]),
    }


async def test_policy_enforced(
    any_server: RunningServer, tmp_path: Path, layout: dict[str, Any]
) -> None:
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    ro, ws, deny, no_cwd = (
        layout["read_only"],
        layout["workspace"],
        layout["deny"],
        layout["no_cwd"],
    )
    dyn = {"error": [-32602, "file system sandbox context with dynamic permissions requires cwd"]}
    cases = [
        (
            "read-only: writeFile",
            "fs/writeFile",
            {"path": u("ro.txt"), "dataBase64": "eA==", "sandbox": ro},
            EROFS,
        ),
        (
            "read-only: readFile",
            "fs/readFile",
            {"path": u("ro.txt"), "sandbox": ro},
            {"result": {"dataBase64": b64("ro")}},
        ),
        (
            "read-only: createDirectory",
            "fs/createDirectory",
            {"path": u("newdir"), "sandbox": ro},
            EROFS,
        ),
        ("read-only: remove", "fs/remove", {"path": u("ro.txt"), "sandbox": ro}, EROFS),
        (
            "workspace: write inside",
            "fs/writeFile",
            {"path": u("ws/new.txt"), "dataBase64": "eA==", "sandbox": ws},
            OK,
        ),
        (
            "workspace: write outside",
            "fs/writeFile",
            {"path": u("out.txt"), "dataBase64": "eA==", "sandbox": ws},
            EROFS,
        ),
        (
            "workspace: copy in",
            "fs/copy",
            {
                "sourcePath": u("ro.txt"),
                "destinationPath": u("ws/copy.txt"),
                "recursive": False,
                "sandbox": ws,
            },
            OK,
        ),
        ("deny: readFile", "fs/readFile", {"path": u("secret.txt"), "sandbox": deny}, EACCES),
        (
            "deny: other files readable",
            "fs/readFile",
            {"path": u("ws/ok.txt"), "sandbox": deny},
            {"result": {"dataBase64": b64("ok")}},
        ),
        ("no cwd: read", "fs/readFile", {"path": u("ro.txt"), "sandbox": no_cwd}, dyn),
        (
            "no cwd: write",
            "fs/writeFile",
            {"path": u("ws/x"), "dataBase64": "eA==", "sandbox": no_cwd},
            dyn,
        ),
        (
            "shape error",
            "fs/readFile",
            {"path": u("ro.txt"), "sandbox": {"permissions": {"type": "disabled"}}},
            {"error": [-32602, "missing field `windowsSandboxLevel`"]},
        ),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)
    assert (tmp_path / "ro.txt").read_text() == "ro"
    assert (tmp_path / "ws" / "new.txt").read_text() == "x"
    assert (tmp_path / "ws" / "copy.txt").read_text() == "ro"
    assert not (tmp_path / "out.txt").exists()
    assert not (tmp_path / "newdir").exists()


async def test_open_applies_policy_at_open_time(
    any_server: RunningServer, tmp_path: Path, layout: dict[str, Any]
) -> None:
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    ro, ws, deny = layout["read_only"], layout["workspace"], layout["deny"]
    cases = [
        (
            "read-only: open for read",
            "fs/open",
            {"handleId": "r", "path": u("ro.txt"), "sandbox": ro},
            {"result": {"handleId": "r"}},
        ),
        (
            "then read",
            "fs/readBlock",
            {"handleId": "r", "offset": 0, "len": 10},
            {"result": {"chunk": b64("ro"), "eof": True}},
        ),
        (
            "read-only: open replace",
            "fs/open",
            {"handleId": "w", "path": u("ro.txt"), "mode": "replace", "sandbox": ro},
            EROFS,
        ),
        (
            "deny: open",
            "fs/open",
            {"handleId": "s", "path": u("secret.txt"), "sandbox": deny},
            EACCES,
        ),
        (
            "workspace: open replace inside",
            "fs/open",
            {"handleId": "w2", "path": u("ws/up.bin"), "mode": "replace", "sandbox": ws},
            {"result": {"handleId": "w2"}},
        ),
        ("then write", "fs/writeBlock", {"handleId": "w2", "offset": 0, "chunk": b64("abc")}, OK),
        ("close", "fs/close", {"handleId": "w2"}, OK),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)
    assert (tmp_path / "ro.txt").read_text() == "ro"
    assert (tmp_path / "ws" / "up.bin").read_text() == "abc"


async def test_getmetadata_of_denied_file_is_a_placeholder(
    any_server: RunningServer, tmp_path: Path, layout: dict[str, Any]
) -> None:
    params = {"path": uri(tmp_path / "secret.txt"), "sandbox": layout["deny"]}
    async with connect(any_server.url) as client:
        result = await client.ok("fs/getMetadata", params)
    assert (result["isFile"], result["size"], result["createdAtMs"]) == (True, 0, 0)
