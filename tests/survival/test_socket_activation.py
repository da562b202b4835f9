"""systemd socket activation (sd_listen_fds): the daemon serves the listening
socket it was passed instead of binding ``--listen``, and, with ``--state-dir``,
a restart behind that socket (``systemctl restart`` of a socket-activated unit)
loses no connection attempt and no process: a client connecting while no daemon
runs waits in the socket's backlog and is served by the next daemon, which has
re-adopted the keepers.

systemd itself is not needed: the test holds the listening socket as systemd
does and starts each daemon with it as fd 3, ``LISTEN_PID`` and ``LISTEN_FDS``
set the way sd_listen_fds(3) reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from execserver.client import ExecServerClient
from execserver.client.events import Closed, Exited, Output
from tests.support.state_dir import end_keepers

# Puts the passed socket at fd 3 (and only there, as systemd does) and execs the
# daemon under its own pid, so that LISTEN_PID names the daemon (sh cannot: dash
# takes single-digit fds only).
_ACTIVATE = (
    "import os, sys; fd = int(sys.argv[1]); os.dup2(fd, 3); fd == 3 or os.close(fd); "
    "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1'); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


@contextlib.asynccontextmanager
async def _activated(
    listener: socket.socket, *flags: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """A daemon started as systemd would start it for ``listener``; yields it and
    the URL it printed."""
    fd = listener.fileno()
    daemon = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        "-c",
        _ACTIVATE,
        str(fd),
        sys.executable,
        "-m",
        "execserver",
        "serve",
        "--listen",
        "ws://127.0.0.1:1",  # what the unit's ExecStart says; the passed socket wins
        "--log-level",
        "warning",
        *flags,
        pass_fds=(fd,),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "EXECSERVER_STARTUP_PROBE": "0"},
    )
    try:
        assert daemon.stdout is not None
        line = await asyncio.wait_for(daemon.stdout.readline(), 60)
        yield daemon, line.decode().strip()
    finally:
        if daemon.returncode is None:
            daemon.send_signal(signal.SIGTERM)
            await asyncio.wait_for(daemon.wait(), 60)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield sock
    finally:
        sock.close()


async def test_a_socket_activated_daemon_serves_the_socket_it_was_passed(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    async with _activated(listener) as (_, url):
        assert url == f"ws://127.0.0.1:{port}"
        client = await ExecServerClient.connect(url)
        try:
            done = await client.run(["sh", "-c", "echo $LISTEN_FDS-$LISTEN_PID-up"], cwd="/tmp")
        finally:
            await client.close()
    # The activation variables are the daemon's alone: its children never see them.
    assert done.stdout == b"--up\n"


async def test_a_restart_behind_the_activation_socket_keeps_processes_and_queued_clients(
    listener: socket.socket, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    flags = ("--state-dir", str(state), "--drain-timeout", "0", "--session-ttl", "60")
    gate = tmp_path / "go"
    script = f"echo before; while [ ! -e {gate} ]; do sleep 0.02; done; echo after; exit 9"
    try:
        async with _activated(listener, *flags) as (first, url):
            client = await ExecServerClient.connect(url, recovery_deadline=60)
            proc = await client.start_process(["sh", "-c", script], cwd="/tmp")
            seen = b""
            async for event in proc:
                assert isinstance(event, Output), event
                seen += event.data
                if seen == b"before\n":
                    break
            # systemctl restart: SIGTERM, and no daemon until the next one starts.
            first.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(first.wait(), 60) == 0
        # Nobody accepts now, yet the socket is open: a new client's connection is
        # taken into the backlog, and its handshake waits for the next daemon.
        newcomer = asyncio.create_task(ExecServerClient.connect(url))
        await asyncio.sleep(0.5)
        assert not newcomer.done()
        gate.touch()
        async with _activated(listener, *flags) as (_, again):
            assert again == url
            late = await asyncio.wait_for(newcomer, 60)
            try:
                assert (await late.run(["echo", "queued"], cwd="/tmp")).stdout == b"queued\n"
            finally:
                await late.close()
            ends: list[object] = []
            async with asyncio.timeout(60):
                async for event in proc:
                    if isinstance(event, Output):
                        seen += event.data
                    else:
                        ends.append(event)
            await client.close()
        assert seen == b"before\nafter\n"
        assert [type(e) for e in ends] == [Exited, Closed]
        assert isinstance(ends[0], Exited) and ends[0].exit_code == 9
        assert client.reconnects == 1
    finally:
        await end_keepers(state)
