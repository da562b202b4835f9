"""Upgrade without downtime (``--state-dir`` + ``--take-over``): real daemons on
127.0.0.1, a real handover of the listening socket and the keepers.

* under a steady load of spawns and reads from two clients (the raw websocket
  client of the tests and the public client library), a second daemon takes
  over: no request fails beyond one reconnect per client, no output is lost
  (complete numbered lines, gap-free seqs), no process dies, the old daemon
  exits 0;
* ``--take-over`` with no daemon serving the state directory starts as usual
  (here after a SIGKILLed daemon: it re-adopts what that one left), and a plain
  start while a daemon serves it is refused;
* a peer of another uid cannot use the control socket, even with its modes
  loosened (SO_PEERCRED), and cannot reach it with them as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from execserver.client import ExecServerClient
from execserver.client.events import Closed, Exited, Output
from tests.support.nobody import run_as_nobody
from tests.support.procinfo import wait_until
from tests.support.rpc import RpcClient, unb64
from tests.support.servers import RunningServer
from tests.support.state_dir import alive, keepers, state_daemon

ENV = {"PATH": "/usr/bin:/bin"}
SESSION_TTL = 60
# Lines of each short process of the load; rounds each worker runs on the new daemon.
LINES = 30
ROUNDS_BEFORE = 3
ROUNDS_AFTER = 3
SERVICE_RESTART = 1012


def _daemon(
    state_dir: Path, extra: Sequence[str] = ()
) -> contextlib.AbstractAsyncContextManager[RunningServer]:
    return state_daemon(state_dir, ttl=SESSION_TTL, extra=extra)


def _child_pid(state_dir: Path, process_id: str) -> int:
    for meta in state_dir.glob("*/*/meta.json"):
        body = json.loads(meta.read_text())
        if body["process_id"] == process_id:
            return int(body["pid"])
    raise AssertionError(f"no keeper holds {process_id}")


def _alive(pid: int) -> bool:
    with contextlib.suppress(psutil.NoSuchProcess):
        return alive(psutil.Process(pid))
    return False


# ---- the raw client: the protocol as execserver promises it at a 1012 -----------------


class RawDriver:
    """The raw websocket client, reconnecting as a client of the protocol may: on a
    close with 1012 it resumes the session on a new connection and sends again
    every request that got no answer (1012 says none of them was executed).
    Any other loss, and any error answer, is a failure."""

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self.reconnects = 0
        self.failures: list[str] = []
        self.session_id: str | None = None
        self._lock = asyncio.Lock()
        self._http = aiohttp.ClientSession()
        self.rpc: RpcClient | None = None

    async def open(self) -> None:
        ws = await self._http.ws_connect(self.url, max_msg_size=0)
        rpc = RpcClient(ws, name=self.name)
        reply = await rpc.handshake(resume=self.session_id)
        assert reply.ok, reply
        self.session_id = rpc.session_id
        self.rpc = rpc

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        while True:
            rpc = self.rpc
            assert rpc is not None
            try:
                pending = await rpc.send_request(method, params)
                reply = await asyncio.wait_for(pending, 60)
            except (ConnectionError, aiohttp.ClientError, RuntimeError) as exc:
                await self._reconnect(rpc, f"{method}: {exc!r}")
                continue
            if not reply.ok:
                self.failures.append(f"{method} {params.get('processId')}: {reply['error']}")
                raise AssertionError(self.failures[-1])
            return reply.result

    async def _reconnect(self, lost: RpcClient, what: str) -> None:
        async with self._lock:
            if self.rpc is not lost:
                return  # another call already reconnected
            closing = await lost.closed()
            if closing.type is not aiohttp.WSMsgType.CLOSE or closing.data != SERVICE_RESTART:
                self.failures.append(f"{what}: connection lost without 1012: {closing!r}")
                raise AssertionError(self.failures[-1])
            self.reconnects += 1
            with contextlib.suppress(Exception):
                await lost.aclose()
            await self.open()

    async def aclose(self) -> None:
        if self.rpc is not None:
            with contextlib.suppress(Exception):
                await self.rpc.aclose()
        await self._http.close()


@dataclass
class Followed:
    """Every chunk of one process as a client read it, and how it ended."""

    chunks: list[tuple[int, bytes]] = field(default_factory=list)
    exit_code: int | None = None

    def text(self) -> str:
        return b"".join(data for _, data in self.chunks).decode()

    def assert_gap_free(self, label: str) -> None:
        seqs = [seq for seq, _ in self.chunks]
        assert seqs == sorted(set(seqs)), f"{label}: duplicated or out of order: {seqs[:20]}"
        # Every seq up to the last chunk is a chunk, except at most the exit's.
        holes = set(range(1, seqs[-1] + 1)) - set(seqs) if seqs else set()
        assert len(holes) <= 1, f"{label}: missing seqs {sorted(holes)[:10]}"


async def _raw_follow(raw: RawDriver, process_id: str) -> Followed:
    """process/read from seq 0 until closed, long-polling."""
    seen = Followed()
    after = 0
    while True:
        params = {"processId": process_id, "afterSeq": after, "waitMs": 500}
        result = await raw.call("process/read", params)
        for chunk in result["chunks"]:
            seen.chunks.append((chunk["seq"], unb64(chunk["chunk"])))
        if result["chunks"]:
            after = result["chunks"][-1]["seq"]
        if result["closed"]:
            seen.exit_code = result["exitCode"]
            return seen


def _numbered(prefix: str, count: int) -> str:
    return "".join(f"{prefix}{i}\n" for i in range(1, count + 1))


def _short(prefix: str, code: int) -> list[str]:
    return ["sh", "-c", f"for i in $(seq 1 {LINES}); do echo {prefix}$i; done; exit {code}"]


def _ticker(prefix: str, flag: Path) -> list[str]:
    # Runs across the handover; prints until the test lets it finish.
    script = (
        f"i=0; while [ ! -e {flag} ]; do i=$((i+1)); echo {prefix}$i; sleep 0.02; done; "
        f"echo {prefix}end; exit 7"
    )
    return ["sh", "-c", script]


def _assert_ticker(seen_text: str, prefix: str) -> None:
    lines = seen_text.splitlines()
    assert lines[-1] == f"{prefix}end", lines[-3:]
    numbers = lines[:-1]
    assert numbers == [f"{prefix}{i}" for i in range(1, len(numbers) + 1)], "lost or torn lines"


@dataclass
class Load:
    """Rounds done by each worker; the handover's moment, once it is over."""

    rounds: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    handed_over: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def done_round(self, worker: str) -> None:
        self.rounds[worker] = self.rounds.get(worker, 0) + 1
        if self.handed_over.is_set():
            self.after[worker] = self.after.get(worker, 0) + 1
        async with self.changed:
            self.changed.notify_all()

    async def until(self, ready: Any) -> None:
        async with asyncio.timeout(120), self.changed:
            await self.changed.wait_for(ready)


