"""RemoteProcess against real servers (ours and the reference): same behaviour expected."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client import (
    Closed,
    ExecEnvPolicy,
    ExecServerClient,
    Exited,
    Failed,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    Output,
    ProcessEvent,
    RemoteProcess,
)
from tests.support.client_peers import read_only_sandbox
from tests.support.servers import RunningServer

PATH_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as c:
        yield c


async def collect(proc: RemoteProcess) -> list[ProcessEvent]:
    return [event async for event in proc]


async def test_handshake_reports_session_and_environment(client: ExecServerClient) -> None:
    assert client.session_id
    info = client.environment_info
    assert info is not None and info.platform_os == "linux"
    assert (await client.get_environment_info()).shell.name == info.shell.name
    assert await client.environment_status() == "ready"


async def test_run_collects_stdout_stderr_and_exit_code(
    client: ExecServerClient, tmp_path: Path
) -> None:
    result = await client.run(
        ["bash", "-c", "echo out; echo err >&2; exit 3"], cwd=tmp_path, env=PATH_ENV
    )
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert result.sandbox_denied is False


async def test_events_are_in_seq_order_and_closed_is_last(
    client: ExecServerClient, tmp_path: Path
) -> None:
    procs = [
        await client.start_process(["bash", "-c", f"echo {i}; echo {i} >&2"], cwd=tmp_path)
        for i in range(20)
    ]
    for i, events in enumerate(await asyncio.gather(*(collect(p) for p in procs))):
        seqs = [e.seq for e in events if not isinstance(e, Failed)]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert seqs[0] == 1 and isinstance(events[-1], Closed)
        assert sum(isinstance(e, Exited) for e in events) == 1
        data = sorted(e.data for e in events if isinstance(e, Output))
        assert data == [f"{i}\n".encode()] * 2


async def test_write_with_generated_write_id_reaches_stdin_then_interrupt(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(["cat"], cwd=tmp_path, pipe_stdin=True)
    assert await proc.write(b"ping\n") == "accepted"
    assert await proc.write(b"pong\n") == "accepted"  # a fresh writeId: delivered too
    got = b""
    async for event in proc:
        if isinstance(event, Output):
            got += event.data
            if got == b"ping\npong\n":
                await proc.interrupt()
    status = await proc.wait()
    assert got == b"ping\npong\n"
    assert status.exit_code == 130


async def test_repeated_write_id_is_not_delivered_twice(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(["cat"], cwd=tmp_path, pipe_stdin=True)
    assert await proc.write(b"once\n", write_id="w-1") == "accepted"
    assert await proc.write(b"once\n", write_id="w-1") == "accepted"
    assert await proc.write(b"end\n") == "accepted"
    got = b""
    async for event in proc:
        if isinstance(event, Output):
            got += event.data
            if got.endswith(b"end\n"):
                await proc.terminate()
    assert got == b"once\nend\n"


async def test_write_without_pipe_stdin_reports_stdin_closed(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(["sleep", "30"], cwd=tmp_path)
    assert await proc.write(b"x") == "stdinClosed"
    assert await proc.terminate() is True
    assert (await proc.wait()).exit_code == 137
    await proc.wait_closed()


async def test_terminate_after_exit_reports_not_running(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(["true"], cwd=tmp_path)
    await proc.wait_closed()
    assert await proc.terminate() is False


async def test_tty_output_arrives_on_the_pty_stream(
    client: ExecServerClient, tmp_path: Path
) -> None:
    result = await client.run(
        ["bash", "-c", "echo hi; exit 4"], cwd=tmp_path, env=PATH_ENV, tty=True
    )
    assert result.exit_code == 4
    assert result.pty == b"hi\r\n"
    assert result.stdout == b"" and result.stderr == b""


async def test_tty_input_is_echoed_and_eof_ends_cat(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(["cat"], cwd=tmp_path, env=PATH_ENV, tty=True)
    await proc.write(b"abc\n")
    await proc.write(b"\x04")
    got = b"".join([e.data async for e in proc if isinstance(e, Output)])
    assert got.count(b"abc") == 2  # echo + cat's copy
    assert (await proc.wait()).exit_code == 0


INHERIT_ALL = ExecEnvPolicy(
    inherit="all", ignore_default_excludes=False, exclude=[], set={}, include_only=[]
)
TTY_EOF_ROUNDS = 40


async def test_tty_eof_right_after_start_never_hangs_up_the_child(
    client: ExecServerClient, tmp_path: Path
) -> None:
    """cat closes its terminal fds and only then exits. The server sees EIO on the
    pty master in between; were the master closed then, the kernel would hang up
    the terminal and SIGHUP cat (exit 1 with all its output shown). Racy, so many rounds."""
    for attempt in range(TTY_EOF_ROUNDS):
        proc = await client.start_process(["cat"], cwd=tmp_path, env_policy=INHERIT_ALL, tty=True)
        await proc.write(b"a\n\x04")
        got = b"".join([e.data async for e in proc if isinstance(e, Output)])
        status = await proc.wait()
        assert (attempt, got, status.exit_code) == (attempt, b"a\r\na\r\n", 0)


async def test_tty_child_that_closes_its_terminal_runs_to_its_own_exit(
    client: ExecServerClient, tmp_path: Path
) -> None:
    """The same hang-up, made certain: the child lets go of the terminal and keeps working."""
    script = "echo x; exec </dev/null >/dev/null 2>&1; sleep 0.3; exit 3"
    proc = await client.start_process(["bash", "-c", script], cwd=tmp_path, env=PATH_ENV, tty=True)
    got = b"".join([e.data async for e in proc if isinstance(e, Output)])
    assert (got, (await proc.wait()).exit_code) == (b"x\r\n", 3)


async def test_read_from_cursor_returns_retained_output(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(["bash", "-c", "echo a; echo b"], cwd=tmp_path)
    await proc.wait_closed()
    everything = await proc.read(after_seq=0)
    assert b"".join(c.chunk for c in everything.chunks) == b"a\nb\n"
    assert everything.exited and everything.closed and everything.exit_code == 0
    first = everything.chunks[0].seq
    rest = await proc.read(after_seq=first)
    assert all(c.seq > first for c in rest.chunks)


async def test_start_errors_are_typed_and_leave_no_route(
    client: ExecServerClient, tmp_path: Path
) -> None:
    with pytest.raises(InvalidParams, match="argv must not be empty"):
        await client.start_process([], cwd=tmp_path)
    proc = await client.start_process(["true"], cwd=tmp_path, process_id="same")
    await proc.wait_closed()
    with pytest.raises(InvalidRequest, match="process same already exists"):
        await client.start_process(["true"], cwd=tmp_path, process_id="same")
    assert client.process("same") is None
    with pytest.raises(InvalidRequest, match="unknown process id nope"):
        await client.read("nope")


async def test_unknown_method_is_method_not_found(client: ExecServerClient) -> None:
    with pytest.raises(MethodNotFound, match="does not implement `no/such` yet"):
        await client.call_any("no/such", {})


async def test_wait_returns_exit_status_without_a_consumer(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(["bash", "-c", "exit 9"], cwd=tmp_path)
    status = await proc.wait()
    assert (status.exit_code, status.sandbox_denied) == (9, False)


async def test_sandboxed_write_is_reported_as_sandbox_denied(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(
        ["bash", "-c", f"echo x > {tmp_path}/denied"],
        cwd=tmp_path,
        env=PATH_ENV,
        sandbox=read_only_sandbox(),
    )
    assert proc.sandbox_type == "linuxSeccomp"
    status = await proc.wait()
    assert status.exit_code != 0
    assert status.sandbox_denied is True
    assert not (tmp_path / "denied").exists()
