"""``execserver supervise serve ...``: what stands between tini and the daemon in a
container, so that a daemon's death does not end the container and its keepers.

* the daemon is SIGKILLed: the supervisor starts it again on the same address
  and state directory, and a client resumes its session and reads its process
  to the end; SIGTERM then stops the daemon and the supervisor exits 0;
* the daemon hands over to a successor (``--take-over``) and exits 0: the
  supervisor stays while the successor serves, and on SIGTERM stops it too;
* a daemon that cannot start is not retried for ever: the supervisor gives up
  with its exit status.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import psutil

from tests.support.procinfo import wait_until
from tests.support.rpc import connect, unb64
from tests.support.state_dir import free_port, read_until_closed, state_daemon

ENV = {"PATH": "/usr/bin:/bin"}


@contextlib.asynccontextmanager
async def _supervisor(args: Sequence[str]) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "execserver",
        "supervise",
        "serve",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        env={**os.environ, "EXECSERVER_STARTUP_PROBE": "0"},
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)


def _daemons(supervisor: asyncio.subprocess.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.NoSuchProcess):
        return [
            p
            for p in psutil.Process(supervisor.pid).children()
            if "serve" in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE
        ]
    return []


async def _serving(url: str) -> bool:
    with contextlib.suppress(OSError, Exception):
        async with connect(url):
            return True
    return False


async def _until_serving(url: str, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await _serving(url):
        assert loop.time() < deadline, f"nothing serves {url}"
        await asyncio.sleep(0.1)


async def test_a_killed_daemon_is_started_again_and_its_session_resumes(
    state_dir: Path, tmp_path: Path
) -> None:
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    gate = tmp_path / "go"
    args = ["--listen", url, "--state-dir", str(state_dir), "--session-ttl", "60"]
    script = f"echo before; while [ ! -e {gate} ]; do sleep 0.02; done; echo after; exit 4"
    async with _supervisor(args) as supervisor:
        await _until_serving(url)
        async with connect(url) as peer:
            session_id = peer.session_id
            await peer.start("kept", ["sh", "-c", script], env=ENV)
            await peer.wait_output("kept", b"before\n")
        (first,) = _daemons(supervisor)
        first.kill()
        # A new daemon, the supervisor's child again.
        assert await wait_until(lambda: _daemons(supervisor) not in ([], [first]), 30)
        await _until_serving(url)
        gate.touch()
        async with connect(url, resume=session_id) as peer:
            chunks, code = await read_until_closed(peer, "kept")
        assert b"".join(unb64(c["chunk"]) for c in chunks) == b"before\nafter\n"
        assert code == 4
        (second,) = _daemons(supervisor)
        supervisor.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(supervisor.wait(), 30) == 0
        assert await wait_until(lambda: not second.is_running(), 10)


async def test_after_a_handover_the_supervisor_stays_and_stops_the_successor(
    state_dir: Path,
) -> None:
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    args = ["--listen", url, "--state-dir", str(state_dir), "--session-ttl", "60"]
    async with _supervisor(args) as supervisor:
        await _until_serving(url)
        (first,) = _daemons(supervisor)
        # The successor comes from elsewhere (kubectl exec), not from the supervisor.
        async with state_daemon(state_dir, port, ttl=60, extra=["--take-over"]) as successor:
            assert await wait_until(lambda: not first.is_running(), 30)
            await asyncio.sleep(2.5)  # a few of the supervisor's looks at the successor
            assert supervisor.returncode is None
            assert _daemons(supervisor) == []  # it did not start a second daemon
            assert await _serving(url)
            supervisor.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(supervisor.wait(), 30) == 0
            assert await asyncio.wait_for(successor.process.wait(), 30) == 0


async def test_a_daemon_that_cannot_start_is_given_up_on(tmp_path: Path) -> None:
    async with _supervisor(["--listen", "bogus://nowhere"]) as supervisor:
        code = await asyncio.wait_for(supervisor.wait(), 60)
    assert code not in (0, None)
