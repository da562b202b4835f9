"""Protocol fuzzing per method: valid-shaped requests for every method with one
member mutated (wrong type, huge string, deep nesting, invalid base64,
invalid URI, any id type). The server answers every request with a result or
an error of a known code, never leaks a traceback, and a second connection
keeps working throughout."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability.scale import pick
from tests.support.servers import PROJECT_ROOT, execserver_command

EXAMPLES = pick(ci=400, full=100_000)
KNOWN_CODES = {-32600, -32601, -32602, -32603, -32004, -32010}
SCRATCH = Path(tempfile.mkdtemp(prefix="es-fuzz-"))
(SCRATCH / "f.txt").write_text("data\n")
S = f"file://{SCRATCH}"

TEMPLATES: dict[str, dict[str, Any]] = {
    "environment/info": {},
    "environment/status": {},
    "environmentConfig/read": {"cwd": S, "configPaths": [["model"]], "requirementsPaths": []},
    "process/start": {"processId": "p", "argv": ["true"], "cwd": S, "env": {}, "tty": False},
    "process/read": {"processId": "p", "afterSeq": 0, "maxBytes": 10, "waitMs": 0},
    "process/write": {"processId": "p", "chunk": "aGk=", "writeId": "w"},
    "process/signal": {"processId": "p", "signal": "interrupt"},
    "process/terminate": {"processId": "p"},
    "fs/readFile": {"path": f"{S}/f.txt"},
    "fs/writeFile": {"path": f"{S}/w.txt", "dataBase64": "aGk="},
    "fs/createDirectory": {"path": f"{S}/d/e", "recursive": True},
    "fs/getMetadata": {"path": f"{S}/f.txt"},
    "fs/canonicalize": {"path": f"{S}/../{SCRATCH.name}/f.txt"},
    "fs/readDirectory": {"path": S},
    "fs/walk": {
        "path": S,
        "options": {
            "maxDepth": 2,
            "maxDirectories": 10,
            "maxEntries": 10,
            "followDirectorySymlinks": False,
        },
    },
    "fs/remove": {"path": f"{S}/w.txt", "recursive": False, "force": True},
    "fs/copy": {"sourcePath": f"{S}/f.txt", "destinationPath": f"{S}/c.txt", "recursive": False},
    "fs/open": {"handleId": "h", "path": f"{S}/f.txt", "mode": "read"},
    "fs/readBlock": {"handleId": "h", "offset": 0, "len": 4},
    "fs/writeBlock": {"handleId": "h", "offset": 0, "chunk": "aGk="},
    "fs/close": {"handleId": "h"},
    "fs/watchMissing": {"watchId": 1, "missing": [f"{S}/later"]},
    "http/request": {
        "method": "GET",
        "url": "http://127.0.0.1:9/",
        "requestId": "r",
        "timeoutMs": 200,
    },
    "capabilities/discoverV2": {"cwd": S},
    "capabilityRoots/discoverV1": {"roots": [{"id": "r", "path": S}]},
}
# Members whose mutation could aim a destructive call elsewhere get only invalid values.
PATH_KEYS = {"path", "cwd", "sourcePath", "destinationPath"}
INVALID_URIS = [
    "",
    "relative/x",
    "http://x/y",
    "file://remote-host/x",
    "file:",
    "::",
    "file:///%00",
]

leaves = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
)
json_values = st.recursive(
    leaves,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=8,
)
mutations = st.one_of(
    json_values.map(lambda v: ("value", v)),
    st.just(("huge", None)),
    st.integers(min_value=50, max_value=5000).map(lambda d: ("deep", d)),
    st.sampled_from(["!!!!", "A", "AB", "a=b=", "\u00e9\u00e9\u00e9\u00e9"]).map(
        lambda b: ("base64", b)
    ),
    st.sampled_from(INVALID_URIS).map(lambda u: ("uri", u)),
    st.just(("drop", None)),
)
ids = st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(max_size=6)


def _deep(depth: int) -> str:
    """A placeholder spliced into the frame as ``[[[...0...]]]`` (json.dumps would recurse)."""
    return f"__DEEP_{depth}__"


def _encode(ident: Any, method: str, params: Any) -> str:
    text = json.dumps({"id": ident, "method": method, "params": params})
    for marker in set(re.findall(r'"__DEEP_(\d+)__"', text)):
        depth = int(marker)
        text = text.replace(f'"__DEEP_{depth}__"', "[" * depth + "0" + "]" * depth)
    return text


def _mutate(params: dict[str, Any], key: str, mutation: tuple[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(params)
    kind, arg = mutation
    if key in PATH_KEYS and kind not in ("uri", "drop", "deep"):
        kind, arg = "uri", INVALID_URIS[hash(str(arg)) % len(INVALID_URIS)]
    if key == "argv" and kind == "value":
        kind, arg = "value", arg if not isinstance(arg, list) else 5
    if kind == "drop":
        out.pop(key, None)
    elif kind == "huge":
        out[key] = "x" * (1024 * 1024)
    elif kind == "deep":
        out[key] = _deep(arg)
    else:
        out[key] = arg
    return out


@st.composite
def requests(draw: st.DrawFn) -> tuple[Any, str, Any]:
    method = draw(st.sampled_from(sorted(TEMPLATES)))
    params: Any = TEMPLATES[method]
    keys = sorted(params) or ["extra"]
    key = draw(st.sampled_from(keys))
    if draw(st.booleans()) or not TEMPLATES[method]:
        params = _mutate(params, key, draw(mutations))
    return draw(ids), method, params


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    import subprocess

    proc = subprocess.Popen(
        execserver_command(
            ["--listen", "ws://127.0.0.1:0", "--log-level", "error", "--concurrent-requests", "4"]
        ),
        stdout=subprocess.PIPE,
        cwd=str(PROJECT_ROOT),
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip()
    try:
        yield url
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
        proc.stdout.close()


class Session:
    """One fuzzing connection and one bystander, reused across examples."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.loop = asyncio.new_event_loop()
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.bystander: aiohttp.ClientWebSocketResponse | None = None

    async def _open(self) -> aiohttp.ClientWebSocketResponse:
        assert self.http is not None
        ws = await self.http.ws_connect(self.url, max_msg_size=0)
        await ws.send_str(
            json.dumps({"id": "i", "method": "initialize", "params": {"clientName": "fuzz"}})
        )
        assert "result" in json.loads((await ws.receive(timeout=10)).data)
        await ws.send_str('{"method":"initialized"}')
        return ws

    async def exchange(self, ident: Any, method: str, params: Any) -> dict[str, Any]:
        if self.http is None:
            self.http = aiohttp.ClientSession()
            self.bystander = await self._open()
        if self.ws is None or self.ws.closed:
            self.ws = await self._open()
        await self.ws.send_str(_encode(ident, method, params))
        while True:
            data = json.loads((await self.ws.receive(timeout=30)).data)
            # id -1: the frame was refused as a whole (e.g. nesting deeper than the parser allows).
            if data.get("id") in (ident, -1) and "method" not in data:
                answer: dict[str, Any] = data
                return answer

    async def bystander_ok(self) -> bool:
        assert self.bystander is not None
        await self.bystander.send_str('{"id":"b","method":"environment/status"}')
        while True:
            data = json.loads((await self.bystander.receive(timeout=10)).data)
            if data.get("id") == "b":
                return bool(data.get("result") == {"status": "ready"})

    def close(self) -> None:
        async def _close() -> None:
            for ws in (self.ws, self.bystander):
                if ws is not None:
                    await ws.close()
            if self.http is not None:
                await self.http.close()

        self.loop.run_until_complete(_close())
        self.loop.close()


@pytest.fixture(scope="module")
def session(server_url: str) -> Iterator[Session]:
    s = Session(server_url)
    yield s
    s.close()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(request=requests())
def test_every_mutated_request_gets_a_well_formed_answer(
    session: Session, request: tuple[Any, str, Any]
) -> None:
    ident, method, params = request
    reply = session.loop.run_until_complete(session.exchange(ident, method, params))
    assert set(reply) in ({"id", "result"}, {"id", "error"}), reply
    if "error" in reply:
        assert reply["error"]["code"] in KNOWN_CODES, reply
        assert "Traceback" not in reply["error"]["message"]
        assert "internal error" != reply["error"]["message"], (method, params)
    assert session.loop.run_until_complete(session.bystander_ok())
