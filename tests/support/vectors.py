"""Protocol vectors: request sequences whose answers were recorded from the
reference server, replayed against any server and compared after normalising
volatile values.

A vector is ``protocol/vectors/<name>.json``::

    {"name": ..., "description": ..., "transport": "ws" | "stdio",
     "steps": [{"send": "<raw frame>", "received": [<message>...], "dropped": bool}, ...]}

``send`` may contain ``{WORK}`` (a scratch directory created for the run).
Each step waits for the answer to its request id (or the id -1 parse error);
a notification step waits briefly to see whether the server drops the
connection.

``python -m tests.support.vectors record`` re-records every vector from the reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.servers import (
    PROJECT_ROOT,
    ReferenceUnavailable,
    execserver_command,
    reference_binary,
    reference_command,
    start_server,
)

VECTOR_DIR = PROJECT_ROOT / "protocol" / "vectors"
SILENCE_S = 0.4  # how long a step without an expected answer listens for a reply or a drop
ANSWER_TIMEOUT_S = 15.0

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PEER = re.compile(r"exec-server websocket [0-9.:\[\]a-f]+:\d+: ")


@dataclass
class StepResult:
    received: list[Any]
    dropped: bool


def expected_id(frame: str) -> Any:
    """The id whose answer this frame should produce (-1 for unparsable), or None."""
    try:
        value = json.loads(frame)
    except json.JSONDecodeError:
        return -1
    if not isinstance(value, dict):
        return -1
    if "method" not in value:
        return -1 if "result" not in value and "error" not in value else None
    if "id" not in value:
        return None
    ident = value["id"]
    if isinstance(ident, bool) or not isinstance(ident, int | str):
        return -1
    return ident


def normalise(value: Any, work: str) -> Any:
    """Replace what legitimately differs between servers and runs."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key == "environmentInfo" or (key == "result" and _looks_like_env_info(item)):
                out[key] = _env_info_shape(item)
            elif key in ("modifiedAtMs", "createdAtMs") and isinstance(item, int):
                out[key] = "<MS>"
            else:
                out[key] = normalise(item, work)
        return out
    if isinstance(value, list):
        return [normalise(v, work) for v in value]
    if isinstance(value, str):
        text = value.replace(work, "{WORK}")
        text = _UUID.sub("<UUID>", text)
        return _PEER.sub("exec-server websocket <PEER>: ", text)
    return value


def _looks_like_env_info(value: Any) -> bool:
    return isinstance(value, dict) and "executorVersion" in value and "capabilities" in value


def _env_info_shape(info: Any) -> Any:
    """Compare environment info by its members and their kinds, not host-specific values."""
    if not isinstance(info, dict):
        return info
    return {key: type(val).__name__ for key, val in sorted(info.items())}


class WsPeer:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws

    async def send(self, frame: str) -> None:
        await self.ws.send_str(frame)

    async def receive(self, timeout: float) -> Any | None:
        """Next message, None on timeout; raises ConnectionError when closed."""
        try:
            msg = await self.ws.receive(timeout=timeout)
        except TimeoutError:
            return None
        if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            return json.loads(msg.data)
        raise ConnectionError(str(msg.type))


class StdioPeer:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, frame: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(frame.encode() + b"\n")
        await self.proc.stdin.drain()

    async def receive(self, timeout: float) -> Any | None:
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            return None
        if not line:
            raise ConnectionError("eof")
        return json.loads(line)


async def run_steps(peer: WsPeer | StdioPeer, frames: list[str]) -> list[StepResult]:
    results: list[StepResult] = []
    dropped = False
    for frame in frames:
        if dropped:
            results.append(StepResult([], True))
            continue
        received: list[Any] = []
        want = expected_id(frame)
        try:
            await peer.send(frame)
            if want is None:
                msg = await peer.receive(SILENCE_S)
                if msg is not None:
                    received.append(msg)
            else:
                while True:
                    msg = await peer.receive(ANSWER_TIMEOUT_S)
                    if msg is None:
                        received.append({"timeout": True})
                        break
                    received.append(msg)
                    if isinstance(msg, dict) and msg.get("id") == want and "method" not in msg:
                        break
        except (ConnectionError, ConnectionResetError, aiohttp.ClientError):
            dropped = True
        results.append(StepResult(received, dropped))
    return results


async def play(kind: str, vector: dict[str, Any], work: str) -> list[StepResult]:
    frames = [step["send"].replace("{WORK}", work) for step in vector["steps"]]
    if vector.get("transport", "ws") == "stdio":
        cmd = execserver_command if kind == "execserver" else reference_command
        proc = await asyncio.create_subprocess_exec(
            *cmd(["--listen", "stdio"]),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=str(PROJECT_ROOT),
        )
        try:
            return await run_steps(StdioPeer(proc), frames)
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    async with (
        start_server(kind) as server,
        aiohttp.ClientSession() as http,
        http.ws_connect(server.url, max_msg_size=0) as ws,
    ):
        return await run_steps(WsPeer(ws), frames)


def load_vectors() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(VECTOR_DIR.glob("*.json"))]


def comparable(results: list[StepResult], work: str) -> list[dict[str, Any]]:
    return [{"received": normalise(r.received, work), "dropped": r.dropped} for r in results]


@contextlib.contextmanager
def scratch_dir() -> Any:
    with tempfile.TemporaryDirectory(prefix="esvec-") as work:
        (Path(work) / "hello.txt").write_text("hello\n")
        (Path(work) / "dir").mkdir()
        yield work


async def record_all() -> None:
    for path in sorted(VECTOR_DIR.glob("*.json")):
        vector = json.loads(path.read_text())
        with scratch_dir() as work:
            results = await play("reference", vector, work)
            for step, result in zip(vector["steps"], comparable(results, work), strict=True):
                step["received"] = result["received"]
                step["dropped"] = result["dropped"]
        path.write_text(json.dumps(vector, indent=1, ensure_ascii=False) + "\n")
        print(f"recorded {path.name}")


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        sys.exit("usage: python -m tests.support.vectors record")
    try:
        reference_binary()  # installs it on first use; one line when it cannot be had
    except ReferenceUnavailable as exc:
        sys.exit(str(exc))
    asyncio.run(record_all())
