"""Processes outlive the daemon (``--state-dir``, issue 32 phase 1): real daemons,
real SIGKILLs, real restarts on the same state directory.

* a SIGKILLed daemon, restarted: the session resumes, every process's output is
  complete, in order, with gap-free seqs, and the exit codes are right;
* a SIGKILLed daemon never restarted: after the session TTL nothing it started
  is left (a setsid escapee included), nor the keepers and their files;
* big output to a client that does not read: the daemon's and the keeper's RSS
  and the journal on disk stay bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from execserver.keeper.program import UNSENT_LIMIT
from execserver.processes.kept import RECV_BYTES
from tests.support.procinfo import rss_mb, wait_until
from tests.support.rpc import RpcClient, connect, unb64
from tests.support.servers import RunningServer, start_server
from tests.support.state_dir import alive, end_keepers, keepers, kill9, read_until_closed

ENV = {"PATH": "/usr/bin:/bin"}
PIPE_LINES = 150
PTY_LINES = 120


@contextlib.asynccontextmanager
async def _daemon(state_dir: Path, ttl: float) -> AsyncIterator[RunningServer]:
    extra = ["--state-dir", str(state_dir), "--session-ttl", str(ttl), "--log-level", "warning"]
    async with start_server("execserver", extra=extra) as server:
        yield server


async def _reaped(server: RunningServer) -> None:
    await asyncio.wait_for(server.process.wait(), 10)


_SESSIONS: list[aiohttp.ClientSession] = []


async def _open_ws(url: str, keep: object) -> aiohttp.ClientWebSocketResponse:
    """A websocket outliving its daemon (the test kills the daemon under it)."""
    del keep
    http = aiohttp.ClientSession()
    _SESSIONS.append(http)
    return await http.ws_connect(url, max_msg_size=0)


@pytest.fixture
async def state(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "state"
    try:
        yield path
    finally:
        await end_keepers(path)
        for http in _SESSIONS:
            await http.close()
        _SESSIONS.clear()


async def test_processes_survive_a_sigkilled_daemon_and_resume_gap_free(state: Path) -> None:
    pipes = f"for i in $(seq 1 {PIPE_LINES}); do echo line$i; sleep 0.01; done; exit 3"
    pty = f"for i in $(seq 1 {PTY_LINES}); do echo p$i; sleep 0.01; done; exit 5"
    seen: dict[str, list[dict[str, Any]]] = {}
    async with _daemon(state, ttl=60) as first:
        peer = RpcClient(await _open_ws(first.url, seen), name="survive")
        await peer.handshake()
        session_id = peer.session_id
        await peer.start("pipes", ["sh", "-c", pipes])
        await peer.start("pty", ["sh", "-c", pty], tty=True)
        # Some output of each went out before the crash; more comes while it is down.
        await peer.wait_output("pipes", b"line5\n")
        await peer.wait_output("pty", b"p5\r\n")
        await kill9(first)
        for process_id in ("pipes", "pty"):
            seen[process_id] = [
                p for method, p in peer.events(process_id).events if method == "process/output"
            ]
        with contextlib.suppress(Exception):
            await peer.aclose()
    assert session_id is not None
    async with _daemon(state, ttl=60) as second, connect(second.url, handshake=False) as peer:
        reply = await peer.handshake(resume=session_id)
        assert reply.ok, reply
        for process_id, lines, expected_code, sep in (
            ("pipes", PIPE_LINES, 3, "\n"),
            ("pty", PTY_LINES, 5, "\r\n"),
        ):
            before = seen[process_id]
            last = before[-1]["seq"]
            rest, exit_code = await read_until_closed(peer, process_id, last)
            assert exit_code == expected_code
            chunks = before + rest
            seqs = [c["seq"] for c in chunks]
            assert seqs == sorted(set(seqs)), "duplicated or out of order"
            # Gap-free: every seq up to the last chunk is a chunk, except the exit's
            # (output of a pipe's child can only come before its exit).
            holes = set(range(1, seqs[-1] + 1)) - set(seqs)
            assert len(holes) <= 1, f"{process_id}: missing seqs {sorted(holes)[:10]}"
            text = b"".join(unb64(c["chunk"]) for c in chunks).decode()
            prefix = "line" if process_id == "pipes" else "p"
            expected = "".join(f"{prefix}{i}{sep}" for i in range(1, lines + 1))
            assert text == expected


async def test_a_daemon_killed_and_never_restarted_leaves_nothing_after_the_ttl(
    state: Path,
) -> None:
    script = 'setsid sh -c "echo escapee $$; exec sleep 300" & echo child $$; exec sleep 300'
    async with _daemon(state, ttl=2) as server, connect(server.url, handshake=False) as peer:
        await peer.handshake()
        await peer.start("tree", ["sh", "-c", script])
        await peer.start("term", ["sh", "-c", "echo ready; exec sleep 300"], tty=True)
        await peer.wait_output("tree", b"escapee")
        await peer.wait_output("tree", b"child")
        await peer.wait_output("term", b"ready")
        words = peer.events("tree").output().split()
        pids = [int(words[words.index(b"child") + 1]), int(words[words.index(b"escapee") + 1])]
        started = [psutil.Process(pid) for pid in pids]
        held = keepers(state)
        assert len(held) == 2
        # Everything is alive while the daemon is.
        assert all(alive(p) for p in started + held)
        await kill9(server)
        # The keepers outlive it, with their children...
        assert all(alive(p) for p in started + held)
        everything = started + held

        def gone() -> bool:
            return not any(alive(p) for p in everything)

        # ... until the TTL runs out: then nothing is left, nor any file.
        assert await wait_until(gone, 30)
        assert await wait_until(lambda: not _leftover_files(state), 10)


def _leftover_files(state: Path) -> list[Path]:
    return list(state.glob("*/*"))


async def _raw_session(ws: aiohttp.ClientWebSocketResponse) -> None:
    await ws.send_str(
        json.dumps({"id": 0, "method": "initialize", "params": {"clientName": "survive"}})
    )
    await ws.receive(timeout=10)
    await ws.send_str('{"method":"initialized"}')


def _journal_bytes(state: Path) -> int:
    return sum(f.stat().st_size for f in state.glob("*/*/journal/*.seg") if f.exists())


async def test_big_output_to_a_client_that_does_not_read_stays_bounded(state: Path) -> None:
    size = 256 * 1024 * 1024
    async with (
        _daemon(state, ttl=60) as server,
        aiohttp.ClientSession() as http,
        http.ws_connect(server.url, max_msg_size=0) as ws,
    ):
        await _raw_session(ws)
        start = {
            "id": 1,
            "method": "process/start",
            "params": {
                "processId": "big",
                "argv": ["head", "-c", str(size), "/dev/zero"],
                "cwd": "file:///tmp",
                "env": ENV,
                "tty": False,
            },
        }
        await ws.send_str(json.dumps(start))
        daemon = server.process.pid
        baseline = rss_mb(daemon)
        assert await wait_until(lambda: keepers(state), 10)
        keeper = keepers(state)[0]
        child = next(p for p in keeper.children() if p.name() == "head")

        def blocked() -> bool:
            # The child sleeps on a full pipe: the keeper stopped reading it.
            with contextlib.suppress(psutil.NoSuchProcess):
                return child.status() == psutil.STATUS_SLEEPING and _journal_bytes(state) > 0
            return False

        # The client reads nothing: the output stops somewhere, the child waits.
        assert await wait_until(blocked, 30)
        written = _journal_bytes(state)
        for _ in range(3):  # and stays stopped (the journal does not grow)
            await asyncio.sleep(0.2)
            assert child.status() == psutil.STATUS_SLEEPING
        # Where it stopped: the keeper looks at what waits unsent before each read of
        # the child, so from any moment it may journal up to that limit and one
        # read's frame (head included) more (a quiet run saw 1 MiB + 52 bytes).
        assert _journal_bytes(state) <= written + UNSENT_LIMIT + RECV_BYTES
        # With its daemon connected the keeper stops at 1 MiB not yet sent to it
        # (UNSENT_LIMIT), well short of its budget (retained 1 MiB + 8 MiB), which
        # is for when no daemon is there.
        assert _journal_bytes(state) < 5 * 1024 * 1024
        assert rss_mb(daemon) - baseline < 100
        assert keeper.memory_info().rss / 1e6 < 64
        # Reading resumes the flow: everything arrives, and the journal is dropped
        # as the daemon's log evicts (acknowledged).
        total = 0
        while True:
            msg = await ws.receive(timeout=30)
            body = json.loads(msg.data)
            if body.get("method") == "process/output":
                total += len(_b64len(body["params"]["chunk"]))
            if body.get("method") == "process/closed":
                break
        assert total == size
        assert _journal_bytes(state) < 32 * 1024 * 1024


def _b64len(text: str) -> bytes:
    return unb64(text)


def _warm_keepers(server: RunningServer, state: Path) -> list[psutil.Process]:
    """The zygote's children that hold no process yet (no meta.json names them)."""
    held = {k.pid for k in keepers(state)}
    zygotes = [p for p in psutil.Process(server.process.pid).children() if "zygote" in p.cmdline()]
    return [c for z in zygotes for c in z.children() if c.pid not in held]


async def test_a_spawn_after_the_warm_keeper_was_killed_still_starts_its_process(
    state: Path,
) -> None:
    async with _daemon(state, ttl=5) as server, connect(server.url, handshake=False) as peer:
        await peer.handshake()
        # One keeper is forked ahead of each spawn; kill it, and the one after it.
        for round_ in range(2):
            assert await wait_until(lambda: len(_warm_keepers(server, state)) == 1, 10)
            warm = _warm_keepers(server, state)[0]
            warm.kill()
            warm.wait(10)
            events = await peer.run(f"after-kill-{round_}", ["sh", "-c", "echo alive; exit 4"])
            exited = events.exited()
            assert exited is not None and exited["exitCode"] == 4
            assert events.output() == b"alive\n"
        # Nothing waits for a request once the daemon lets go (SIGTERM).
        assert await wait_until(lambda: len(_warm_keepers(server, state)) == 1, 10)
        warm = _warm_keepers(server, state)[0]
        server.process.terminate()
        await _reaped(server)
        assert await wait_until(lambda: not alive(warm), 10)
