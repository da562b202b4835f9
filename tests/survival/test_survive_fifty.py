"""Fifty processes of every kind through a daemon SIGKILL and restart
(``--state-dir``): pipes and PTY, unsandboxed and sandboxed (workspace-write,
bwrap), behind the daemon's managed-network proxy or not, each printing
numbered lines before the crash, while no daemon runs, and after the restart;
and one writing 1 GB to a client of its own that reads none of it until after
the restart (tests/support/big_output.py), killed while that writer sleeps on a
full pipe with its keeper's journal at its budget. The restarted daemon serves
every one of them to the resumed sessions: output complete and in order from
seq 1, seqs gap-free, the right exit codes, every byte of the gigabyte once and
in order (its sha256); the journals on disk, the keepers' RSS and each daemon's
RSS stay bounded throughout, and once they have ended and their retention is
over their keepers go by themselves and nothing of them is left.

Not here: that a managed network still works after the restart
(tests/survival/test_survive_network.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from tests.reliability.scale import pick
from tests.support.attacks import ROOT_READ, entry, sandbox
from tests.support.big_output import (
    BIG_BYTES,
    DAEMON_RSS_GROWTH_MB,
    JOURNAL_BOUND,
    KEEPER_RSS_MB,
    RESUME_AFTER_S,
    Received,
    child_blocked,
    expected_sha256,
    journal_bytes,
    journals,
    resume_and_read_rest,
    sampling,
    start_unread,
    take_what_was_sent,
)
from tests.support.netproxy import proxy_params
from tests.support.procinfo import rss_mb, wait_until
from tests.support.rpc import connect, unb64
from tests.support.sandbox import uri
from tests.support.state_dir import (
    free_port,
    keepers,
    kill9,
    living,
    read_until_closed,
    state_daemon,
)

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
TTL = 60.0
# Lines before the crash, while no daemon runs, after the restart.
BEFORE, DOWN, AFTER = pick(20, 200), pick(30, 300), pick(20, 200)
BIG = "big"  # the gigabyte's process id, in a session of its own
# The restarted daemon forgets an ended process this long after its close, and
# its keeper goes with it: each is read as it goes (long polls), its close too.
RETENTION_S = 1
# What the restarted daemon may grow above its RSS once listening, re-adopted
# processes, the gigabyte's stream and all.
READOPTED_RSS_GROWTH_MB = 64


@dataclass(frozen=True)
class Kind:
    name: str
    count: int
    tty: bool
    sandboxed: bool
    proxied: bool = False  # behind the daemon's managed-network proxy


# Forty-nine, and the gigabyte's writer.
KINDS = [
    Kind("pipes", 14, tty=False, sandboxed=False),
    Kind("pty", 10, tty=True, sandboxed=False),
    Kind("boxed", 12, tty=False, sandboxed=True),
    Kind("boxedpty", 5, tty=True, sandboxed=True),
    Kind("proxied", 4, tty=False, sandboxed=False, proxied=True),
    Kind("boxednet", 4, tty=False, sandboxed=True, proxied=True),
]


# How often a process looks for the test's next gate file. Each look forks a
# `sleep`: forty-nine processes looking every 20 ms took most of two cores' time
# (~2,500 execs a second) from the whole suite while they waited.
GATE_POLL_S = 0.2


def _script(prefix: str, gates: Path, code: int) -> str:
    def lines(first: int, last: int) -> str:
        return f"for i in $(seq {first} {last}); do echo {prefix}-$i; done"

    return (
        f"{lines(1, BEFORE)}; "
        f"while [ ! -e {gates}/down ]; do sleep {GATE_POLL_S}; done; "
        f"{lines(BEFORE + 1, BEFORE + DOWN)}; touch {prefix}.down; "
        f"while [ ! -e {gates}/restarted ]; do sleep {GATE_POLL_S}; done; "
        f"{lines(BEFORE + DOWN + 1, BEFORE + DOWN + AFTER)}; exit {code}"
    )


def _trees(roots: list[psutil.Process]) -> list[psutil.Process]:
    """The roots and their descendants as they are now, from one look at /proc
    (state_dir.tree_of looks at all of it for each root: for fifty roots, with
    another suite's thousands of processes on the machine, that took 8 s once)."""
    children: dict[int, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["ppid"]):
        children.setdefault(proc.info["ppid"], []).append(proc)
    found, todo = [], list(roots)
    while todo:
        proc = todo.pop()
        found.append(proc)
        todo.extend(children.get(proc.pid, []))
    return found


@pytest.mark.timeout(300)
async def test_fifty_processes_of_every_kind_survive_a_sigkill_and_restart_whole(
    state_dir: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    gates = tmp_path / "gates"
    gates.mkdir()
    context = sandbox([ROOT_READ, entry(ws, "write")], cwd=ws)
    expected: dict[str, tuple[Kind, int]] = {}
    port = free_port()
    got = Received(BIG)
    timings: dict[str, float] = {}
    started = time.monotonic()
    async with (
        expected_sha256() as digest,
        sampling(state_dir) as peaks,
        aiohttp.ClientSession() as http,
    ):
        # ---- the first daemon: all start; the gigabyte's client reads nothing --------
        async with state_daemon(state_dir, port, ttl=TTL) as first:
            baselines = {first.process.pid: rss_mb(first.process.pid)}
            peaks.watching.add(first.process.pid)
            big_ws, big_session = await start_unread(http, first.url, BIG)
            assert await wait_until(lambda: keepers(state_dir), 10)
            (big_keeper,) = keepers(state_dir)
            async with connect(first.url) as peer:
                session_id = peer.session_id
                n = 0
                for kind in KINDS:
                    for i in range(kind.count):
                        process_id = f"{kind.name}-{i}"
                        extra: dict[str, Any] = {"tty": kind.tty, "cwd": uri(ws)}
                        if kind.sandboxed:
                            extra["sandbox"] = context
                        if kind.proxied:
                            # Its proxy's listeners go to its keeper too (that they
                            # still serve: tests/survival/test_survive_network.py).
                            extra["networkProxy"] = proxy_params()
                            extra["enforceManagedNetwork"] = kind.sandboxed
                        code = n % 50
                        argv = ["sh", "-c", _script(process_id, gates, code)]
                        await peer.start(process_id, argv, env=ENV, **extra)
                        expected[process_id] = (kind, code)
                        n += 1
                last = f"-{BEFORE}"
                for process_id in expected:
                    await peer.wait_output(process_id, f"{process_id}{last}".encode(), timeout=60)
            # The kill comes while the writer waits on its full pipe, its journal full.
            seen = [-1]
            assert await wait_until(
                lambda: child_blocked(big_keeper, state_dir, big_session, seen), 60, 0.3
            )
            timings["blocked"] = time.monotonic() - started
            held = keepers(state_dir)
            assert len(held) == len(expected) + 1 == 50
            trees = _trees(held)
            at_kill = journal_bytes(state_dir, big_session)
            peaks.sample(state_dir)
            peaks.watching.clear()
            await kill9(first)
        (gates / "down").touch()
        # What the dead daemon had written to the gigabyte's client still reaches it.
        await take_what_was_sent(big_ws, got)
        before_restart = got.next_seq - 1
        # Everything runs on without a daemon, and prints its second phase meanwhile
        # (each says so in the workspace, its cwd, writable sandboxed too); the
        # writer stays blocked.
        assert len(living(held)) == 50
        assert await wait_until(lambda: len(list(ws.glob("*.down"))) == len(expected), 60)
        # ---- a daemon on the same state directory and port; both sessions resume -----
        restart = ["--exited-process-retention", str(RETENTION_S)]
        async with (
            state_daemon(state_dir, port, ttl=TTL, extra=restart) as second,
            connect(second.url, resume=session_id) as peer,
        ):
            baselines[second.process.pid] = rss_mb(second.process.pid)
            peaks.watching.add(second.process.pid)
            timings["restarted"] = time.monotonic() - started
            (gates / "restarted").touch()

            async def gigabyte() -> None:
                # Its client comes back later, as one reconnecting after a back-off.
                await asyncio.sleep(RESUME_AFTER_S)
                await resume_and_read_rest(http, second.url, big_session, got)
                timings["read"] = time.monotonic() - started

            results, _ = await asyncio.gather(
                asyncio.gather(*(read_until_closed(peer, pid) for pid in expected)),
                gigabyte(),
            )
            # Retention over, each keeper releases its process and goes with its files.
            assert await wait_until(lambda: not living(trees), 30)
            assert await wait_until(lambda: not journals(state_dir), 10)
            assert not keepers(state_dir)
            peaks.sample(state_dir)
            peaks.watching.clear()
        sha256 = await digest
    timings["total"] = time.monotonic() - started
    for (process_id, (kind, code)), (chunks, exit_code) in zip(
        expected.items(), results, strict=True
    ):
        sep = "\r\n" if kind.tty else "\n"
        total = BEFORE + DOWN + AFTER
        text = b"".join(unb64(c["chunk"]) for c in chunks).decode()
        assert text == "".join(f"{process_id}-{i}{sep}" for i in range(1, total + 1)), (
            process_id,
            text[-200:],
        )
        seqs = [c["seq"] for c in chunks]
        assert seqs[0] == 1 and seqs == sorted(set(seqs)), (process_id, seqs[:10])
        holes = set(range(1, seqs[-1] + 1)) - set(seqs)
        assert not holes, (process_id, sorted(holes)[:10])
        assert exit_code == code, (process_id, exit_code)
    growth = {pid: peaks.daemons_mb.get(pid, 0.0) - baselines[pid] for pid in baselines}
    figures = (
        f"seconds {timings}; the writer's journal at the kill {at_kill} B, journals' peak "
        f"{peaks.journal} B; keepers' peak {peaks.keeper_mb:.1f} MB; daemons' baselines "
        f"{baselines} MB, growth {growth} MB; the writer's seqs before the restart "
        f"{before_restart}"
    )
    print(figures)  # shown with pytest -s
    # The gigabyte: every seq from 1 to the close taken in order (Received), every
    # byte once and in order, its exit after all of its output.
    assert got.exit_code == 0, figures
    assert got.size == BIG_BYTES, figures
    assert got.sha.hexdigest() == sha256, figures
    assert peaks.journal < JOURNAL_BOUND, figures
    assert peaks.keeper_mb < KEEPER_RSS_MB, figures
    assert growth[first.process.pid] < DAEMON_RSS_GROWTH_MB, figures
    # Re-adopting fifty processes and serving all of their output costs little.
    assert growth[second.process.pid] < READOPTED_RSS_GROWTH_MB, figures
