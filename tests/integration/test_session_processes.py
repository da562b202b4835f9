"""Processes across connections: detach/resume, expiry, shutdown, request concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import psutil
import pytest

from tests.support.rpc import RpcFailure, connect, poll_until, unb64
from tests.support.servers import RunningServer, start_server

# A tree with every kind of descendant: a plain background job, a setsid escapee,
# and a double-forked setsid escapee whose parent exits (re-parented to the subreaper).
TREE_SCRIPT = (
    "sleep 1000 & echo $!; "
    "setsid sleep 1000 & echo $!; "
    "(setsid sleep 1000 & echo $!) ; "
    "echo $$; echo ready; wait"
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _wait_all_dead(pids: list[int], timeout: float = 30) -> list[int]:
    """The pids still alive once all died or ``timeout`` passed (polling /proc)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    alive = [p for p in pids if _alive(p)]
    while alive and loop.time() < deadline:
        await asyncio.sleep(0.05)  # there is no event for "a pid died"
        alive = [p for p in pids if _alive(p)]
    return alive


def _tree_pids(output: bytes) -> list[int]:
    return [int(x) for x in output.split()[:4]]


# Resumes a detached session (the shared daemon's TTL is 0).
@pytest.mark.fresh_daemon
async def test_resume_reads_output_produced_while_detached(any_server: RunningServer) -> None:
    script = "for i in $(seq 1 40); do echo tick-$i; sleep 0.05; done"
    async with connect(any_server.url) as a:
        session_id = a.session_id
        await a.start("tick", ["bash", "-c", script])
        await a.wait_output("tick", b"tick-3\n")
        seen = {
            p["seq"]: unb64(p["chunk"]) for m, p in a.events("tick").events if m == "process/output"
        }
    last_seen = max(seen)
    await asyncio.sleep(0.5)  # the ticker keeps running while the session is detached
    async with connect(any_server.url, resume=session_id) as b:
        assert b.session_id == session_id
        chunks = []
        after = last_seen
        while True:
            result = await b.read("tick", afterSeq=after, waitMs=5000)
            chunks.extend(result["chunks"])
            if result["exited"] and not result["chunks"]:
                break
            if result["chunks"]:
                after = result["nextSeq"] - 1
        read_seqs = [ch["seq"] for ch in chunks]
        assert read_seqs == list(range(last_seen + 1, last_seen + 1 + len(read_seqs)))
        # Notifications are not replayed: none for what happened while detached.
        live = [p["seq"] for m, p in b.events("tick").events if m == "process/output"]
        assert all(seq > last_seen + 1 for seq in live)
        await b.wait_closed("tick")
    data = b"".join(seen[s] for s in sorted(seen)) + b"".join(unb64(c["chunk"]) for c in chunks)
    assert data == b"".join(f"tick-{i}\n".encode() for i in range(1, 41))


# Resumes a detached session (the shared daemon's TTL is 0).
@pytest.mark.fresh_daemon
async def test_resume_while_attached_and_unknown_session(any_server: RunningServer) -> None:
    async with connect(any_server.url) as a:
        async with connect(any_server.url, handshake=False) as x:
            with pytest.raises(RpcFailure) as busy:
                await x.ok("initialize", {"clientName": "x", "resumeSessionId": a.session_id})
            assert busy.value.code == -32010
            assert busy.value.message == (
                f"session {a.session_id} is already attached to another connection"
            )
        async with connect(any_server.url, handshake=False) as y:
            with pytest.raises(RpcFailure) as unknown:
                await y.ok("initialize", {"clientName": "y", "resumeSessionId": "no-such"})
            assert (unknown.value.code, unknown.value.message) == (
                -32600,
                "unknown session id no-such",
            )


async def test_processes_are_per_session(any_server: RunningServer) -> None:
    async with connect(any_server.url) as a, connect(any_server.url) as b:
        await a.start("same", ["sleep", "30"])
        with pytest.raises(RpcFailure) as err:
            await b.read("same")
        assert err.value.message == "unknown process id same"
        await b.run("same", ["true"])  # the id is free in another session
        await a.ok("process/terminate", {"processId": "same"})
        await a.wait_closed("same")


async def test_processes_keep_running_while_detached() -> None:
    async with start_server("execserver", ["--session-ttl", "30"]) as server:
        async with connect(server.url) as a:
            session_id = a.session_id
            await a.start("run", ["bash", "-c", "echo $$; sleep 1000"])
            await a.wait_output("run", b"\n")
            pid = int(a.events("run").output())
        assert _alive(pid)
        async with connect(server.url, resume=session_id) as b:
            assert _alive(pid)
            assert await b.ok("process/terminate", {"processId": "run"}) == {"running": True}
            await b.wait_for(lambda: b.events("run").closed)


@pytest.mark.parametrize("env", [{"PATH": "/usr/bin:/bin"}, {}], ids=["with-env", "empty-env"])
async def test_session_expiry_kills_the_whole_tree(env: dict[str, str]) -> None:
    async with start_server("execserver", ["--session-ttl", "1"]) as server:
        async with connect(server.url) as c:
            await c.start("tree", ["bash", "-c", TREE_SCRIPT], env=env)
            await c.wait_output("tree", b"ready\n")
            pids = _tree_pids(c.events("tree").output())
            assert all(_alive(p) for p in pids)
        # Detached now; after the TTL the session and every descendant must go.
        assert await _wait_all_dead(pids) == []
        async with connect(server.url, handshake=False) as late:
            with pytest.raises(RpcFailure) as err:
                await late.ok("initialize", {"clientName": "z", "resumeSessionId": c.session_id})
            assert err.value.message == f"unknown session id {c.session_id}"


