"""The raw JSON-RPC websocket client the tests drive servers with (ours and the reference).

It deliberately does not use ``execserver.client``: the tests must judge each
server by exactly the frames it sends. One background reader keeps every frame:

- ``call`` sends a request and waits for the response with its id, leaving every
  other frame where it was; the response is a :class:`Reply` (a ``dict``: compare
  it whole, or use ``.ok`` / ``.result`` / ``.error``). ``ok`` returns the result
  or raises :class:`RpcFailure`; ``err`` returns ``(code, message)``.
- ``recv`` takes the next frame no ``call``/``response`` has taken (responses to
  hand-sent requests, notifications, server-to-client requests), in arrival order;
  ``response(id)`` takes the response to one hand-sent request; and
  ``next_notification(method)`` skips other notifications up to one of ``method``.
- every notification is also kept, in order, in ``notifications`` and per
  ``processId`` in ``processes`` (for seq and ordering assertions), and
  ``arrivals`` records the order of responses and process notifications.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

TMP_URI = "file:///tmp"
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}

_NO_PARAMS: Any = object()


def b64(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def uri(path: object) -> str:
    return "file://" + str(path)


class RpcFailure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Reply(dict[str, Any]):
    """One response object exactly as received, plus readable accessors."""

    @property
    def ok(self) -> bool:
        return "result" in self

    @property
    def result(self) -> Any:
        assert "result" in self, f"expected a result, got {dict(self)}"
        return self["result"]

    @property
    def error(self) -> tuple[int, str]:
        assert "error" in self, f"expected an error, got {dict(self)}"
        err = self["error"]
        return err["code"], err["message"]


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


def _is_response(obj: Any) -> bool:
    return isinstance(obj, dict) and "id" in obj and ("result" in obj or "error" in obj)


def _is_notification(obj: Any) -> bool:
    return isinstance(obj, dict) and "method" in obj and "id" not in obj


def _id_key(request_id: Any) -> str:
    # Ids are any JSON value (a fuzz test may even get a list back): index them by text.
    return json.dumps(request_id, sort_keys=True)


class RpcClient:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse, *, name: str = "tests") -> None:
        self.ws = ws
        self.name = name
        self._ids = itertools.count(1)
        self.last_id = 0
        self.session_id: str | None = None
        # Frames nobody has taken yet, by arrival number; responses also by id.
        self._unread: OrderedDict[int, Any] = OrderedDict()
        self._responses: dict[str, list[int]] = {}
        self._arrival = itertools.count()
        self.notifications: list[dict[str, Any]] = []
        self.processes: dict[str, ProcessEvents] = {}
        # Every frame in arrival order: ("response", id) or ("notification", processId).
        self.arrivals: list[tuple[str, Any]] = []
        self.close_message: aiohttp.WSMessage | None = None
        self._changed = asyncio.Condition()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    # ---- reading --------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while True:
                msg = await self.ws.receive()
                if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                    self.close_message = msg
                    return
                self._keep(json.loads(msg.data))
                async with self._changed:
                    self._changed.notify_all()
        finally:
            if self.close_message is None:
                self.close_message = aiohttp.WSMessage(aiohttp.WSMsgType.CLOSED, None, None)
            async with self._changed:
                self._changed.notify_all()

    def _keep(self, obj: Any) -> None:
        key = next(self._arrival)
        self._unread[key] = obj
        if _is_response(obj):
            self.arrivals.append(("response", obj["id"]))
            self._responses.setdefault(_id_key(obj["id"]), []).append(key)
        elif _is_notification(obj):
            self.notifications.append(obj)
            params = obj.get("params") or {}
            pid = params.get("processId") if isinstance(params, dict) else None
            if pid is not None:
                self.arrivals.append(("notification", pid))
                self.processes.setdefault(pid, ProcessEvents()).events.append(
                    (obj["method"], params)
                )

    def _take(self, key: int) -> Any:
        obj = self._unread.pop(key)
        if _is_response(obj):
            keys = self._responses[_id_key(obj["id"])]
            keys.remove(key)
        return obj

    def _closed_error(self) -> ConnectionError:
        msg = self.close_message
        assert msg is not None
        return ConnectionError(f"connection closed: {msg.type!r} {msg.data!r}")

    async def _wait(self, ready: Callable[[], bool], timeout: float | None) -> None:
        """Wait until ``ready()``; ConnectionError if the connection ends first."""
        async with asyncio.timeout(timeout), self._changed:
            while not ready():
                if self.close_message is not None:
                    raise self._closed_error()
                await self._changed.wait()

    async def recv(self, timeout: float = 10.0) -> Any:
        """The next frame nothing else has taken, in arrival order."""
        await self._wait(lambda: bool(self._unread), timeout)
        return self._take(next(iter(self._unread)))

    async def response(self, request_id: Any, timeout: float | None = 30.0) -> Reply:
        """The response to ``request_id`` (sent by hand); other frames stay unread."""
        slot = _id_key(request_id)
        await self._wait(lambda: bool(self._responses.get(slot)), timeout)
        return Reply(self._take(self._responses[slot][0]))

    async def next_notification(self, method: str, timeout: float = 10) -> dict[str, Any]:
        """The params of the next unread notification named ``method`` (earlier
        unread notifications of other methods are dropped)."""

        def found() -> bool:
            for key, obj in list(self._unread.items()):
                if _is_notification(obj):
                    if obj["method"] == method:
                        return True
                    del self._unread[key]
            return False

        await self._wait(found, timeout)
        key = next(k for k, obj in self._unread.items() if _is_notification(obj))
        params: dict[str, Any] = self._take(key)["params"]
        return params

    def unread_notifications(self) -> list[dict[str, Any]]:
        return [obj for obj in self._unread.values() if _is_notification(obj)]

    async def closed(self, timeout: float = 10.0) -> aiohttp.WSMessage:
        """The frame that ended the connection (CLOSE with the server's code, or CLOSED)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.close_message is not None)
        assert self.close_message is not None
        return self.close_message

    # ---- requests -------------------------------------------------------------------

    async def send(self, message: Any) -> None:
        """Send one frame: a JSON value, or a string sent as it is."""
        await self.ws.send_str(message if isinstance(message, str) else json.dumps(message))

    async def send_request(self, method: str, params: Any = _NO_PARAMS) -> Awaitable[Reply]:
        """Send a request now; the returned awaitable gives its response."""
        self.last_id = request_id = next(self._ids)
        message: dict[str, Any] = {"id": request_id, "method": method}
        if params is not _NO_PARAMS:
            message["params"] = params
        await self.send(message)
        return asyncio.ensure_future(self.response(request_id, timeout=None))

    async def call(self, method: str, params: Any = _NO_PARAMS, timeout: float = 60) -> Reply:
        """The whole response to one request (``params`` left out unless given)."""
        pending = await self.send_request(method, params)
        return await asyncio.wait_for(pending, timeout)

    async def ok(self, method: str, params: Any = _NO_PARAMS, timeout: float = 60) -> Any:
        """The result of one request; :class:`RpcFailure` if it was answered with an error."""
        reply = await self.call(method, params, timeout)
        if "error" in reply:
            raise RpcFailure(reply["error"]["code"], reply["error"]["message"])
        return reply["result"]

    async def err(
        self, method: str, params: Any = _NO_PARAMS, timeout: float = 60
    ) -> tuple[int, str]:
        return (await self.call(method, params, timeout)).error

    async def handshake(self, name: str | None = None, *, resume: str | None = None) -> Reply:
        """``initialize`` (resuming ``resume`` if given) and, if it succeeded, ``initialized``."""
        params: dict[str, Any] = {"clientName": name or self.name}
        if resume is not None:
            params["resumeSessionId"] = resume
        for _ in range(50):
            reply = await self.call("initialize", params)
            # Right after the previous connection closed the server may not have
            # noticed yet: the session is still attached (-32010) for a moment.
            if resume is None or reply.get("error", {}).get("code") != -32010:
                break
            await asyncio.sleep(0.1)
        if reply.ok:
            self.session_id = reply.result["sessionId"]
            await self.send({"method": "initialized", "params": {}})
        return reply

    # ---- process helpers ------------------------------------------------------------

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
        return await self.ok("process/start", params)

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
        return await self.ok("process/read", {"processId": process_id, **kw})

    async def write(self, process_id: str, data: bytes | str, write_id: str) -> str:
        result = await self.ok(
            "process/write", {"processId": process_id, "chunk": b64(data), "writeId": write_id}
        )
        return str(result["status"])

    async def aclose(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await self._reader


@contextlib.asynccontextmanager
async def connect(
    url: str,
    *,
    handshake: bool = True,
    resume: str | None = None,
    token: str | None = None,
    name: str = "tests",
    **ws_options: Any,
) -> AsyncIterator[RpcClient]:
    """A connection to ``url``; with ``handshake`` (the default) already initialized
    (resuming ``resume``), failing with :class:`RpcFailure` if the server refuses.
    ``token`` is sent as a bearer token; ``ws_options`` go to ``ws_connect``."""
    if token is not None:
        headers = {**ws_options.get("headers", {}), "Authorization": f"Bearer {token}"}
        ws_options["headers"] = headers
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(url, max_msg_size=0, **ws_options) as ws,
    ):
        client = RpcClient(ws, name=name)
        try:
            if handshake:
                reply = await client.handshake(resume=resume)
                if not reply.ok:
                    raise RpcFailure(*reply.error)
            yield client
        finally:
            await client.aclose()


async def read_all(client: RpcClient, process_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
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


def normalize(value: Any, root: str) -> Any:
    """Replace the scratch directory with ``<D>`` and epoch milliseconds with ``<MS>``."""
    if isinstance(value, str):
        return value.replace(root, "<D>")
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and value > 10**12:
        return "<MS>"
    if isinstance(value, list):
        return [normalize(v, root) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v, root) for k, v in value.items()}
    return value


def outcome(reply: Reply, root: str) -> Any:
    """``{"result": ...}`` or ``{"error": [code, message]}``, normalised."""
    if reply.ok:
        return {"result": normalize(reply.result, root)}
    code, message = reply.error
    return {"error": [code, normalize(message, root)]}


async def check_cases(
    client: RpcClient, root: str, cases: Sequence[tuple[str, str, Any, Any]]
) -> None:
    """Run ``(label, method, params, expected outcome)`` in order; report every mismatch."""
    mismatches = []
    for label, method, params, expected in cases:
        got = outcome(await client.call(method, params), root)
        if got != expected:
            mismatches.append(f"{label}:\n   expected {expected}\n   got      {got}")
    assert not mismatches, "\n".join(mismatches)
