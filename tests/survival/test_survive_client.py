"""Through the client library: a ``run()`` and a streaming ``start_process`` in
flight while the daemon is SIGKILLed and started again (same port, same
``--state-dir``) complete with every line, in order, the right exit codes, and
no exception raised to the caller: the client reconnects and resumes by itself.

Each command prints in three phases gated by files the test creates: before the
kill, while no daemon runs (the keepers journal it), and after the restart, so
each phase is known to have happened where it should.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import pytest

from execserver.client import ClientState, Closed, ExecServerClient, Exited, Output
from execserver.client.process import RemoteProcess
from tests.support.procinfo import wait_until
from tests.support.state_dir import free_port, kill9, state_daemon

# Lines printed before the kill, while the daemon is down, after the restart.
BEFORE, DOWN, AFTER = 60, 180, 60
LINES = BEFORE + DOWN + AFTER
TTL = 60.0


def _script(prefix: str, gates: Path, code: int) -> str:
    """Numbered lines ``<prefix><n>``; every tenth also as ``<prefix>e<n>`` on stderr.
    Between the phases it waits for the test's gate file and says it got there."""
    g = shlex.quote(str(gates))
    # A line every 2 ms on average: ten, then a 20 ms pause (one `sleep` forked per
    # ten lines, not per line). The gates are looked for every 100 ms: each look
    # forks a `sleep` too.
    emit = (
        f"echo {prefix}$i; [ $((i % 10)) -ne 0 ] || echo {prefix}e$i >&2; "
        f"[ $((i % 10)) -ne 0 ] || sleep 0.02"
    )
    return (
        f"for i in $(seq 1 {BEFORE}); do {emit}; done; "
        f"until [ -e {g}/down ]; do sleep 0.1; done; "
        f"for i in $(seq {BEFORE + 1} {BEFORE + DOWN}); do {emit}; done; "
        f"touch {g}/{prefix}.journaled; "
        f"until [ -e {g}/restarted ]; do sleep 0.1; done; "
        f"for i in $(seq {BEFORE + DOWN + 1} {LINES}); do {emit}; done; "
        f"exit {code}"
    )


def _expected(prefix: str, sep: str, *, stderr: bool) -> str:
    numbers = range(10, LINES + 1, 10) if stderr else range(1, LINES + 1)
    middle = "e" if stderr else ""
    return "".join(f"{prefix}{middle}{i}{sep}" for i in numbers)


async def _collect(proc: RemoteProcess) -> tuple[dict[str, bytes], list[object]]:
    """The whole stream as the caller sees it: bytes per stream, and the end events."""
    out: dict[str, bytes] = {}
    ends: list[object] = []
    async for event in proc:
        if isinstance(event, Output):
            out[event.stream] = out.get(event.stream, b"") + event.data
        else:
            ends.append(event)
    return out, ends


@pytest.mark.parametrize("tty", [False, True], ids=["pipes", "pty"])
async def test_run_and_stream_in_flight_survive_a_daemon_kill_and_restart(
    state_dir: Path, tmp_path: Path, tty: bool
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    port = free_port()
    states: list[ClientState] = []
    printed: list[bytes] = []
    async with state_daemon(state_dir, port, ttl=TTL) as first:
        # The recovery must outlast the restart (the default does as well; said
        # here because the test depends on it).
        client = await ExecServerClient.connect(first.url, recovery_deadline=TTL)
        client.add_state_listener(lambda new, reason: states.append(new))
        run = asyncio.create_task(
            client.run(
                ["sh", "-c", _script("r", gates, 3)],
                cwd="/tmp",
                tty=tty,
                on_stdout=printed.append,
            )
        )
        proc = await client.start_process(["sh", "-c", _script("s", gates, 5)], cwd="/tmp", tty=tty)
        stream = asyncio.create_task(_collect(proc))
        # The first phase reached the client over the first daemon.
        assert await wait_until(lambda: f"r{BEFORE}".encode() in b"".join(printed), 30)
        assert await wait_until(lambda: proc.last_seq > 0, 30)
        await kill9(first)
    # No daemon: let both commands print their second phase into the keepers'
    # journals, and wait until they have.
    (gates / "down").touch()
    assert await wait_until(lambda: (gates / "r.journaled").exists(), 30)
    assert await wait_until(lambda: (gates / "s.journaled").exists(), 30)
    assert not run.done() and not stream.done()
    async with state_daemon(state_dir, port, ttl=TTL):
        assert await wait_until(lambda: client.state is ClientState.CONNECTED, TTL)
        (gates / "restarted").touch()
        async with asyncio.timeout(60):
            result = await run
            out, ends = await stream
        await client.close()

    assert result.exit_code == 3
    if tty:
        # A terminal has one stream: stdout and stderr interleave in it, each in order.
        assert set(out) == {"pty"}
        for prefix, text in (("r", result.pty), ("s", out["pty"])):
            assert _streams(prefix, text.decode()) == (
                _expected(prefix, "\r\n", stderr=False),
                _expected(prefix, "\r\n", stderr=True),
            )
    else:
        assert result.stdout.decode() == _expected("r", "\n", stderr=False)
        assert result.stderr.decode() == _expected("r", "\n", stderr=True)
        assert out["stdout"].decode() == _expected("s", "\n", stderr=False)
        assert out["stderr"].decode() == _expected("s", "\n", stderr=True)
    assert [type(e) for e in ends] == [Exited, Closed]
    exited = ends[0]
    assert isinstance(exited, Exited) and exited.exit_code == 5
    # One loss, one resume, and the client never gave up.
    assert client.reconnects == 1
    assert ClientState.FAILED not in states
    assert states[:2] == [ClientState.RECOVERING, ClientState.CONNECTED]


def _streams(prefix: str, text: str) -> tuple[str, str]:
    """A terminal's text split back into the script's stdout and stderr lines."""
    lines = text.splitlines(keepends=True)
    err = [line for line in lines if line.startswith(f"{prefix}e")]
    out = [line for line in lines if not line.startswith(f"{prefix}e")]
    return "".join(out), "".join(err)
