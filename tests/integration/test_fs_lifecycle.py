"""Checks the reference makes while decoding params come before the lifecycle
check; the others only after ``initialize``/``initialized``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.rpc import connect
from tests.support.servers import RunningServer

BEFORE_INIT = "client must call initialize before using {} methods"
OPTS = {"maxDepth": 0, "maxDirectories": 1, "maxEntries": 1, "followDirectorySymlinks": False}
DISCOVERY_SANDBOX = {"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled"}

CASES: list[tuple[str, dict[str, Any], tuple[int, str]]] = [
    ("fs/readFile", {"path": "rel"}, (-32602, "invalid URI: relative URL without a base")),
    (
        "fs/readFile",
        {"path": "file:///x?q"},
        (-32602, "query parameters are not allowed in path URIs"),
    ),
    ("fs/readFile", {"path": "file:///x#f"}, (-32602, "fragments are not allowed in path URIs")),
    ("fs/readFile", {"path": "file://host/x"}, (-32600, BEFORE_INIT.format("filesystem"))),
    (
        "fs/readFile",
        {"path": "file:///x", "sandbox": {"permissions": {"type": "disabled"}}},
        (-32602, "missing field `windowsSandboxLevel`"),
    ),
    (
        "fs/writeFile",
        {"path": "file:///x", "dataBase64": "!"},
        (-32600, BEFORE_INIT.format("filesystem")),
    ),
    (
        "fs/writeBlock",
        {"handleId": "x", "offset": 0, "chunk": "!"},
        (-32602, "Invalid symbol 33, offset 0."),
    ),
    (
        "fs/readBlock",
        {"handleId": "x", "offset": 0, "len": 0},
        (-32600, BEFORE_INIT.format("filesystem")),
    ),
    ("fs/readBlock", {"handleId": "x", "offset": -1, "len": 1}, (-32602, "invalid number")),
    (
        "fs/open",
        {"handleId": "x" * 33, "path": "file:///x"},
        (-32600, BEFORE_INIT.format("filesystem")),
    ),
    (
        "fs/open",
        {"handleId": "x", "path": "file:///x", "mode": "append"},
        (-32602, "unknown variant `append`, expected `read` or `replace`"),
    ),
    (
        "fs/walk",
        {"path": "file:///x", "options": {**OPTS, "maxDirectories": 0}},
        (-32600, BEFORE_INIT.format("filesystem")),
    ),
    (
        "fs/walk",
        {"path": "file:///x", "options": {**OPTS, "maxDepth": -1}},
        (-32602, "invalid number"),
    ),
    (
        "fs/watchMissing",
        {"watchId": 1, "missing": ["rel"]},
        (-32602, "invalid URI: relative URL without a base"),
    ),
    (
        "fs/copy",
        {"sourcePath": "file:///a", "destinationPath": "rel", "recursive": True},
        (-32602, "invalid URI: relative URL without a base"),
    ),
    (
        "http/request",
        {"method": "GET", "url": "ftp://x", "requestId": "r"},
        (-32600, BEFORE_INIT.format("http")),
    ),
    (
        "http/request",
        {"method": "GET", "url": "http://x", "requestId": "r", "bodyBase64": "!"},
        (-32602, "Invalid symbol 33, offset 0."),
    ),
    (
        "environmentConfig/read",
        {"cwd": "file:///tmp", "configPaths": [], "requirementsPaths": []},
        (-32600, BEFORE_INIT.format("environment config")),
    ),
    (
        "environmentConfig/read",
        {"cwd": "rel", "configPaths": [], "requirementsPaths": []},
        (-32602, "invalid URI: relative URL without a base"),
    ),
    (
        "capabilities/discoverV2",
        {"cwd": "file:///tmp", "sandbox": DISCOVERY_SANDBOX},
        (-32602, "missing field `cwd`"),
    ),
    (
        "capabilities/discoverV2",
        {"cwd": "file:///tmp", "sandbox": {**DISCOVERY_SANDBOX, "cwd": "file:///tmp"}},
        (-32600, BEFORE_INIT.format("capability discovery")),
    ),
    (
        "capabilityRoots/discoverV1",
        {"roots": [{"id": "x", "path": "rel"}]},
        (-32602, "invalid URI: relative URL without a base"),
    ),
]


@pytest.mark.parametrize(("method", "params", "expected"), CASES)
async def test_param_errors_precede_lifecycle_errors(
    any_server: RunningServer, method: str, params: dict[str, Any], expected: tuple[int, str]
) -> None:
    async with connect(any_server.url, handshake=False) as client:
        assert await client.err(method, params) == expected
