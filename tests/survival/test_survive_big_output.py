"""1 GB of output through a daemon SIGKILL and restart (``--state-dir``), to a
client that reads none of it until the daemon is dead.

The client starts a process that writes 1,000,000,000 bytes (``seq`` cut by
``head -c``: deterministic, and every line is its own number, so a chunk
repeated, dropped or moved changes the hash) and does not read its websocket:
the daemon's writes to it stop, the daemon stops reading the keeper's link, the
keeper's journal fills to its budget and the child sleeps on a full pipe. The
daemon is SIGKILLed there; the client reads what the dead daemon's connection
still delivers, and resumes its session on a daemon restarted on the same state
directory and port a moment later (a client reconnects after a back-off: the
client library's grows to 2 s, docs/client.md), then reads the rest, pushed
(``process/output``) or read back (``process/read`` from the last seq it has).

Checked: every byte arrives once and in order (the sha256 of the bytes taken in
seq order equals the generator's, run here), the seqs are gap-free from 1 to
the close, exit code 0; the journal on disk, the keeper's RSS and each daemon's
RSS (above its baseline) stay bounded throughout; afterwards no keeper, no
journal and no process of it is left.

What it guards against: a restarted daemon that reads a re-adopted keeper's
journal, and then the child's output, into the detached session's log, which
keeps the last 1 MiB (``process_retained_bytes``) and acknowledges what it
evicts, so that the keeper deletes it: all the child wrote between the restart
and the resume but its last 1 MiB was lost (about 240 MB here with the resume
1 s late), and the first ``process/read`` after the resume started past the
client's last seq (``OutputLost``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from tests.support.procinfo import rss_mb, wait_until
from tests.support.state_dir import (
    alive,
    free_port,
    keepers,
    kill9,
    living,
    state_daemon,
    tree_of,
)

TOTAL = 1_000_000_000
# 1..111,111,111 is 1,000,000,008 bytes of lines: head cuts the last one short.
COMMAND = f"seq 1 111111111 | head -c {TOTAL}"
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C"}
# The journal's budget is process_retained_bytes + 8 MiB (execserver/processes/keepers.py),
# in 1 MiB segments: this bound leaves it room and still catches a journal that grows.
JOURNAL_BOUND = 32 << 20
DAEMON_RSS_GROWTH_MB = 150
KEEPER_RSS_MB = 64
# Bytes the client may hold out of order (pushed after a gap it is reading back).
PENDING_BOUND = 64 << 20
FRAME_TIMEOUT = 30.0
# The resume comes this long after the restarted daemon listens (see the docstring).
RESUME_AFTER_S = 1.0


def _journal_bytes(state: Path) -> int:
    total = 0
    for segment in state.glob("*/*/journal/*.seg"):
        with contextlib.suppress(OSError):
            total += segment.stat().st_size
    return total


def _journals(state: Path) -> list[Path]:
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
        self.journal = max(self.journal, _journal_bytes(state))
        for keeper in keepers(state):
            with contextlib.suppress(psutil.NoSuchProcess):
                self.keeper_mb = max(self.keeper_mb, keeper.memory_info().rss / 1e6)
        for pid in self.watching:
            with contextlib.suppress(psutil.NoSuchProcess):
                self.daemons_mb[pid] = max(self.daemons_mb.get(pid, 0.0), rss_mb(pid))


@contextlib.asynccontextmanager
async def _sampling(state: Path) -> AsyncIterator[Peaks]:
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

    next_seq: int = 1
    size: int = 0
    sha: Any = field(default_factory=hashlib.sha256)
    pending: dict[int, bytes | None] = field(default_factory=dict)
    pending_bytes: int = 0
    exit_seq: int | None = None
    exit_code: int | None = None
    closed_seq: int | None = None

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

    def frame(self, body: dict[str, Any], last_pushed: list[int]) -> None:
        """One notification of the process (pushed: its seq must exceed the last)."""
        method, params = body.get("method"), body.get("params") or {}
        if method not in ("process/output", "process/exited", "process/closed"):
            return
        seq = int(params["seq"])
        assert seq > last_pushed[0], f"pushed seq {seq} after {last_pushed[0]}"
        last_pushed[0] = seq
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


def _child_blocked(keeper: psutil.Process, state: Path, seen: list[int]) -> bool:
    """Its whole tree sleeps (``head`` on the full pipe, ``seq`` on head's) and the
    journal has stopped growing since the last look."""
    tree = [p for p in tree_of(keeper) if p.pid != keeper.pid]
    try:
        sleeping = bool(tree) and all(p.status() == psutil.STATUS_SLEEPING for p in tree)
    except psutil.NoSuchProcess:
        return False
    size = _journal_bytes(state)
    still = size > 0 and size == seen[0]
    seen[0] = size
    return sleeping and still


@contextlib.asynccontextmanager
async def _expected_sha256() -> AsyncIterator[asyncio.Task[str]]:
    """The generator run here and hashed, beside the test (killed if the test ends
    first)."""
    proc = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        f"{COMMAND} | sha256sum",
        stdout=asyncio.subprocess.PIPE,
        env=ENV,
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


@pytest.mark.timeout(300)
async def test_a_gigabyte_to_a_client_that_did_not_read_survives_a_sigkill_whole(
    state_dir: Path,
) -> None:
    port = free_port()
    got = Received()
    timings: dict[str, float] = {}
    started = time.monotonic()
    async with (
        _expected_sha256() as expected,
        _sampling(state_dir) as peaks,
        aiohttp.ClientSession() as http,
    ):
        # ---- the first daemon: the process starts, the client reads nothing ----------
        async with state_daemon(state_dir, port, ttl=60) as first:
            baselines = {first.process.pid: rss_mb(first.process.pid)}
            peaks.watching.add(first.process.pid)
            first_ws = await http.ws_connect(first.url, max_msg_size=0)
            hello = await _call(first_ws, 0, "initialize", {"clientName": "big"}, _unexpected)
            session_id = hello["result"]["sessionId"]
            await first_ws.send_str(json.dumps({"method": "initialized", "params": {}}))
            start = {
                "id": 1,
                "method": "process/start",
                "params": {
                    "processId": "big",
                    "argv": ["sh", "-c", COMMAND],
                    "cwd": "file:///tmp",
                    "env": ENV,
                    "tty": False,
                },
            }
            await first_ws.send_str(json.dumps(start))
            assert await wait_until(lambda: keepers(state_dir), 10)
            keeper = keepers(state_dir)[0]
            seen = [-1]
            assert await wait_until(lambda: _child_blocked(keeper, state_dir, seen), 60, 0.3)
            timings["blocked"] = time.monotonic() - started
            at_kill = _journal_bytes(state_dir)
            peaks.sample(state_dir)
            peaks.watching.clear()
            await kill9(first)
        assert alive(keeper), "the keeper died with the daemon"
        tree = tree_of(keeper)
        # ---- what the dead daemon had written still reaches the client ---------------
        pushed = [0]
        start_answered = False
        while (body := await _receive(first_ws)) is not None:
            start_answered = start_answered or (body.get("id") == 1 and "result" in body)
            got.frame(body, pushed)
        await first_ws.close()
        assert start_answered
        before_restart = got.next_seq - 1
        assert not got.pending, "the first connection delivered out of order"
        # ---- a daemon on the same state directory and port; the session resumes ------
        extra = ["--exited-process-retention", "1"]
        async with state_daemon(state_dir, port, ttl=60, extra=extra) as second:
            baselines[second.process.pid] = rss_mb(second.process.pid)
            peaks.watching.add(second.process.pid)
            timings["restarted"] = time.monotonic() - started
            await asyncio.sleep(RESUME_AFTER_S)
            ws = await http.ws_connect(second.url, max_msg_size=0)
            pushed = [0]
            resume = {"clientName": "big", "resumeSessionId": session_id}
            resumed = await _call(ws, 0, "initialize", resume, lambda b: got.frame(b, pushed))
            assert "result" in resumed, resumed
            await ws.send_str(json.dumps({"method": "initialized", "params": {}}))
            await _read_rest(ws, got, pushed)
            timings["read"] = time.monotonic() - started
            # Retention over (1 s), the keeper releases the process and goes with its files.
            assert await wait_until(lambda: not living([keeper, *tree]), 30)
            assert await wait_until(lambda: not _journals(state_dir), 10)
            assert not keepers(state_dir)
            await ws.close()
            peaks.sample(state_dir)
            peaks.watching.clear()
        digest = await expected
    timings["total"] = time.monotonic() - started
    growth = {pid: peaks.daemons_mb.get(pid, 0.0) - baselines[pid] for pid in baselines}
    figures = (
        f"seconds {timings}; journal at the kill {at_kill} B, peak {peaks.journal} B; "
        f"keeper peak {peaks.keeper_mb:.1f} MB; daemons' baselines {baselines} MB, "
        f"growth {growth} MB; seqs before the restart {before_restart}"
    )
    print(figures)  # shown with pytest -s
    assert got.exit_code == 0, figures
    assert got.size == TOTAL, figures
    assert got.sha.hexdigest() == digest, figures
    assert peaks.journal < JOURNAL_BOUND, figures
    assert peaks.keeper_mb < KEEPER_RSS_MB, figures
    assert all(g < DAEMON_RSS_GROWTH_MB for g in growth.values()), figures


async def _read_rest(ws: aiohttp.ClientWebSocketResponse, got: Received, pushed: list[int]) -> None:
    """Everything after what the client has, to the close: the pushed notifications,
    and ``process/read`` from the client's next seq whenever it lacks one (after the
    resume, and whenever a push comes ahead of it). A read that answers with a
    later seq than the one missing means output was lost."""
    ids = iter(range(100, 1 << 30))
    reading: int | None = None

    async def read_from_next() -> int:
        request_id = next(ids)
        params = {"processId": "big", "afterSeq": got.next_seq - 1}
        await ws.send_str(
            json.dumps({"id": request_id, "method": "process/read", "params": params})
        )
        return request_id

    reading = await read_from_next()
    while not got.closed:
        body = await _receive(ws)
        assert body is not None, "the resumed connection ended"
        if "id" not in body:
            got.frame(body, pushed)
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