async def test_server_shutdown_leaves_no_descendant() -> None:
    async with start_server("execserver") as server:
        async with connect(server.url) as c:
            for n in range(3):
                await c.start(f"tree{n}", ["bash", "-c", TREE_SCRIPT], tty=n == 2)
            pids: list[int] = []
            for n in range(3):
                await c.wait_output(f"tree{n}", b"ready")
                pids += _tree_pids(c.events(f"tree{n}").output())
            # One tree whose direct child has already exited, leaving escapees behind.
            await c.start("gone", ["bash", "-c", "setsid sleep 1000 & echo $!"])
            await c.wait_for(lambda: c.events("gone").exited() is not None)
            pids.append(int(c.events("gone").output().split()[0]))
            assert all(_alive(p) for p in pids)
            descendants = [p.pid for p in psutil.Process(server.process.pid).children(True)]
            assert set(pids) <= set(descendants)  # escapees stay under the subreaper
        server.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.process.wait(), 30) == 0
    assert await _wait_all_dead(pids) == []


async def test_terminate_and_a_setsid_grandchild(any_server: RunningServer) -> None:
    """The reference spares a grandchild that left the group; execserver kills the
    whole tree (a documented difference: docs/differences.md)."""
    async with connect(any_server.url) as c:
        await c.start("k", ["bash", "-c", "setsid sleep 1000 & echo $!; wait"])
        await c.wait_output("k", b"\n")
        grandchild = int(c.events("k").output())
        try:
            # $! is printed right after fork: wait until the child really left the group.
            assert await poll_until(lambda: os.getsid(grandchild) == grandchild)
            await c.ok("process/terminate", {"processId": "k"})
            await c.wait_closed("k")
            if any_server.kind == "reference":
                assert _alive(grandchild)
            else:
                assert await _wait_all_dead([grandchild], timeout=1) == []
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(grandchild, signal.SIGKILL)


async def test_long_poll_read_does_not_block_other_requests_on_execserver(
    any_server: RunningServer,
) -> None:
    async with connect(any_server.url) as c:
        await c.start("quiet", ["sleep", "30"])
        read = await c.send_request(
            "process/read", {"processId": "quiet", "afterSeq": 0, "waitMs": 1500}
        )
        status = await c.send_request("environment/status", {})
        await asyncio.gather(read, status)
        read_id = (await read)["id"]
        status_id = (await status)["id"]
        order = [
            rid for kind, rid in c.arrivals if kind == "response" and rid in (read_id, status_id)
        ]
        if any_server.kind == "execserver":
            # The waiting read gives up its slot: status is answered first.
            assert order == [status_id, read_id]
        else:
            # The reference (--concurrent-requests 1) serialises: status waits for the read.
            assert order == [read_id, status_id]
        await c.ok("process/terminate", {"processId": "quiet"})
        await c.wait_closed("quiet")


async def test_escapee_outlives_its_retained_process_but_not_the_session() -> None:
    flags = ["--exited-process-retention", "0.5", "--session-ttl", "1"]
    async with start_server("execserver", flags) as server:
        async with connect(server.url) as c:
            await c.start("gone", ["bash", "-c", "setsid sleep 1000 & echo $!"])
            await c.wait_closed("gone")
            escapee = int(c.events("gone").output())
            async with asyncio.timeout(30):
                while True:
                    try:
                        await c.read("gone")
                    except RpcFailure:
                        break  # the process id was released
                    await asyncio.sleep(0.1)
            assert _alive(escapee)  # releasing the id does not kill what it left behind
        assert await _wait_all_dead([escapee]) == []  # the session's end does


# Counts the daemon's open fds.
@pytest.mark.fresh_daemon
async def test_no_fd_is_leaked_by_any_launch_shape(execserver: RunningServer) -> None:
    def fds() -> int:
        return len(os.listdir(f"/proc/{execserver.process.pid}/fd"))

    async with connect(execserver.url) as c:
        await c.run("warmup", ["true"])
        baseline = fds()
        shapes: list[dict[str, Any]] = [
            {},
            {"tty": True},
            {"pipeStdin": True},
        ]
        for round_ in range(10):
            for n, extra in enumerate(shapes):
                await c.run(f"r{round_}-{n}", ["bash", "-c", "echo hi >&2; echo out"], **extra)
            await c.start(f"k{round_}", ["sleep", "30"], pipeStdin=True)
            await c.ok("process/terminate", {"processId": f"k{round_}"})
            await c.wait_closed(f"k{round_}")
        with pytest.raises(RpcFailure):
            await c.start("bad", ["no-such-program-xyz"])
        with pytest.raises(RpcFailure):
            await c.start("bad", ["true"], cwd="file:///nonexistent-xyz")
        assert await poll_until(lambda: fds() == baseline)


async def test_an_escapee_no_tree_can_claim_is_reaped_when_it_exits() -> None:
    """An escapee that cleared its environment (`env -i`) matches no tree: it lives
    on until the daemon ends, but once it exits by itself it must not stay a zombie
    of the daemon until then."""
    async with start_server("execserver") as server:
        async with connect(server.url) as c:
            for n in range(3):
                script = "env -i setsid sh -c 'sleep 0.5' >/dev/null 2>&1 & echo $!"
                await c.run(f"bare{n}", ["bash", "-c", script])
            pids = [int(c.events(f"bare{n}").output()) for n in range(3)]

            def zombies() -> list[int]:
                return [
                    child.pid
                    for child in psutil.Process(server.process.pid).children()
                    if child.pid in pids and child.status() == psutil.STATUS_ZOMBIE
                ]

            # They exit after 0.5 s; the daemon looks for unowned children every
            # 2 s and reaps a zombie nothing else did within 1 s.
            gone = await poll_until(lambda: not any(psutil.pid_exists(p) for p in pids), 20)
            assert gone, zombies()