async def _raw_spawner(raw: RawDriver, load: Load) -> int:
    rounds = 0
    while not load.stop.is_set():
        process_id = f"raw-{rounds}"
        params = {
            "processId": process_id,
            "argv": _short(f"{process_id}-", rounds % 50),
            "cwd": "file:///tmp",
            "env": ENV,
            "tty": False,
        }
        await raw.call("process/start", params)
        seen = await _raw_follow(raw, process_id)
        seen.assert_gap_free(process_id)
        assert seen.text() == _numbered(f"{process_id}-", LINES), process_id
        assert seen.exit_code == rounds % 50
        rounds += 1
        await load.done_round("raw")
    return rounds


async def _lib_spawner(client: ExecServerClient, load: Load) -> int:
    rounds = 0
    while not load.stop.is_set():
        prefix = f"lib-{rounds}-"
        done = await client.run(_short(prefix, rounds % 50), cwd="/tmp", env=ENV, inherit_env=False)
        assert done.stdout == _numbered(prefix, LINES).encode(), prefix
        assert done.exit_code == rounds % 50
        rounds += 1
        await load.done_round("lib")
    return rounds


async def _lib_follow(client: ExecServerClient, argv: list[str], process_id: str) -> Followed:
    proc = await client.start_process(
        argv, cwd="/tmp", env=ENV, inherit_env=False, process_id=process_id
    )
    seen = Followed()
    async for event in proc:
        if isinstance(event, Output):
            seen.chunks.append((event.seq, event.data))
        elif isinstance(event, Exited):
            seen.exit_code = event.exit_code
        elif isinstance(event, Closed):
            break
    return seen


