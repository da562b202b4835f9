"""Output delivery: completeness, chunking, retention, binary data, background holders."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import tempfile
from collections.abc import Iterator

import aiohttp
import psutil
import pytest

from tests.support.rpc import connect, read_all, unb64
from tests.support.servers import RunningServer


def _kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _wait_dead(pid: int, timeout: float = 10) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    dead = _dead(pid)
    while not dead and loop.time() < deadline:
        await asyncio.sleep(0.02)  # there is no event for "a pid died"
        dead = _dead(pid)
    return dead


@pytest.fixture
def binary_file() -> Iterator[tuple[str, bytes]]:
    data = bytes(range(256)) * 64 + b"\x00\xff\r\n\x1b[0m"
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
    try:
        yield f.name, data
    finally:
        os.unlink(f.name)


async def test_binary_output_round_trips(
    any_server: RunningServer, binary_file: tuple[str, bytes]
) -> None:
    path, data = binary_file
    async with connect(any_server.url) as c:
        ev = await c.run("bin", ["cat", path])
    assert ev.output("stdout") == data


async def test_large_output_is_complete_in_order_and_chunked(any_server: RunningServer) -> None:
    size = 20 * 1024 * 1024
    async with connect(any_server.url) as c:
        ev = await c.run("big", ["head", "-c", str(size), "/dev/urandom"], timeout=None)
        # Clients order events by seq (the reference may emit a few out of order).
        ordered = sorted(ev.events, key=lambda e: e[1]["seq"])
        outputs = [p for m, p in ordered if m == "process/output"]
        data = b"".join(unb64(p["chunk"]) for p in outputs)
        assert len(data) == size
        assert max(len(unb64(p["chunk"])) for p in outputs) <= 8192
        assert sorted(ev.seqs()) == list(range(1, len(ev.events) + 1))
        if any_server.kind == "execserver":
            # Ours sends every event of a process in seq order.
            assert ev.seqs() == list(range(1, len(ev.events) + 1))
        # What the server retained is the tail of what it sent.
        retained = await read_all(c, "big")
        tail = b"".join(unb64(ch["chunk"]) for ch in retained)
        assert data.endswith(tail) and 0 < len(tail) <= 1024 * 1024


async def test_fifty_megabytes_arrive_complete(execserver: RunningServer) -> None:
    script = "head -c 52428800 /dev/zero | tr '\\0' 'x'"
    async with connect(execserver.url) as c:
        ev = await c.run("fifty", ["bash", "-c", script], timeout=None)
    digest = hashlib.sha256()
    total = 0
    for method, p in ev.events:
        if method == "process/output":
            chunk = unb64(p["chunk"])
            digest.update(chunk)
            total += len(chunk)
    assert total == 50 * 1024 * 1024
    assert digest.hexdigest() == hashlib.sha256(b"x" * total).hexdigest()


async def test_pty_chunk_sizes(any_server: RunningServer) -> None:
    async with connect(any_server.url) as c:
        ev = await c.run("tb", ["bash", "-c", "head -c 200000 /dev/zero | tr '\\0' 'b'"], tty=True)
    sizes = [len(unb64(p["chunk"])) for m, p in ev.events if m == "process/output"]
    # The reference's pty reads are usually <= 4095 bytes but reach 8192 at times;
    # ours always cut at 4095.
    limit = 4095 if any_server.kind == "execserver" else 8192
    assert sum(sizes) == 200000 and max(sizes) <= limit


async def test_retention_keeps_about_one_mebibyte_and_loss_is_a_seq_gap(
    any_server: RunningServer,
) -> None:
    async with connect(any_server.url) as c:
        await c.run("ret", ["bash", "-c", "head -c 3145728 /dev/zero | tr '\\0' 'a'"])
        chunks = await read_all(c, "ret")
        sent = [p["seq"] for m, p in c.events("ret").events if m == "process/output"]
    retained = sum(len(unb64(ch["chunk"])) for ch in chunks)
    seqs = [ch["seq"] for ch in chunks]
    assert 1000 * 1024 <= retained <= 1024 * 1024
    assert seqs[0] > 1  # the oldest chunks were evicted: the gap is visible
    assert seqs == sent[-len(seqs) :]  # the tail is contiguous and ends with the last chunk


async def test_exited_does_not_wait_for_a_background_writer(any_server: RunningServer) -> None:
    async with connect(any_server.url) as c:
        await c.start(
            "bg", ["bash", "-c", "(read -t 30 -r x < /dev/null; sleep 1; echo bg) & echo fg"]
        )
        await c.wait_for(lambda: c.events("bg").exited() is not None)
        ev = c.events("bg")
        # At exit time the background job still holds stdout: not closed, "bg" not yet out.
        assert not ev.closed and b"bg" not in ev.output()
        await c.wait_closed("bg")
    assert ev.output() == b"fg\nbg\n"
    order = [m for m, _ in ev.events]
    expected = ["process/output", "process/exited", "process/output", "process/closed"]
    if any_server.kind == "reference":
        # The reference reads output and reaps the child in separate tasks, so "fg" can
        # be delivered just after the exit (seen on a loaded CI machine); execserver
        # drains what the pipe already holds before it reports the exit.
        assert order in (expected, ["process/exited", *expected[:1], *expected[2:]])
    else:
        assert order == expected
    assert ev.seqs() == [1, 2, 3, 4]


async def test_terminate_closes_promptly_and_kills_the_process_group(
    any_server: RunningServer,
) -> None:
    async with connect(any_server.url) as c:
        await c.start("hold", ["bash", "-c", "sleep 300 & echo $!; wait"])
        await c.wait_for(lambda: b"\n" in c.events("hold").output())
        grandchild = int(c.events("hold").output().split()[0])
        try:
            assert await c.ok("process/terminate", {"processId": "hold"}) == {"running": True}
            ev = await c.wait_closed("hold")
            assert ev.exited()["exitCode"] == 137  # type: ignore[index]
            # The reference SIGKILLs the child's whole process group (not only the child).
            assert await _wait_dead(grandchild)
        finally:
            _kill_pids([grandchild])


async def test_drain_timeout_closes_a_process_whose_daemonised_child_keeps_stdout(
    execserver: RunningServer,
) -> None:
    # The reference would never send process/closed here (until the sleep ends).
    async with connect(execserver.url) as c:
        await c.start("daemon", ["bash", "-c", "setsid sleep 300 & echo $!"])
        ev = await c.wait_closed("daemon", timeout=30)
        grandchild = int(ev.output().split()[0])
        try:
            assert [m for m, _ in ev.events][-2:] == ["process/exited", "process/closed"]
            read = await c.read("daemon")
            assert read["closed"] is True
        finally:
            _kill_pids([grandchild])


async def test_two_hundred_concurrent_processes_on_one_connection(
    execserver: RunningServer,
) -> None:
    async with connect(execserver.url) as c:
        for i in range(200):
            await c.start(f"p{i}", ["bash", "-c", f"echo {i}; sleep 0.5; echo done-{i}"])
        for i in range(200):
            ev = await c.wait_closed(f"p{i}", timeout=60)
            assert ev.output() == f"{i}\ndone-{i}\n".encode()
            assert ev.seqs() == [1, 2, 3, 4]


async def test_a_client_that_stops_reading_loses_nothing(execserver: RunningServer) -> None:
    """Backpressure instead of loss: the child is paused while the client does not read,
    and the exit (plus the drain timeout) while paused must not drop buffered output."""
    size = 40 * 1024 * 1024
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(execserver.url, max_msg_size=0)
        await ws.send_str(
            json.dumps({"id": 1, "method": "initialize", "params": {"clientName": "slow"}})
        )
        await ws.receive()
        await ws.send_str(json.dumps({"method": "initialized", "params": {}}))
        # The direct child exits at once; a background job keeps writing to the pipe,
        # so the drain timeout runs while the pumps are paused for this slow client.
        argv = ["bash", "-c", f"head -c {size} /dev/zero & exit 0"]
        params = {"processId": "p", "argv": argv, "cwd": "file:///tmp", "env": {}, "tty": False}
        await ws.send_str(json.dumps({"id": 2, "method": "process/start", "params": params}))
        await asyncio.sleep(7)  # read nothing for longer than the 5 s drain timeout
        total = 0
        seqs: list[int] = []
        while True:
            obj = json.loads((await ws.receive()).data)
            if obj.get("method") == "process/output":
                seqs.append(obj["params"]["seq"])
                if obj["params"]["stream"] == "stdout":
                    total += len(unb64(obj["params"]["chunk"]))
            elif obj.get("method") in ("process/exited", "process/closed"):
                seqs.append(obj["params"]["seq"])
                if obj["method"] == "process/closed":
                    break
        await ws.close()
    assert total == size
    assert seqs == list(range(1, len(seqs) + 1))
