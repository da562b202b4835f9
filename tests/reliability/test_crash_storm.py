"""Crash consistency of ``--state-dir``: the daemon SIGKILLed at random moments of a
storm of starts, writes and terminates, ROUNDS times (50; 1000 with
``RELIABILITY_SCALE=full``), always restarted on the same port and state directory.

Each round a daemon starts (re-adopting what the last one left), the client resumes
its session and checks everything it knows so far, then fires a storm of concurrent
requests (process/start of numbered-line commands through pipes and a pty: short
ones, bursts of many chunks, never-ending ones, some leaving a double-forked
``setsid sleep`` escapee; process/write of numbered lines to stdin echoers;
process/terminate) and SIGKILLs the daemon at a random moment while they are in
flight; one round in ten kills it right after the resume instead, while it may
still be taking in its keepers' replays. Everything random comes
from one seed, named in every assertion message (``CRASH_STORM_SEED=N`` replays
it). A request whose answer never came is *unknown*: after the restart the test
finds out what happened, and holds the daemon to this:

* a start once answered is never lost: the process is there after every restart.
  An unknown start either exists, and is then checked as any other, or the daemon
  does not know it (``process/read``: -32600 "unknown process id ...", the
  reference's error) and never will, and no keeper holds it;
* every process's output, read after the last seq seen and, for a sample each
  round and for all at the end of a session, again from seq 0: complete, in order,
  no line twice, seqs gap-free (the exit's aside), the same bytes under the same
  seq every time, and the notifications agree with it;
* exit codes: the command's own, or a terminated one's (process/terminate
  SIGKILLs: 137 through pipes, 1 on a pty, as the reference reports);
* writes answered reach the child exactly once, unknown ones at most once, all in
  order (the echoer prints the number of each line it reads);
* every ROUNDS_PER_SESSION rounds the session ends (the rest of its processes
  terminated or told to quit, all checked from seq 0) and a psutil sweep finds
  nothing of it left: no keeper, no child, no escapee, no zygote. Sessions end the
  two ways keepers go: the daemon killed and the keepers' TTL run out (SIGTERM,
  which does what the TTL does), and, for the last, the daemon's own session
  expiry (a short ``--session-ttl`` on the last daemon).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import psutil
import pytest

from tests.reliability.scale import pick
from tests.support.procinfo import processes_with, sleep_marker, wait_until
from tests.support.rpc import TMP_URI, Reply, RpcClient, b64, unb64
from tests.support.servers import RunningServer
from tests.support.state_dir import (
    alive,
    end_keepers,
    free_port,
    keepers,
    kill9,
    living,
    read_until_closed,
    state_daemon,
    tree_of,
)

# A round costs ~0.5 s of CPU (a daemon's start and its storm), so 50 rounds take
# 25-40 s on a loaded 2-core machine: under the suite's default 120 s, but not with
# room for load spikes. The full scale gets the reliability conftest's hour.
pytestmark = pytest.mark.timeout(300)

# 50 rounds in `make test`: three sessions (20 + 20 + 10 rounds), so both ways a
# session ends run (the keepers' TTL twice, the daemon's own expiry last), with ~5
# kills right after a resume (one round in ten; none at all has odds of 0.9^47,
# under 1 %) and ~40 requests in flight at a kill over ~200 sent. The 100 rounds
# this had cost the suite ~18 CPU-seconds more (a daemon start and a storm each);
# the long hunt is RELIABILITY_SCALE=full's 1000 (`make reliability`).
# CRASH_STORM_ROUNDS=N runs N instead (a quick try, a long hunt).
ROUNDS = int(os.environ.get("CRASH_STORM_ROUNDS") or pick(ci=50, full=1000))
ROUNDS_PER_SESSION = 20
SEED = int(os.environ.get("CRASH_STORM_SEED") or secrets.randbits(32))
# The storm daemons' --session-ttl, which is also how long their keepers wait for
# the next daemon: far beyond a restart on a loaded machine.
KEEPER_TTL = 30.0
# The last daemon's: its session expires this long after the client leaves.
LAST_TTL = 3.0
# Nothing is forgotten by retention within a session: every process the test
# knows must stay readable until the session ends.
EXTRA = ["--exited-process-retention", "3600"]
# Requests go out within this window, and the kill lands anywhere in it.
STORM_S = 0.2
# What process/read reports for a process killed by process/terminate (SIGKILL).
KILLED_PIPES, KILLED_PTY = 137, 1
# Every process the storm starts carries this in its environment (escapees too):
# the sweep finds whatever is left by it.
TOKEN_VAR = "CRASH_STORM"
TOKEN = f"storm-{secrets.token_hex(6)}"
PATH_ENV = {"PATH": "/usr/bin:/bin"}

Kind = Literal["lines", "burst", "ticker", "echo", "escapee"]
KINDS: list[Kind] = ["lines", "burst", "ticker", "echo", "escapee"]
# Where a process stands: its start answered or found to exist ("exists"), its
# start unknown and not looked at yet ("unknown"), or unknown to the daemon ("absent").
State = Literal["unknown", "exists", "absent"]
UNSENT = "unsent"


def why(round_: object, text: str) -> str:
    return f"{text} [CRASH_STORM_SEED={SEED}, round {round_}]"


@dataclass
class Proc:
    """One process as the client knows it: what it runs, every chunk read of it
    (seq -> stream, bytes), and the requests it was sent."""

    id: str
    kind: Kind
    tty: bool
    lines: int = 0
    code: int = 0
    marker: str = ""  # an escapee's unique `sleep` duration
    state: State = "unknown"
    chunks: dict[int, tuple[str, bytes]] = field(default_factory=dict, repr=False)
    after: int = 0
    exited: bool = False
    exit_code: int | None = None
    closed: bool = False
    terminate_sent: bool = False
    terminated: bool = False  # a terminate answered {"running": true}
    writes: list[tuple[int, bool]] = field(default_factory=list)  # (number, answered)
    quit_sent: bool = False
    notified: dict[int, bytes] = field(default_factory=dict, repr=False)
    notified_exit: int | None = None

    @property
    def running(self) -> bool:
        return self.state == "exists" and not self.exited

    @property
    def killed_code(self) -> int:
        return KILLED_PTY if self.tty else KILLED_PIPES

    def argv(self) -> list[str]:
        tag = self.id
        if self.kind == "lines":
            err = "" if self.tty else f"[ $((i % 4)) -ne 0 ] || echo {tag}:e$i >&2; "
            body = (
                f"for i in $(seq 1 {self.lines}); do echo {tag}:$i; {err}"
                f"[ $((i % 50)) -ne 0 ] || sleep 0.02; done; exit {self.code}"
            )
        elif self.kind == "burst":
            # Up to ~0.5 MB at once: many full chunks, journaled across a kill
            # (under the 1 MiB the daemon retains of a process: nothing is evicted).
            body = f"seq -f '{tag}:%g' 1 {self.lines}; exit {self.code}"
        elif self.kind == "ticker":
            # A line every 30 ms, without a process per line: bash's `read -t` on a
            # pipe that never has data (fd 3, open for reading and writing) waits the
            # 30 ms. A `sleep` forked per line, for the few tickers alive at any time
            # through the storm's minute, cost seconds of CPU (an exec takes ms here).
            body = (
                "exec 3<> <(:); "
                f"i=0; while :; do i=$((i+1)); echo {tag}:$i; read -t 0.03 -u 3; done"
            )
            return ["bash", "-c", body]
        elif self.kind == "echo":
            # On a pty the terminal would echo each line written too: not wanted.
            quiet = "stty -echo; " if self.tty else ""
            body = (
                f'{quiet}while read -r l; do [ "$l" != q ] || exit 6; echo {tag}:got$l; done; '
                "exit 5"
            )
        else:
            # The subshell forks the escapee and exits: it is re-parented to the keeper.
            body = (
                f"(setsid sleep {self.marker} </dev/null >/dev/null 2>&1 & echo {tag}:esc$!); "
                f"for i in $(seq 1 {self.lines}); do echo {tag}:$i; done; exit {self.code}"
            )
        return ["sh", "-c", body]

    def text(self, stream: str) -> str:
        return b"".join(d for _, (s, d) in sorted(self.chunks.items()) if s == stream).decode()


def _numbered(tag: str, numbers: range | list[int], sep: str) -> str:
    return "".join(f"{tag}:{i}{sep}" for i in numbers)


@dataclass
class Session:
    """One session of the storm: its processes, and every process of it seen alive."""

    index: int
    token: str
    procs: dict[str, Proc] = field(default_factory=dict)
    session_id: str | None = None
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    kept: dict[int, psutil.Process] = field(default_factory=dict)

    def see(self, procs: list[psutil.Process], *, keepers: bool = False) -> None:
        """Remember processes of the session's daemons (zygotes, warm keepers) or,
        with ``keepers``, the keepers its state directory named."""
        for proc in procs:
            self.seen.setdefault(proc.pid, proc)
            if keepers:
                self.kept.setdefault(proc.pid, proc)


@dataclass
class Stats:
    rounds: int = 0
    early_kills: int = 0
    requests: int = 0
    in_flight_at_kill: int = 0
    unknown_starts_found: int = 0
    unknown_starts_absent: int = 0
    unknown_writes: int = 0
    unknown_terminates: int = 0
    started: int = 0
    # Where the time went (s): daemon starts and resumes, checks, storms, session ends.
    restarting: float = 0.0
    checking: float = 0.0
    storming: float = 0.0
    ending: float = 0.0

    def __str__(self) -> str:
        return (
            f"{self.rounds} kills ({self.early_kills} right after a resume), "
            f"{self.requests} requests ({self.in_flight_at_kill} in flight at a kill), "
            f"{self.started} starts sent; unknown: starts {self.unknown_starts_found} found "
            f"+ {self.unknown_starts_absent} absent, writes {self.unknown_writes}, "
            f"terminates {self.unknown_terminates}; time: restarts {self.restarting:.1f} s, "
            f"checks {self.checking:.1f} s, storms {self.storming:.1f} s, "
            f"session ends {self.ending:.1f} s"
        )


class Storm:
    def __init__(self, state: Path, port: int) -> None:
        self.state = state
        self.port = port
        self.rng = random.Random(SEED)
        self.stats = Stats()
        self.at: object = "-"
        self.names = 0
        # The storm's daemon was killed (what was not sent by then never will be);
        # requests sent and not answered yet.
        self.killed = False
        self.in_flight = 0

    def why(self, text: str) -> str:
        return why(self.at, text)

    # ---- one connection to one daemon ------------------------------------------------

    @contextlib.asynccontextmanager
    async def daemon(self, ttl: float = KEEPER_TTL) -> AsyncIterator[RunningServer]:
        async with state_daemon(self.state, self.port, ttl=ttl, extra=EXTRA) as server:
            yield server

    async def attach(
        self, http: aiohttp.ClientSession, server: RunningServer, session: Session
    ) -> RpcClient:
        """A connection resuming ``session`` (opening it the first time)."""
        self.killed = False
        ws = await http.ws_connect(server.url, max_msg_size=0)
        peer = RpcClient(ws, name="crash-storm")
        reply = await peer.handshake(resume=session.session_id)
        assert reply.ok, self.why(f"session {session.session_id} did not resume: {reply}")
        session.session_id = peer.session_id
        return peer

    # ---- starting ----------------------------------------------------------------------

    def new_proc(self, session: Session, kind: Kind, tty: bool) -> Proc:
        self.names += 1
        rng = self.rng
        proc = Proc(f"s{session.index}p{self.names}", kind, tty)
        if kind in ("lines", "escapee"):
            # Mostly short, sometimes several chunks' worth.
            proc.lines = int(2 ** rng.uniform(0, 9))
            proc.code = rng.randrange(0, 100)
        elif kind == "burst":
            proc.lines = int(2 ** rng.uniform(10, 15.2))
            proc.code = rng.randrange(0, 100)
        if kind == "escapee":
            proc.marker = sleep_marker()
        session.procs[proc.id] = proc
        return proc

    def start_params(self, session: Session, proc: Proc) -> dict[str, Any]:
        return {
            "processId": proc.id,
            "argv": proc.argv(),
            "cwd": TMP_URI,
            "env": {**PATH_ENV, TOKEN_VAR: session.token},
            "tty": proc.tty,
            "pipeStdin": proc.kind == "echo",
        }

    # ---- reading back ------------------------------------------------------------------

    async def read(self, peer: RpcClient, proc: Proc, after: int, wait_ms: int = 0) -> Reply:
        params = {"processId": proc.id, "afterSeq": after, "maxBytes": 1 << 20, "waitMs": wait_ms}
        return await peer.call("process/read", params)

    def assert_unknown(self, proc: Proc, reply: Reply) -> None:
        assert reply.error == (-32600, f"unknown process id {proc.id}"), self.why(
            f"{proc.id}: expected the reference's unknown-process error, got {dict(reply)}"
        )

    async def catch_up(self, peer: RpcClient, proc: Proc) -> None:
        """Read what is new since the last seq seen (no waiting), and check it."""
        while True:
            reply = await self.read(peer, proc, proc.after)
            if not reply.ok:
                if proc.state == "unknown":
                    self.assert_unknown(proc, reply)
                    proc.state = "absent"
                    self.stats.unknown_starts_absent += 1
                    return
                raise AssertionError(
                    self.why(f"{proc.id} ({proc.state}, {proc.kind}) is lost: {dict(reply)}")
                )
            if proc.state == "unknown":
                proc.state = "exists"
                self.stats.unknown_starts_found += 1
            result = reply.result
            self.take(proc, result["chunks"])
            self.take_status(proc, result)
            if not result["chunks"]:
                break
        self.check(proc)

    def take(self, proc: Proc, chunks: list[dict[str, Any]]) -> None:
        for chunk in chunks:
            seq = chunk["seq"]
            assert seq > proc.after, self.why(
                f"{proc.id}: seq {seq} after {proc.after}: out of order or duplicated"
            )
            proc.chunks[seq] = (chunk["stream"], unb64(chunk["chunk"]))
            proc.after = seq

    def take_status(self, proc: Proc, result: dict[str, Any]) -> None:
        # What the daemon once said a process did, no later daemon may take back.
        if proc.exited:
            assert result["exited"] and result["exitCode"] == proc.exit_code, self.why(
                f"{proc.id}: exited with {proc.exit_code} before, now {result}"
            )
        if proc.closed:
            assert result["closed"], self.why(f"{proc.id}: closed before, now {result}")
        proc.exited = bool(result["exited"])
        proc.exit_code = result["exitCode"]
        proc.closed = bool(result["closed"])

    async def reread(self, peer: RpcClient, proc: Proc) -> None:
        """A closed process read again from seq 0: the very same chunks and end."""
        seen: dict[int, tuple[str, bytes]] = {}
        after = 0
        while True:
            reply = await self.read(peer, proc, after)
            assert reply.ok, self.why(f"{proc.id} (closed) is lost: {dict(reply)}")
            result = reply.result
            for chunk in result["chunks"]:
                seen[chunk["seq"]] = (chunk["stream"], unb64(chunk["chunk"]))
                after = chunk["seq"]
            if not result["chunks"]:
                break
        assert seen == proc.chunks, self.why(
            f"{proc.id}: read again from seq 0, seqs {sorted(seen)[:8]}... "
            f"!= {sorted(proc.chunks)[:8]}... (or other bytes)"
        )
        self.take_status(proc, result)

    # ---- what the output must be -------------------------------------------------------

    def check(self, proc: Proc) -> None:
        """Everything read of ``proc`` so far is consistent; complete if it closed."""
        if proc.state != "exists":
            return
        seqs = sorted(proc.chunks)
        holes = set(range(1, seqs[-1] + 1)) - set(seqs) if seqs else set()
        # Gap-free: every seq up to the last chunk is a chunk, but the exit's.
        allowed = 1 if proc.exited else 0
        assert len(holes) <= allowed, self.why(
            f"{proc.id}: missing seqs {sorted(holes)[:10]} (exited: {proc.exited})"
        )
        for seq, data in proc.notified.items():
            if seq in proc.chunks or proc.closed:
                assert seq in proc.chunks and proc.chunks[seq][1] == data, self.why(
                    f"{proc.id}: seq {seq} notified, and not read with the same bytes"
                )
        if proc.closed and proc.notified_exit is not None:
            assert proc.notified_exit == proc.exit_code, self.why(
                f"{proc.id}: exited notified {proc.notified_exit}, read {proc.exit_code}"
            )
        getattr(self, f"_check_{proc.kind}")(proc)

    def _check_code(self, proc: Proc, codes: set[int]) -> None:
        if proc.exited:
            assert proc.exit_code in codes, self.why(
                f"{proc.id} ({proc.kind}, tty={proc.tty}): exit code {proc.exit_code}, "
                f"expected one of {sorted(codes)}"
            )

    def _streams(self, proc: Proc) -> dict[str, str]:
        return (
            {"pty": proc.text("pty")}
            if proc.tty
            else {
                "stdout": proc.text("stdout"),
                "stderr": proc.text("stderr"),
            }
        )

    def _check_lines(self, proc: Proc, head: str = "") -> None:
        sep = "\r\n" if proc.tty else "\n"
        out = head + _numbered(proc.id, range(1, proc.lines + 1), sep)
        expected = {"pty": out}
        if not proc.tty:
            every = range(4, proc.lines + 1, 4) if proc.kind == "lines" else range(0)
            errors = "".join(f"{proc.id}:e{i}{sep}" for i in every)
            expected = {"stdout": out, "stderr": errors}
        # (never terminated)
        self._check_code(proc, {proc.code})
        for stream, text in self._streams(proc).items():
            if proc.closed:
                assert text == expected[stream], self.why(
                    f"{proc.id} {stream}: {text[-200:]!r} != {expected[stream][-200:]!r}"
                )
            else:
                assert expected[stream].startswith(text), self.why(
                    f"{proc.id} {stream}: not a prefix of its lines: {text[-200:]!r}"
                )

    def _check_burst(self, proc: Proc) -> None:
        self._check_lines(proc)

    def _check_escapee(self, proc: Proc) -> None:
        text = proc.text("stdout")
        found = re.match(rf"{proc.id}:esc\d+\n", text)
        if found is None:
            # Not even its first line whole yet.
            partial = f"{proc.id}:esc".startswith(text) or re.fullmatch(rf"{proc.id}:esc\d+", text)
            assert partial and not proc.closed, self.why(
                f"{proc.id}: no escapee line first: {text[:100]!r}"
            )
            return
        self._check_lines(proc, head=found.group(0))

    def _check_ticker(self, proc: Proc) -> None:
        sep = "\r\n" if proc.tty else "\n"
        if proc.exited:
            assert proc.terminate_sent, self.why(f"{proc.id}: a ticker exited untold")
        self._check_code(proc, {proc.killed_code})
        stream = "pty" if proc.tty else "stdout"
        text = proc.text(stream)
        full = _numbered(proc.id, range(1, text.count(sep) + 2), sep)
        # Terminated: whatever it printed until then, whole lines in order (the last
        # one may be cut where the kill found it).
        assert full.startswith(text), self.why(
            f"{proc.id} {stream}: lines lost, doubled or out of order: {text[-200:]!r}"
        )

    def _check_echo(self, proc: Proc) -> None:
        codes = set()
        if proc.quit_sent:
            codes.add(6)
        if proc.terminate_sent:
            codes.add(proc.killed_code)
        if proc.terminated:
            codes = {proc.killed_code}
        self._check_code(proc, codes)
        sep = "\r\n" if proc.tty else "\n"
        lines = proc.text("pty" if proc.tty else "stdout").split(sep)
        if proc.closed and proc.exit_code == 6:
            assert lines[-1] == "", self.why(f"{proc.id}: cut line {lines[-1]!r}")
        numbers = []
        for line in lines[:-1]:
            found = re.fullmatch(rf"{proc.id}:got(\d+)", line)
            if found is None and proc.tty and re.fullmatch(r"\d+|q", line):
                continue  # the terminal's echo of a line written before `stty -echo` ran
            assert found is not None, self.why(f"{proc.id}: stray line {line!r}")
            numbers.append(int(found.group(1)))
        sent = {n for n, _ in proc.writes}
        assert numbers == sorted(set(numbers)), self.why(
            f"{proc.id}: writes echoed twice or out of order: {numbers}"
        )
        assert set(numbers) <= sent, self.why(f"{proc.id}: echoed {numbers}, sent {sorted(sent)}")
        # Stdin is read in order: every answered write before the last one echoed
        # arrived, and all of them once the echoer read its "q".
        last = numbers[-1] if numbers else 0
        if proc.closed and proc.exit_code == 6:
            last = max(sent, default=0)
        missing = [n for n, answered in proc.writes if answered and n <= last and n not in numbers]
        assert not missing, self.why(f"{proc.id}: answered writes {missing} never arrived")

    def take_notifications(self, session: Session, peer: RpcClient) -> None:
        """What this connection was notified of: in order, once each, and the same
        bytes under a seq as any other connection and any read."""
        for process_id, events in peer.processes.items():
            proc = session.procs.get(process_id)
            assert proc is not None, self.why(f"notified of a process never started: {process_id}")
            last = 0
            for method, params in events.events:
                seq = params["seq"]
                assert seq > last, self.why(f"{process_id}: notified seq {seq} after {last}")
                last = seq
                if method == "process/output":
                    data = unb64(params["chunk"])
                    before = proc.notified.setdefault(seq, data)
                    assert before == data, self.why(
                        f"{process_id}: seq {seq} notified with other bytes than before"
                    )
                elif method == "process/exited":
                    proc.notified_exit = params["exitCode"]

    # ---- the storm ---------------------------------------------------------------------

    async def request(
        self, peer: RpcClient, method: str, params: dict[str, Any], delay: float
    ) -> Reply | str | None:
        """The answer; None if it never came (unknown); UNSENT if the daemon was
        killed before it was time to send it."""
        await asyncio.sleep(delay)
        if self.killed:
            return UNSENT
        self.stats.requests += 1
        self.in_flight += 1
        try:
            pending = await peer.send_request(method, params)
            return await pending
        except (ConnectionError, aiohttp.ClientError):
            return None
        finally:
            self.in_flight -= 1

    async def start(self, peer: RpcClient, session: Session, proc: Proc, delay: float) -> None:
        reply = await self.request(peer, "process/start", self.start_params(session, proc), delay)
        if reply == UNSENT:
            del session.procs[proc.id]  # never asked for (and its id never used again)
            return
        self.stats.started += 1
        if isinstance(reply, Reply):
            assert reply.ok, self.why(f"{proc.id}: start failed: {dict(reply)}")
            proc.state = "exists"

    async def write(
        self, peer: RpcClient, proc: Proc, delays: list[float], quit_after: bool
    ) -> None:
        """Numbered lines, one request after the other's answer (their order is the
        order the echoer must read them in), then maybe "q"."""
        for delay in delays:
            number = len(proc.writes) + 1
            params = {"processId": proc.id, "chunk": b64(f"{number}\n"), "writeId": f"w{number}"}
            reply = await self.request(peer, "process/write", params, delay)
            if reply == UNSENT:
                return
            proc.writes.append((number, reply is not None))
            if not isinstance(reply, Reply):
                self.stats.unknown_writes += 1
                return
            assert reply.ok and reply.result == {"status": "accepted"}, self.why(
                f"{proc.id}: write {number}: {dict(reply)}"
            )
        if quit_after:
            await self.quit(peer, proc, 0.0)

    async def quit(self, peer: RpcClient, proc: Proc, delay: float) -> None:
        params = {"processId": proc.id, "chunk": b64("q\n"), "writeId": f"q{len(proc.writes)}"}
        reply = await self.request(peer, "process/write", params, delay)
        if reply == UNSENT:
            return
        proc.quit_sent = True
        if isinstance(reply, Reply):
            assert reply.ok and reply.result == {"status": "accepted"}, self.why(
                f"{proc.id}: quit: {dict(reply)}"
            )

    async def terminate(self, peer: RpcClient, proc: Proc, delay: float) -> None:
        reply = await self.request(peer, "process/terminate", {"processId": proc.id}, delay)
        if reply == UNSENT:
            return
        proc.terminate_sent = True
        if not isinstance(reply, Reply):
            self.stats.unknown_terminates += 1
            return
        assert reply.ok, self.why(f"{proc.id}: terminate failed: {dict(reply)}")
        if reply.result["running"]:
            proc.terminated = True

    def plan(self, peer: RpcClient, session: Session, kill_at: float) -> list[Awaitable[None]]:
        """This round's requests (every random choice made here, from the seed)."""
        rng = self.rng

        def when() -> float:
            # Half of the requests anywhere before the kill, half just before it:
            # a request takes a few ms to tens of ms, so many are in flight then.
            if rng.random() < 0.5:
                return rng.uniform(0, kill_at)
            return max(0.0, kill_at - rng.uniform(0, 0.04))

        running = [p for p in session.procs.values() if p.running]
        actions: list[Awaitable[None]] = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.choices(KINDS, [5, 1, 2, 2, 1])[0]
            tty = kind != "escapee" and rng.random() < 0.3
            proc = self.new_proc(session, kind, tty)
            actions.append(self.start(peer, session, proc, when()))
        # Never-ending ones: a few at a time, each terminated sooner or later.
        tickers = [p for p in running if p.kind == "ticker"]
        rng.shuffle(tickers)
        for index, proc in enumerate(tickers):
            if index >= 3 or rng.random() < 0.4:
                actions.append(self.terminate(peer, proc, when()))
        # Echoers: written to, told to quit, or terminated; never two of these at once
        # (a terminate racing a write or a quit has no one right outcome).
        echoes = [p for p in running if p.kind == "echo" and not p.quit_sent]
        for proc in echoes:
            choice = rng.random()
            if proc.terminate_sent or choice < 0.15:
                actions.append(self.terminate(peer, proc, when()))
            else:
                gaps = [rng.uniform(0, 0.02) for _ in range(rng.randint(0, 2))]
                actions.append(self.write(peer, proc, [when(), *gaps], quit_after=choice > 0.8))
        return actions

    async def storm(self, peer: RpcClient, server: RunningServer, session: Session) -> None:
        kill_at = self.rng.uniform(0.01, STORM_S)
        tasks = [asyncio.ensure_future(action) for action in self.plan(peer, session, kill_at)]
        await asyncio.sleep(kill_at)
        self.killed = True
        self.stats.in_flight_at_kill += self.in_flight
        await kill9(server)
        await asyncio.gather(*tasks)
        self.stats.rounds += 1

    # ---- rounds and sessions -----------------------------------------------------------

    async def verify(self, peer: RpcClient, session: Session) -> None:
        """Everything known so far, after a restart: the new output of what was not
        closed yet, a sample of the closed read again from seq 0."""
        procs = list(session.procs.values())
        for proc in procs:
            if proc.state == "absent":
                self.assert_unknown(proc, await self.read(peer, proc, 0))
            elif not proc.closed:
                await self.catch_up(peer, proc)
        closed = [p for p in procs if p.closed]
        for proc in self.rng.sample(closed, min(2, len(closed))):
            await self.reread(peer, proc)
            self.check(proc)
        absent = {p.id for p in procs if p.state == "absent"}
        held = set(self.held(session))
        assert not absent & held, self.why(f"unknown to the daemon, still kept: {absent & held}")

    def held(self, session: Session) -> list[str]:
        """The process ids the keepers of ``session`` hold (their meta.json)."""
        found = []
        for meta in self.state.glob(f"{session.session_id}/*/meta.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                found.append(str(json.loads(meta.read_text())["process_id"]))
        return found

    async def closing(self, peer: RpcClient) -> None:
        """Wait until the connection is over (the daemon is gone): every frame it
        carried was received."""
        with contextlib.suppress(TimeoutError):
            await peer.closed(10)
        await peer.aclose()

    async def round(self, session: Session, number: int) -> None:
        self.at = number
        clock = time.monotonic()
        async with self.daemon() as server, aiohttp.ClientSession() as http:
            peer = await self.attach(http, server, session)
            session.see(tree_of(psutil.Process(server.process.pid))[1:])
            clock = self.spent("restarting", clock)
            if session.procs and self.rng.random() < 0.1:
                # Killed again at once, while it may still be taking in its keepers'
                # replays: nothing may be lost that way either.
                await asyncio.sleep(self.rng.uniform(0, 0.03))
                await kill9(server)
                self.stats.rounds += 1
                self.stats.early_kills += 1
                await self.closing(peer)
                self.take_notifications(session, peer)
                return
            if not session.procs:
                # A session outlives its daemon once it has a process (its file is
                # written at its first keeper): the first start is answered.
                proc = self.new_proc(session, "ticker", False)
                await peer.ok("process/start", self.start_params(session, proc))
                proc.state = "exists"
            await self.verify(peer, session)
            session.see(keepers(self.state), keepers=True)
            clock = self.spent("checking", clock)
            await self.storm(peer, server, session)
            await self.closing(peer)
            self.take_notifications(session, peer)
            self.spent("storming", clock)

    def spent(self, phase: str, since: float) -> float:
        now = time.monotonic()
        setattr(self.stats, phase, getattr(self.stats, phase) + now - since)
        return now

    async def until_closed(self, peer: RpcClient, proc: Proc) -> None:
        try:
            async with asyncio.timeout(30):
                chunks, code = await read_until_closed(peer, proc.id, proc.after)
        except TimeoutError:
            raise AssertionError(self.why(f"{proc.id} does not close: {proc}")) from None
        self.take(proc, chunks)
        self.take_status(proc, {"exited": True, "exitCode": code, "closed": True})

    async def end_session(self, session: Session, *, last: bool) -> None:
        """The rest of the session's processes ended and checked whole from seq 0;
        then the session ends and nothing of it may be left."""
        self.at = f"end of session {session.index}"
        async with self.daemon(LAST_TTL if last else KEEPER_TTL) as server:
            async with aiohttp.ClientSession() as http:
                peer = await self.attach(http, server, session)
                session.see(tree_of(psutil.Process(server.process.pid))[1:])
                await self.verify(peer, session)
                session.see(keepers(self.state), keepers=True)
                for proc in session.procs.values():
                    if not proc.running:
                        continue
                    if proc.kind == "ticker" or proc.terminate_sent:
                        await self.terminate(peer, proc, 0.0)
                    elif proc.kind == "echo":
                        await self.quit(peer, proc, 0.0)
                for proc in session.procs.values():
                    if proc.state == "exists":
                        await self.until_closed(peer, proc)
                        await self.reread(peer, proc)
                # The escapees live on, re-parented to their keepers, and the sweep
                # below sees them: it would see whatever else of the storm stayed.
                swept = set(self.storm_processes())
                for proc in session.procs.values():
                    if proc.kind == "escapee" and proc.state == "exists":
                        found = {p.pid for p in processes_with(proc.marker)}
                        assert found and found <= swept, self.why(f"{proc.id}: escapee {found}")
                if last:
                    # Detached: the daemon's session expiry ends every keeper.
                    await peer.aclose()
                else:
                    await kill9(server)
                    await self.closing(peer)
                self.take_notifications(session, peer)
                for proc in session.procs.values():
                    self.check(proc)
            if last:
                assert await wait_until(lambda: not living(session.kept.values()), 30), self.why(
                    f"the session expired, keepers left: {living(session.kept.values())}"
                )
                assert await wait_until(lambda: not self.session_dirs(), 10), self.why(
                    f"files left: {self.session_dirs()}"
                )
            else:
                # No daemon came back: the keepers' TTL (SIGTERM does the same now).
                await end_keepers(self.state)
        # The daemon is gone too (and its zygote with it): nothing at all is left.
        assert await wait_until(lambda: not self.leftovers(session), 10), self.why(
            f"left behind: {self.leftovers(session)}"
        )

    def session_dirs(self) -> list[Path]:
        return [p for p in self.state.iterdir() if p.is_dir()]

    def storm_processes(self) -> dict[int, str]:
        """Every live process with the storm's token in its environment: the
        commands it started, whatever they forked, escapees included."""
        found = {}
        for proc in psutil.process_iter(["environ", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                if str((proc.info["environ"] or {}).get(TOKEN_VAR, "")).startswith(TOKEN):
                    if alive(proc):
                        found[proc.pid] = " ".join(proc.info["cmdline"] or [])
        return found

    def leftovers(self, session: Session) -> list[str]:
        left = [f"{p.pid} {p.name()} (under a daemon)" for p in living(session.seen.values())]
        return left + [f"{pid} {cmd}" for pid, cmd in self.storm_processes().items()]

    async def run(self) -> None:
        began = time.monotonic()
        session = Session(1, f"{TOKEN}-1")
        for number in range(1, ROUNDS + 1):
            await self.round(session, number)
            if number % ROUNDS_PER_SESSION == 0 or number == ROUNDS:
                clock = time.monotonic()
                await self.end_session(session, last=number == ROUNDS)
                self.spent("ending", clock)
                session = Session(session.index + 1, f"{TOKEN}-{session.index + 1}")
        print(
            f"crash storm, seed {SEED}: {time.monotonic() - began:.1f} s, {self.stats}",
            flush=True,
        )


async def test_a_daemon_sigkilled_mid_storm_loses_duplicates_and_orphans_nothing(
    state_dir: Path,
) -> None:
    await Storm(state_dir, free_port()).run()