async def test_a_second_daemon_takes_over_under_load_losing_no_request_and_no_output(
    state_dir: Path, tmp_path: Path
) -> None:
    flag = tmp_path / "finish"
    load = Load()
    async with _daemon(state_dir) as old:
        raw = RawDriver(old.url, "raw")
        await raw.open()
        # A second raw client: it streams one long process by long-polls.
        follower = RawDriver(old.url, "raw-ticker")
        await follower.open()
        client = await ExecServerClient.connect(old.url, client_name="lib")
        try:
            await follower.call(
                "process/start",
                {
                    "processId": "ticker",
                    "argv": _ticker("raw", flag),
                    "cwd": "file:///tmp",
                    "env": ENV,
                    "tty": False,
                },
            )
            raw_ticker = asyncio.create_task(_raw_follow(follower, "ticker"))
            lib_ticker = asyncio.create_task(
                _lib_follow(client, _ticker("lib", flag), "lib-ticker")
            )
            workers = [
                asyncio.create_task(_raw_spawner(raw, load)),
                asyncio.create_task(_lib_spawner(client, load)),
            ]
            await load.until(
                lambda: min(load.rounds.get(w, 0) for w in ("raw", "lib")) >= ROUNDS_BEFORE
            )
            await wait_until(lambda: len(keepers(state_dir)) >= 2, 10)
            tickers = {pid: _child_pid(state_dir, pid) for pid in ("ticker", "lib-ticker")}
            keepers_before = {k.pid for k in keepers(state_dir)}

            async with _daemon(state_dir, ["--take-over"]) as new:
                # The new one printed its URL: it has re-adopted and accepts, on the
                # very socket the old one listened on.
                assert new.url == old.url
                assert await asyncio.wait_for(old.process.wait(), 60) == 0
                load.handed_over.set()
                await load.until(
                    lambda: min(load.after.get(w, 0) for w in ("raw", "lib")) >= ROUNDS_AFTER
                )
                load.stop.set()
                rounds = await asyncio.gather(*workers)
                # No process died: the tickers run on, the same pids, under the same keepers.
                assert all(_alive(pid) for pid in tickers.values())
                assert tickers == {pid: _child_pid(state_dir, pid) for pid in tickers}
                assert keepers_before <= {k.pid for k in keepers(state_dir)}
                flag.touch()
                raw_seen, lib_seen = await asyncio.gather(raw_ticker, lib_ticker)
                assert raw.failures == [] and follower.failures == []
                # One reconnect per client (the handover's), no more.
                assert (raw.reconnects, follower.reconnects, client.reconnects) == (1, 1, 1)
                for label, seen in (("raw", raw_seen), ("lib", lib_seen)):
                    assert seen.exit_code == 7, label
                    seen.assert_gap_free(f"{label} ticker")
                    _assert_ticker(seen.text(), label)
                assert min(rounds) >= ROUNDS_BEFORE + ROUNDS_AFTER
        finally:
            await client.close()
            await raw.aclose()
            await follower.aclose()


