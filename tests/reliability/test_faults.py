"""Faults: children that die or misbehave, files that vanish, and the daemon
itself told to stop with many live processes."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
from pathlib import Path
from typing import Any

import psutil

from tests.reliability.scale import pick
from tests.support.procinfo import live_descendants, wait_until
from tests.support.rpc import RpcClient, connect
from tests.support.servers import RunningServer

ENV = {"PATH": "/usr/bin:/bin"}


async def _start(peer: RpcClient, pid: str, argv: list[str], **extra: Any) -> dict[str, Any]:
    params = {
        "processId": pid,
        "argv": argv,
        "cwd": "file:///tmp",
        "env": ENV,
        "tty": False,
        **extra,
    }
    return await peer.call("process/start", params)


async def _events_until_closed(peer: RpcClient, pid: str) -> list[dict[str, Any]]:
    events = []
    while True:
        msg = await peer.recv(timeout=30)
        if msg.get("params", {}).get("processId") == pid:
            events.append(msg)
            if msg["method"] == "process/closed":
                return events


async def test_child_killed_by_sigkill_reports_137(execserver: RunningServer) -> None:
    async with connect(execserver.url, handshake=False) as peer:
        await peer.handshake()
        await _start(peer, "victim", ["sh", "-c", "echo $$; exec sleep 100"])
        first = await peer.recv()
        child_pid = int(base64.b64decode(first["params"]["chunk"]).decode().strip())
        os.kill(child_pid, signal.SIGKILL)
        events = await _events_until_closed(peer, "victim")
        exited = [e for e in events if e["method"] == "process/exited"]
        assert exited[0]["params"]["exitCode"] == 137


async def test_child_closing_stdout_early_still_delivers_stderr_and_exit(
    execserver: RunningServer,
) -> None:
    async with connect(execserver.url, handshake=False) as peer:
        await peer.handshake()
        await _start(
            peer, "early", ["sh", "-c", "echo out; exec 1>&-; sleep 0.2; echo late-err >&2; exit 4"]
        )
        events = await _events_until_closed(peer, "early")
        output = b"".join(
            base64.b64decode(e["params"]["chunk"])
            for e in events
            if e["method"] == "process/output"
        )
        assert output == b"out\nlate-err\n"
        assert [e["params"]["exitCode"] for e in events if e["method"] == "process/exited"] == [4]
        seqs = [e["params"]["seq"] for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


async def test_writes_after_the_child_closed_its_stdin_are_accepted_and_harmless(
    execserver: RunningServer,
) -> None:
    async with connect(execserver.url, handshake=False) as peer:
        await peer.handshake()
        await _start(peer, "deaf", ["sh", "-c", "exec 0<&-; sleep 0.5; echo alive"], pipeStdin=True)
        for n in range(20):
            reply = await peer.call(
                "process/write",
                {
                    "processId": "deaf",
                    "chunk": base64.b64encode(b"x" * 65536).decode(),
                    "writeId": f"w{n}",
                },
            )
            assert reply["result"]["status"] == "accepted"
        events = await _events_until_closed(peer, "deaf")
        output = b"".join(
            base64.b64decode(e["params"]["chunk"])
            for e in events
            if e["method"] == "process/output"
        )
        assert output == b"alive\n"
        assert await peer.call("environment/status") is not None


async def test_file_removed_while_a_handle_reads_it(
    execserver: RunningServer, tmp_path: Path
) -> None:
    target = tmp_path / "vanishing.bin"
    payload = os.urandom(3 * 1024 * 1024)
    target.write_bytes(payload)
    async with connect(execserver.url, handshake=False) as peer:
        await peer.handshake()
        opened = await peer.call("fs/open", {"handleId": "h", "path": f"file://{target}"})
        assert opened["result"] == {"handleId": "h"}
        first = await peer.call("fs/readBlock", {"handleId": "h", "offset": 0, "len": 1024 * 1024})
        target.unlink()
        rest = bytearray(base64.b64decode(first["result"]["chunk"]))
        offset = len(rest)
        while True:
            part = await peer.call(
                "fs/readBlock", {"handleId": "h", "offset": offset, "len": 1024 * 1024}
            )
            chunk = base64.b64decode(part["result"]["chunk"])
            rest += chunk
            offset += len(chunk)
            if part["result"]["eof"]:
                break
        assert bytes(rest) == payload  # the open descriptor keeps the data alive
        missing = await peer.call("fs/readFile", {"path": f"file://{target}"})
        assert missing["error"]["code"] == -32004
        assert (await peer.call("fs/close", {"handleId": "h"}))["result"] == {}


async def test_sigterm_with_many_live_processes_reaps_all_and_exits_0() -> None:
    from tests.support.servers import start_server

    count = pick(ci=100, full=100)
    async with start_server("execserver", extra=["--log-level", "warning"]) as server:
        pid = server.process.pid
        async with connect(server.url, handshake=False) as peer:
            await peer.handshake()
            for i in range(count):
                shape = (
                    ["sh", "-c", "setsid sleep 1000 & exec sleep 1000"]
                    if i % 10 == 0
                    else ["sleep", "1000"]
                )
                reply = await _start(peer, f"live{i}", shape, tty=(i % 7 == 0))
                assert "result" in reply, reply
            assert await wait_until(lambda: len(live_descendants(pid)) >= count, timeout=30)
            everything = [p.pid for p in live_descendants(pid)]
            server.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(server.process.wait(), 30) == 0
        assert not [
            p
            for p in everything
            if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
