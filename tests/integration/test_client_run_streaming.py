"""``run``'s streaming callbacks, timing fields and idle timeout, and
``execserver run --timeout``, against both servers."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client import CommandIdleTimeout, CommandTimeout, ExecServerClient, sync
from tests.integration.test_client_cli import run_cli
from tests.support.procinfo import gone, processes_with, sleep_marker
from tests.support.servers import RunningServer


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as c:
        yield c


async def test_callbacks_get_each_stream_in_order_as_bytes(
    client: ExecServerClient, tmp_path: Path
) -> None:
    seen: list[tuple[str, bytes]] = []
    script = "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done"
    result = await client.run(
        script,
        cwd=tmp_path,
        on_stdout=lambda data: seen.append(("out", data)),
        on_stderr=lambda data: seen.append(("err", data)),
    )
    out = b"".join(data for name, data in seen if name == "out")
    err = b"".join(data for name, data in seen if name == "err")
    assert out == result.stdout == b"out1\nout2\nout3\n"
    assert err == result.stderr == b"err1\nerr2\nerr3\n"
    assert all(isinstance(data, bytes) for _, data in seen)


async def test_text_callbacks_get_str_without_splitting_a_character(
    client: ExecServerClient, tmp_path: Path
) -> None:
    pieces: list[str] = []
    # "é" is two bytes; the sleep makes the server send them in two chunks.
    script = "printf '\\303'; sleep 0.2; printf '\\251!\\n'"
    result = await client.run(script, cwd=tmp_path, text=True, on_stdout=pieces.append)
    assert all(isinstance(piece, str) for piece in pieces)
    assert "".join(pieces) == result.stdout == "é!\n"


async def test_a_tty_command_streams_to_on_stdout(client: ExecServerClient, tmp_path: Path) -> None:
    pieces: list[bytes] = []
    result = await client.run("echo on-the-tty", cwd=tmp_path, tty=True, on_stdout=pieces.append)
    assert b"".join(pieces) == result.pty
    assert b"on-the-tty" in result.pty


async def test_a_failing_callback_terminates_the_command_and_is_raised(
    client: ExecServerClient, tmp_path: Path
) -> None:
    mark = sleep_marker()

    def explode(data: bytes) -> None:
        raise RuntimeError(f"callback saw {data!r}")

    with pytest.raises(RuntimeError, match="callback saw"):
        await client.run(f"echo first; exec sleep {mark}", cwd=tmp_path, on_stdout=explode)
    assert await gone(mark), processes_with(mark)


async def test_result_carries_duration_started_at_and_no_pid(
    client: ExecServerClient, tmp_path: Path
) -> None:
    before = datetime.datetime.now(datetime.UTC)
    result = await client.run(["sleep", "0.2"], cwd=tmp_path)
    after = datetime.datetime.now(datetime.UTC)
    assert result.started_at is not None
    assert before <= result.started_at <= after
    assert result.started_at.tzinfo is datetime.UTC
    assert result.duration > 0
    assert result.started_at + datetime.timedelta(seconds=result.duration) <= after
    assert result.pid is None  # the wire carries no pid


async def test_idle_timeout_terminates_a_silent_command(
    client: ExecServerClient, tmp_path: Path
) -> None:
    mark = sleep_marker()
    with pytest.raises(CommandIdleTimeout) as caught:
        await client.run(
            f"echo before; exec sleep {mark}", cwd=tmp_path, idle_timeout=1, timeout=120
        )
    assert caught.value.stdout == b"before\n"
    assert caught.value.idle_timeout == 1
    assert isinstance(caught.value, CommandTimeout)
    assert "idle timeout" in str(caught.value)
    assert await gone(mark), processes_with(mark)


async def test_the_wall_clock_timeout_is_not_reported_as_idle(
    client: ExecServerClient, tmp_path: Path
) -> None:
    mark = sleep_marker()
    # Output keeps coming, so only the wall-clock timeout can end it.
    script = f"(while :; do echo tick; sleep 0.1; done) & exec sleep {mark}"
    with pytest.raises(CommandTimeout) as caught:
        await client.run(script, cwd=tmp_path, timeout=1, idle_timeout=60)
    assert not isinstance(caught.value, CommandIdleTimeout)
    stdout = caught.value.stdout
    assert isinstance(stdout, bytes) and stdout.startswith(b"tick\n")
    assert await gone(mark), processes_with(mark)


async def test_output_keeps_the_idle_timeout_from_firing(
    client: ExecServerClient, tmp_path: Path
) -> None:
    script = "for i in 1 2 3 4 5 6; do echo $i; sleep 0.5; done"
    result = await client.run(script, cwd=tmp_path, idle_timeout=2.5)
    assert result.stdout == b"1\n2\n3\n4\n5\n6\n"


async def test_idle_timeout_must_be_positive(client: ExecServerClient, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="idle_timeout"):
        await client.run(["true"], cwd=tmp_path, idle_timeout=0)


async def test_the_sync_twin_streams_and_times_out(
    any_server: RunningServer, tmp_path: Path
) -> None:
    def blocking() -> tuple[list[str], str, float]:
        pieces: list[str] = []
        with sync.connect(any_server.url) as c:
            result = c.run("echo a; echo b", cwd=tmp_path, text=True, on_stdout=pieces.append)
            try:
                c.run(["sleep", "600"], cwd=tmp_path, idle_timeout=0.5)
            except CommandIdleTimeout as exc:
                idle = exc.idle_timeout
            return pieces, result.stdout, idle

    pieces, stdout, idle = await asyncio.to_thread(blocking)
    assert "".join(pieces) == stdout == "a\nb\n"
    assert idle == 0.5


async def test_cli_run_timeout_terminates_and_exits_124(
    any_server: RunningServer, tmp_path: Path
) -> None:
    mark = sleep_marker()
    code, out, err = await run_cli(
        "run", any_server.url, "--cwd", str(tmp_path), "--timeout", "1", "--",
        "sh", "-c", f"echo started; exec sleep {mark}",
    )  # fmt: skip
    assert code == 124, err
    assert out == b"started\n"
    assert b"timed out after 1 s" in err
    assert await gone(mark), processes_with(mark)


async def test_cli_run_timeout_rejects_a_non_number(any_server: RunningServer) -> None:
    code, _, err = await run_cli("run", any_server.url, "--timeout", "soon", "--", "true")
    assert code == 2
    assert b"--timeout" in err
