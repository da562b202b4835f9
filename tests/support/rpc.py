"""A tiny JSON-RPC websocket client for the process tests (ours and the reference).

It speaks just enough of the protocol to drive process/* methods: the
handshake, requests matched by id, and every notification kept per processId
so tests can assert on seq numbering and ordering. It deliberately does not use
execserver.client (built concurrently; the tests must judge the server alone).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

TMP_URI = "file:///tmp"
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}


def b64(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


class RpcFailure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass
class ProcessEvents:
    """Every notification of one process, in arrival order."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def closed(self) -> bool:
        return any(method == "process/closed" for method, _ in self.events)

    def output(self, stream: str | None = None) -> bytes:
        return b"".join(
            unb64(p["chunk"])
            for method, p in self.events
            if method == "process/output" and (stream is None or p["stream"] == stream)
        )

    def seqs(self) -> list[int]:
        return [p["seq"] for _, p in self.events]

    def exited(self) -> dict[str, Any] | None:
        for method, p in self.events:
            if method == "process/exited":
                return p
        return None


class Client:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.processes: dict[str, ProcessEvents] = {}
        # Every frame in arrival order: ("response", id) or ("notification", processId).
        self.arrivals: list[tuple[str, Any]] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.get_running_loop().create_task(self._read())
        self.session_id: str | None = None

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            obj = json.loads(msg.data)
            if "id" in obj and ("result" in obj or "error" in obj):
                self.arrivals.append(("response", obj["id"]))
                fut = self._pending.pop(obj["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(obj)
            elif "method" in obj:
                params = obj.get("params") or {}
                pid = params.get("processId")
                if pid is not None:
                    self.arrivals.append(("notification", pid))
                    self.processes.setdefault(pid, ProcessEvents()).events.append(
                        (obj["method"], params)
                    )
            async with self._changed:
                self._changed.notify_all()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("websocket closed"))
        async with self._changed:
            self._changed.notify_all()

    async def send_request(self, method: str, params: Any) -> asyncio.Future[Any]:
        """Send a request; the returned future resolves to the whole response object."""
        request_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = fut
        await self.ws.send_str(json.dumps({"id": request_id, "method": method, "params": params}))
        return fut

    async def call_raw(self, method: str, params: Any, timeout: float = 60) -> dict[str, Any]:
        fut = await self.send_request(method, params)
        return dict(await asyncio.wait_for(fut, timeout))

    async def call(self, method: str, params: Any, timeout: float = 60) -> Any:
        response = await self.call_raw(method, params, timeout)
        if "error" in response:
            raise RpcFailure(response["error"]["code"], response["error"]["message"])
        return response["result"]

    async def handshake(self, resume: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"clientName": "process-tests"}
        if resume is not None:
            params["resumeSessionId"] = resume
        for _ in range(50):
            response = await self.call_raw("initialize", params)
            # Right after the previous connection closed the server may not have
            # noticed yet: the session is still attached (-32010) for a moment.
            if resume is None or response.get("error", {}).get("code") != -32010:
                break
            await asyncio.sleep(0.1)
        if "error" in response:
            raise RpcFailure(response["error"]["code"], response["error"]["message"])
        result = response["result"]
        await self.ws.send_str(json.dumps({"method": "initialized", "params": {}}))
        self.session_id = result["sessionId"]
        return dict(result)

    # ---- process helpers ----------------------------------------------------------

    async def start(
        self, process_id: str, argv: list[str], *, env: dict[str, str] | None = None, **extra: Any
    ) -> Any:
        params: dict[str, Any] = {
            "processId": process_id,
            "argv": argv,
            "cwd": TMP_URI,
            "env": BASE_ENV if env is None else env,
            "tty": False,
        }
        params.update(extra)
        self.processes.setdefault(process_id, ProcessEvents())
        return await self.call("process/start", params)

    def events(self, process_id: str) -> ProcessEvents:
        return self.processes.setdefault(process_id, ProcessEvents())

    async def wait_for(self, predicate: Callable[[], bool], timeout: float | None = 30) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(predicate)

    async def wait_closed(self, process_id: str, timeout: float | None = 30) -> ProcessEvents:
        await self.wait_for(lambda: self.events(process_id).closed, timeout)
        return self.events(process_id)

    async def wait_output(self, process_id: str, needle: bytes, timeout: float = 30) -> None:
        await self.wait_for(lambda: needle in self.events(process_id).output(), timeout)

    async def run(
        self, process_id: str, argv: list[str], *, timeout: float | None = 30, **kw: Any
    ) -> ProcessEvents:
        await self.start(process_id, argv, **kw)
        return await self.wait_closed(process_id, timeout)

    async def read(self, process_id: str, **kw: Any) -> Any:
        return await self.call("process/read", {"processId": process_id, **kw})

    async def write(self, process_id: str, data: bytes | str, write_id: str) -> str:
        result = await self.call(
            "process/write", {"processId": process_id, "chunk": b64(data), "writeId": write_id}
        )
        return str(result["status"])

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await self._reader


@contextlib.asynccontextmanager
async def connect(url: str, *, resume: str | None = None) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(url, max_msg_size=0, autoping=True)
        client = Client(ws)
        try:
            await client.handshake(resume)
            yield client
        finally:
            await client.close()


@contextlib.asynccontextmanager
async def open_ws(url: str) -> AsyncIterator[Client]:
    """A connection without the handshake (for resume error tests)."""
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(url, max_msg_size=0)
        client = Client(ws)
        try:
            yield client
        finally:
            await client.close()


async def read_all(client: Client, process_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
    """Every retained chunk after ``after_seq``, following nextSeq like a real client."""
    chunks: list[dict[str, Any]] = []
    while True:
        result = await client.read(process_id, afterSeq=after_seq, maxBytes=1 << 20)
        chunks.extend(result["chunks"])
        if not result["chunks"]:
            return chunks
        after_seq = result["nextSeq"] - 1


def json_dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


async def poll_until(predicate: Callable[[], bool], timeout: float = 10) -> bool:
    """Poll an OS condition that has no event (a pid died, a process left its group)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    done = predicate()
    while not done and loop.time() < deadline:
        await asyncio.sleep(0.01)
        done = predicate()
    return done
