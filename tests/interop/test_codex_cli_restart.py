"""The real codex 0.169.0 CLI finishes its turn across a daemon crash: its command
(sandboxed, as the CLI's default workspace-write profile asks) is held by a
keeper (``--state-dir``), the daemon is SIGKILLed while the command runs and
started again on the same address, and the CLI, reconnecting and resuming by
itself, reads the rest of the command's output and its exit.

The CLI talks to the daemon through the harness's logging proxy, which relays
each websocket to the daemon's address: when the daemon dies the CLI's
connection ends, and its reconnects reach whichever daemon listens there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.interop.codex_cli.harness import Rig, rig
from tests.interop.codex_cli.mock_model import Item, MockModel, exec_command, message, write_stdin
from tests.interop.test_codex_cli import SESSION_ID, finished, output, started
from tests.support.servers import reference_binary, start_server
from tests.support.state_dir import end_keepers, free_port

# Under pytest-xdist (`make test`) the CLI's turns run one at a time, on one worker:
# its workspace-write sandbox makes /tmp writable, and two daemons sandboxing /tmp
# at once race on its protected-name mount points (one daemon removed /tmp/.codex
# as another's bwrap bound it: "Can't bind mount /oldroot/tmp/.codex").
pytestmark = [pytest.mark.interop, pytest.mark.xdist_group("codex-cli")]


@pytest.fixture
async def restartable(tmp_path: Path) -> AsyncIterator[tuple[Rig, list[str]]]:
    state = tmp_path / "state"
    port = free_port()
    args = ["--state-dir", str(state), "--listen", f"ws://127.0.0.1:{port}", "--session-ttl", "60"]
    try:
        async with rig("execserver", "websocket", reference_binary(), server_args=args) as r:
            yield r, args
    finally:
        await end_keepers(state)


async def test_the_cli_finishes_its_turn_across_a_daemon_crash_and_restart(
    restartable: tuple[Rig, list[str]],
) -> None:
    cli, args = restartable
    gate = cli.workspace / "go"
    cmd = f"echo before; while [ ! -e {gate} ]; do sleep 0.05; done; echo after; exit 3"
    restarted = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def restart(stack: contextlib.AsyncExitStack) -> None:
        await asyncio.wait_for(cli.servers[0].process.wait(), 10)
        await asyncio.sleep(0.5)  # the CLI meets a daemon that is gone, for a while
        await stack.enter_async_context(start_server("execserver", args, env=cli.cli_env()))
        gate.touch()  # the rest of the output is written while the new daemon serves
        restarted.set()

    async with contextlib.AsyncExitStack() as stack:

        def crash_then_poll(model: MockModel) -> list[Item]:
            match = SESSION_ID.search(model.tool_outputs().get("c1", ""))
            if match is None:
                return [message("no session id")]
            # SIGKILL while the command runs; a new daemon comes up a moment later.
            os.kill(cli.servers[0].process.pid, signal.SIGKILL)
            tasks.append(asyncio.create_task(restart(stack)))
            return [write_stdin("c2", session_id=int(match[1]), chars="", yield_time_ms=10000)]

        result = await cli.run(
            [
                [exec_command("c1", cmd=cmd, yield_time_ms=1000)],
                crash_then_poll,
                [message("done")],
            ]
        )
        await asyncio.gather(*tasks)
        assert restarted.is_set()
    finished(result)
    assert "before" in output(result, "c1"), output(result, "c1")
    text = output(result, "c2")
    assert "after" in text and "Process exited with code 3" in text, result.describe()
    # The command ran sandboxed on the executor, once, and came through the crash.
    started(result, cmd)


async def test_the_cli_finishes_its_turn_across_a_take_over(
    restartable: tuple[Rig, list[str]],
) -> None:
    # An upgrade: a second daemon takes the listening socket and the keepers over
    # while the command runs; the old one closes the CLI's connection with 1012
    # (the harness's relay passes the code on).
    cli, args = restartable
    gate = cli.workspace / "go"
    cmd = f"echo before; while [ ! -e {gate} ]; do sleep 0.05; done; echo after; exit 5"
    tasks: list[asyncio.Task[None]] = []

    async def take_over(stack: contextlib.AsyncExitStack) -> None:
        await stack.enter_async_context(
            start_server("execserver", [*args, "--take-over"], env=cli.cli_env())
        )
        await asyncio.wait_for(cli.servers[0].process.wait(), 30)
        gate.touch()

    async with contextlib.AsyncExitStack() as stack:

        def take_over_then_poll(model: MockModel) -> list[Item]:
            match = SESSION_ID.search(model.tool_outputs().get("c1", ""))
            if match is None:
                return [message("no session id")]
            tasks.append(asyncio.create_task(take_over(stack)))
            return [write_stdin("c2", session_id=int(match[1]), chars="", yield_time_ms=10000)]

        result = await cli.run(
            [
                [exec_command("c1", cmd=cmd, yield_time_ms=1000)],
                take_over_then_poll,
                [message("done")],
            ]
        )
        await asyncio.gather(*tasks)
        assert cli.servers[0].process.returncode == 0  # the old daemon handed over
    finished(result)
    text = output(result, "c2")
    assert "after" in text and "Process exited with code 5" in text, result.describe()
    started(result, cmd)