async def test_take_over_with_no_daemon_running_starts_as_usual_and_readopts(
    state_dir: Path,
) -> None:
    async with _daemon(state_dir) as first:
        raw = RawDriver(first.url, "orphaned")
        try:
            await raw.open()
            script = "echo before; read line; echo after $line; exit 4"
            await raw.call(
                "process/start",
                {
                    "processId": "kept",
                    "argv": ["sh", "-c", script],
                    "cwd": "file:///tmp",
                    "env": ENV,
                    "tty": False,
                    "pipeStdin": True,
                },
            )
            assert raw.rpc is not None
            await raw.rpc.wait_output("kept", b"before\n")
            # A crash leaves the control socket's file behind, with nobody listening.
            os.kill(first.process.pid, signal.SIGKILL)
            await asyncio.wait_for(first.process.wait(), 10)
            assert (state_dir / "control.sock").exists()
        finally:
            await raw.aclose()
    async with _daemon(state_dir, ["--take-over"]) as second:
        peer = RawDriver(second.url, "resumer")
        peer.session_id = raw.session_id
        try:
            await peer.open()
            await peer.call(
                "process/write",
                {"processId": "kept", "chunk": "eWVzCg==", "writeId": "w1"},
            )
            seen = await _raw_follow(peer, "kept")
            assert seen.text() == "before\nafter yes\n"
            assert seen.exit_code == 4
        finally:
            await peer.aclose()
        # While it serves the state directory, a daemon started without --take-over
        # is refused (two daemons would take the keepers from each other).
        refused = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "execserver",
            "serve",
            "--listen",
            "ws://127.0.0.1:0",
            "--state-dir",
            str(state_dir),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "EXECSERVER_STARTUP_PROBE": "0"},
        )
        out, err = await asyncio.wait_for(refused.communicate(), 60)
        assert refused.returncode == 1, err
        assert b"pass --take-over" in err
        assert out == b""


# What a peer of another uid tries: ask for a take-over, print what it got.
_INTRUDER = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(20)
try:
    sock.connect(sys.argv[1])
except PermissionError:
    print("EACCES")
    sys.exit(0)
try:
    sock.sendall(b'{"op": "take-over", "pid": 1, "version": "x"}\\n')
except (BrokenPipeError, ConnectionResetError):
    pass  # refused before it read the request: the refusal is still to be read
data, fds, _, _ = socket.recv_fds(sock, 65536, 16)
print("fds", len(fds), data.decode().strip())
"""


def _as_nobody(path: str) -> str:
    return run_as_nobody(_INTRUDER, path)


def _reachable_link(state_dir: Path, tmp_path: Path) -> Path:
    """The control socket, hard-linked into a directory anyone can search (the
    socket's own mode still applies: a link shares the inode)."""
    control = state_dir / "control.sock"
    assert control.stat().st_mode & 0o777 == 0o600
    assert state_dir.stat().st_mode & 0o777 == 0o700
    # Beside pytest's directories (0700 all the way up), on the same file system.
    open_dir = Path(tempfile.mkdtemp(prefix="control-", dir=tmp_path.anchor + "tmp"))
    open_dir.chmod(0o777)
    link = open_dir / "control.sock"
    os.link(control, link)
    return link


async def test_a_peer_of_another_uid_cannot_use_the_control_socket(
    state_dir: Path, tmp_path: Path
) -> None:
    assert os.getuid() == 0, "the test makes a child of another uid: it runs as root"
    async with _daemon(state_dir) as server:
        link = await asyncio.to_thread(_reachable_link, state_dir, tmp_path)
        # As the modes are, nobody cannot even connect.
        assert await asyncio.to_thread(_as_nobody, str(link)) == "EACCES"
        # With the socket's own mode loosened too, the uid check still refuses.
        os.chmod(link, 0o666)
        answer = await asyncio.to_thread(_as_nobody, str(link))
        assert answer.startswith("fds 0 "), answer
        assert json.loads(answer.removeprefix("fds 0 "))["op"] == "refused"
        os.chmod(link, 0o600)
        # The daemon handed nothing over: it still accepts and serves.
        raw = RawDriver(server.url, "after")
        try:
            await raw.open()
            result = await raw.call(
                "process/start",
                {
                    "processId": "p",
                    "argv": ["true"],
                    "cwd": "file:///tmp",
                    "env": ENV,
                    "tty": False,
                },
            )
            assert result["processId"] == "p"
            await _raw_follow(raw, "p")
        finally:
            await raw.aclose()
        assert server.process.returncode is None
        shutil.rmtree(link.parent)
