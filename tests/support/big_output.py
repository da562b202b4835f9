"""A process that writes 1 GB to a client that reads none of it until the daemon
has been SIGKILLed and restarted, and the client's side of it: what it takes in
seq order, and the figures that must stay bounded meanwhile.

The process writes 1,000,000,000 bytes (``seq`` cut by ``head -c``:
deterministic, and every line is its own number, so a chunk repeated, dropped
or moved changes the hash). Its client starts it on a websocket of its own and
does not read that: the daemon's writes to it stop, the daemon stops reading the
keeper's link, the keeper's journal fills to its budget and the child sleeps on
a full pipe (:func:`child_blocked`). After the daemon is killed there the client
reads what the dead daemon's connection still delivers (:func:`take_what_was_sent`),
and resumes its session on the restarted daemon a moment later (a client
reconnects after a back-off: the client library's grows to 2 s, docs/client.md),
then reads the rest, pushed (``process/output``) or read back (``process/read``
from the last seq it has) (:func:`resume_and_read_rest`). :class:`Received`
hashes the bytes in seq order, to compare with the generator's run here
(:func:`expected_sha256`); :func:`sampling` keeps the peaks of the journal on
disk, the keepers' RSS and each daemon's RSS.

What it guards against: a restarted daemon that reads a re-adopted keeper's
journal, and then the child's output, into the detached session's log, which
keeps the last 1 MiB (``process_retained_bytes``) and acknowledges what it
evicts, so that the keeper deletes it: all the child wrote between the restart
and the resume but its last 1 MiB was lost (about 240 MB with the resume 1 s
late), and the first ``process/read`` after the resume started past the
client's last seq (:class:`OutputLost`).

Used by tests/survival/test_survive_fifty.py, where it is one of the fifty.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from tests.support.procinfo import rss_mb
from tests.support.state_dir import keepers, tree_of

__all__ = [
    "BIG_BYTES",
    "BIG_COMMAND",
    "BIG_ENV",
    "DAEMON_RSS_GROWTH_MB",
    "JOURNAL_BOUND",
    "KEEPER_RSS_MB",
    "RESUME_AFTER_S",
    "OutputLost",
    "Peaks",
    "Received",
    "child_blocked",
    "expected_sha256",
    "journal_bytes",
    "journals",
    "resume_and_read_rest",
    "sampling",
    "start_unread",
    "take_what_was_sent",
]

BIG_BYTES = 1_000_000_000
# 1..111,111,111 is 1,000,000,008 bytes of lines: head cuts the last one short.
BIG_COMMAND = f"seq 1 111111111 | head -c {BIG_BYTES}"
BIG_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C"}
# The journal's budget is process_retained_bytes + 8 MiB (execserver/processes/keepers.py),
# in 1 MiB segments: this bound leaves it room and still catches a journal that grows.
JOURNAL_BOUND = 32 << 20
# A daemon's peak RSS above its RSS when it first listened.
DAEMON_RSS_GROWTH_MB = 150
KEEPER_RSS_MB = 64
# Bytes the client may hold out of order (pushed after a gap it is reading back).
PENDING_BOUND = 64 << 20
FRAME_TIMEOUT = 30.0
# The resume comes this long after the restarted daemon listens (see the docstring).
RESUME_AFTER_S = 1.0


def journal_bytes(state: Path, session: str = "*") -> int:
    """The journals' bytes on disk: every session's, or one session's. The daemon
    removes a closed process's journal while this walks (pathlib's glob then
    raises FileNotFoundError, seen once in a full run): what went counts 0."""
    total = 0
    for segment in _listing(state, [session, "*", "journal", "*.seg"]):
        with contextlib.suppress(OSError):
            total += segment.stat().st_size
    return total


def _listing(top: Path, parts: list[str]) -> list[Path]:
    """``top.glob("/".join(parts))``, a directory that vanishes meanwhile skipped."""
    if not parts:
        return [top]
    try:
        found = list(top.glob(parts[0]))
    except FileNotFoundError:
        return []
    return [path for entry in found for path in _listing(entry, parts[1:])]


def journals(state: Path) -> list[Path]:
    return list(state.glob("*/*/journal"))


class OutputLost(AssertionError):
    """A seq the client lacks is no longer retained: read back, the log starts later."""


@dataclass
class Peaks:
    """Sampled every 50 ms for the whole test: what must stay bounded."""

    journal: int = 0
    keeper_mb: float = 0.0
    daemons_mb: dict[int, float] = field(default_factory=dict)  # pid -> peak RSS
    # The daemons running now (a dead one's pid may be another process's soon).
    watching: set[int] = field(default_factory=set)

    def sample(self, state: Path) -> None:
        self.journal = max(self.journal, journal_bytes(state))
        for keeper in keepers(state):
            with contextlib.suppress(psutil.NoSuchProcess):
                self.keeper_mb = max(self.keeper_mb, keeper.memory_info().rss / 1e6)
        for pid in self.watching:
            with contextlib.suppress(psutil.NoSuchProcess):
                self.daemons_mb[pid] = max(self.daemons_mb.get(pid, 0.0), rss_mb(pid))


@contextlib.asynccontextmanager
async def sampling(state: Path) -> AsyncIterator[Peaks]:
    peaks = Peaks()

    async def loop() -> None:
        while True:
            peaks.sample(state)
            await asyncio.sleep(0.05)

    task = asyncio.get_running_loop().create_task(loop())
    try:
        yield peaks
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        peaks.sample(state)


@dataclass
class Received:
    """The process's events as the client has them, taken strictly in seq order:
    each output chunk is hashed when its turn comes. A seq already taken (read
    back and pushed both) is dropped; one ahead of a gap waits in ``pending``."""

    process_id: str
    next_seq: int = 1
    size: int = 0
    sha: Any = field(default_factory=hashlib.sha256)
    pending: dict[int, bytes | None] = field(default_factory=dict)
    pending_bytes: int = 0
    exit_seq: int | None = None
    exit_code: int | None = None
    closed_seq: int | None = None
    # The last pushed seq on the current connection (pushes must climb).
    last_pushed: int = 0

    @property
    def closed(self) -> bool:
        return self.closed_seq is not None and self.next_seq > self.closed_seq

    def chunk(self, seq: int, data: bytes | None) -> None:
        """Output (``data``), or the exit or close (None: noted by the caller)."""
        if seq < self.next_seq or seq in self.pending:
            return
        if seq > self.next_seq:
            self.pending[seq] = data
            self.pending_bytes += len(data or b"")
            assert self.pending_bytes < PENDING_BOUND, f"seq {self.next_seq} never came"
            return
        self._take(data)
        while self.next_seq in self.pending:
            data = self.pending.pop(self.next_seq)
            self.pending_bytes -= len(data or b"")
            self._take(data)

    def _take(self, data: bytes | None) -> None:
        if data is not None:
            assert self.exit_seq is None, f"output at seq {self.next_seq} after the exit"
            self.sha.update(data)
            self.size += len(data)
        self.next_seq += 1

    def frame(self, body: dict[str, Any]) -> None:
        """One notification (pushed: its seq must exceed the last one pushed)."""
        method, params = body.get("method"), body.get("params") or {}
        if method not in ("process/output", "process/exited", "process/closed"):
            return
        assert params["processId"] == self.process_id, body
        seq = int(params["seq"])
        assert seq > self.last_pushed, f"pushed seq {seq} after {self.last_pushed}"
        self.last_pushed = seq
        if method == "process/output":
            self.chunk(seq, base64.b64decode(params["chunk"]))
            return
        if method == "process/exited":
            self.exit_seq, self.exit_code = seq, int(params["exitCode"])
        else:
            self.closed_seq = seq
        self.chunk(seq, None)


async def _receive(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any] | None:
    """The next JSON frame; None once the connection has ended."""
    msg = await ws.receive(timeout=FRAME_TIMEOUT)
    if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
        return None
    body: dict[str, Any] = json.loads(msg.data)
    return body


async def _call(
    ws: aiohttp.ClientWebSocketResponse,
    request_id: int,
    method: str,
    params: dict[str, Any],
    other: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """The answer to one request; ``other`` takes every frame before it."""
    await ws.send_str(json.dumps({"id": request_id, "method": method, "params": params}))
    while True:
        body = await _receive(ws)
        assert body is not None, f"connection ended before the answer to {method}"
        if body.get("id") == request_id:
            return body
        other(body)


def _unexpected(body: dict[str, Any]) -> None:
    raise AssertionError(f"a frame before the answer: {body}")


async def start_unread(
    http: aiohttp.ClientSession, url: str, process_id: str
) -> tuple[aiohttp.ClientWebSocketResponse, str]:
    """A session of its own that starts the writer (request id 1) and then reads
    nothing: its websocket and session id."""
    ws = await http.ws_connect(url, max_msg_size=0)
    hello = await _call(ws, 0, "initialize", {"clientName": "big"}, _unexpected)
    await ws.send_str(json.dumps({"method": "initialized", "params": {}}))
    start = {
        "id": 1,
        "method": "process/start",
        "params": {
            "processId": process_id,
            "argv": ["sh", "-c", BIG_COMMAND],
            "cwd": "file:///tmp",
            "env": BIG_ENV,
            "tty": False,
        },
    }
    await ws.send_str(json.dumps(start))
    return ws, str(hello["result"]["sessionId"])


def child_blocked(keeper: psutil.Process, state: Path, session: str, seen: list[int]) -> bool:
    """Its whole tree sleeps (``head`` on the full pipe, ``seq`` on head's) and the
    session's journal has stopped growing since the last look."""
    tree = [p for p in tree_of(keeper) if p.pid != keeper.pid]
    try:
        sleeping = bool(tree) and all(p.status() == psutil.STATUS_SLEEPING for p in tree)
    except psutil.NoSuchProcess:
        return False
    size = journal_bytes(state, session)
    still = size > 0 and size == seen[0]
    seen[0] = size
    return sleeping and still


async def take_what_was_sent(ws: aiohttp.ClientWebSocketResponse, got: Received) -> None:
    """After the daemon died: what its connection still delivers (the start's
    answer among it), in order; the connection closed."""
    start_answered = False
    while (body := await _receive(ws)) is not None:
        start_answered = start_answered or (body.get("id") == 1 and "result" in body)
        got.frame(body)
    await ws.close()
    assert start_answered
    assert not got.pending, "the first connection delivered out of order"


async def resume_and_read_rest(
    http: aiohttp.ClientSession, url: str, session_id: str, got: Received
) -> None:
    """Resume the session and take everything after what the client has, to the
    close: the pushed notifications, and ``process/read`` from the client's next
    seq whenever it lacks one (after the resume, and whenever a push comes ahead
    of it). A read that answers with a later seq than the one missing means
    output was lost."""
    async with http.ws_connect(url, max_msg_size=0) as ws:
        got.last_pushed = 0
        resume = {"clientName": "big", "resumeSessionId": session_id}
        resumed = await _call(ws, 0, "initialize", resume, got.frame)
        assert "result" in resumed, resumed
        await ws.send_str(json.dumps({"method": "initialized", "params": {}}))
        await _read_rest(ws, got)


async def _read_rest(ws: aiohttp.ClientWebSocketResponse, got: Received) -> None:
    ids = iter(range(100, 1 << 30))
    reading: int | None = None

    async def read_from_next() -> int:
        request_id = next(ids)
        params = {"processId": got.process_id, "afterSeq": got.next_seq - 1}
        await ws.send_str(
            json.dumps({"id": request_id, "method": "process/read", "params": params})
        )
        return request_id

    reading = await read_from_next()
    while not got.closed:
        body = await _receive(ws)
        assert body is not None, "the resumed connection ended"
        if "id" not in body:
            got.frame(body)
        elif body["id"] == reading:
            result = body["result"]
            wanted = got.next_seq
            chunks = result["chunks"]
            if chunks and chunks[0]["seq"] > wanted:
                raise OutputLost(
                    f"output lost: seqs {wanted}..{chunks[0]['seq'] - 1} were read back by "
                    f"no one (the log starts at {chunks[0]['seq']})"
                )
            for chunk in chunks:
                got.chunk(int(chunk["seq"]), base64.b64decode(chunk["chunk"]))
            reading = None
        if reading is None and got.pending:
            reading = await read_from_next()


@contextlib.asynccontextmanager
async def expected_sha256() -> AsyncIterator[asyncio.Task[str]]:
    """The generator run here and hashed, beside the test (killed if the test ends
    first)."""
    proc = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        f"{BIG_COMMAND} | sha256sum",
        stdout=asyncio.subprocess.PIPE,
        env=BIG_ENV,
        start_new_session=True,
    )

    async def digest() -> str:
        out, _ = await proc.communicate()
        assert proc.returncode == 0
        return out.split()[0].decode()

    task = asyncio.get_running_loop().create_task(digest())
    try:
        yield task
    finally:
        if not task.done():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await task  # its assertion on the killed pipeline's status
