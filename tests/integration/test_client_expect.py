"""``RemoteProcess.expect``: waiting for a prompt in a process's output, with
nothing lost for later reads, against both servers."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client import (
    ExecServerClient,
    ExpectEOF,
    ExpectTimeout,
    Output,
    RemoteProcess,
    sync,
)
from tests.support.servers import RunningServer

DIALOGUE = (
    'printf "login: "; read name; printf "hello %s\\n> " "$name"; read cmd; '
    'echo "ran $cmd"; echo tail-output'
)


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as c:
        yield c


async def rest(proc: RemoteProcess) -> bytes:
    """All output the iteration still yields."""
    return b"".join([e.data async for e in proc if isinstance(e, Output)])


async def test_a_tty_dialogue_with_prompts(client: ExecServerClient, tmp_path: Path) -> None:
    proc = await client.start_process(["sh", "-c", DIALOGUE], cwd=tmp_path, tty=True)
    first = await proc.expect("login: ", timeout=30)
    assert first.before == "" and first.after == "login: "
    await proc.write(b"bob\n")
    greeting = await proc.expect(re.compile(r"hello (\w+)\r\n> "), timeout=30)
    assert greeting.match.group(1) == "bob"
    assert greeting.before == "bob\r\n"  # the terminal's echo of what we typed
    await proc.write(b"ls\n")
    ran = await proc.expect(b"ran ls", timeout=30)
    assert ran.before == b"ls\r\n"
    # What followed the last match is still there for the iteration.
    assert await rest(proc) == b"\r\ntail-output\r\n"
    assert (await proc.wait()).exit_code == 0


async def test_a_match_across_chunks_keeps_the_rest_for_iteration(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(
        ["sh", "-c", "printf ab; sleep 0.3; printf cd; sleep 0.3; printf ef"], cwd=tmp_path
    )
    found = await proc.expect(b"bc", timeout=30)
    assert (found.before, found.after) == (b"a", b"bc")
    assert await rest(proc) == b"def"


async def test_a_timeout_consumes_nothing(client: ExecServerClient, tmp_path: Path) -> None:
    proc = await client.start_process(
        ["sh", "-c", "echo ready; read line; echo got-$line"], cwd=tmp_path, tty=True
    )
    with pytest.raises(ExpectTimeout) as caught:
        await proc.expect("never printed", timeout=1)
    assert isinstance(caught.value, TimeoutError)
    assert "ready" in caught.value.before
    # The output seen while waiting is still there for the next expect.
    assert (await proc.expect("ready\r\n", timeout=30)).before == ""
    await proc.write(b"x\n")
    assert (await proc.expect("got-x", timeout=30)).before == "x\r\n"
    await proc.wait_closed()


async def test_the_end_of_output_without_a_match_raises_expect_eof(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(["sh", "-c", "echo only-this"], cwd=tmp_path)
    with pytest.raises(ExpectEOF) as caught:
        await proc.expect(b"something else", timeout=30)
    assert caught.value.before == b"only-this\n"
    assert isinstance(caught.value, EOFError)
    # Nothing was consumed: the iteration still gets the output and the end.
    assert await rest(proc) == b"only-this\n"
    with pytest.raises(ExpectEOF):
        await proc.expect(b"x", timeout=30)


async def test_literal_text_is_not_a_regex(client: ExecServerClient, tmp_path: Path) -> None:
    proc = await client.start_process(["sh", "-c", "echo 'a.c abc $ '"], cwd=tmp_path)
    found = await proc.expect("abc $ ", timeout=30)
    assert found.before == "a.c "
    await proc.wait_closed()


async def test_the_sync_twin_expects(any_server: RunningServer, tmp_path: Path) -> None:
    def blocking() -> tuple[str, bytes]:
        with sync.connect(any_server.url) as c:
            proc = c.start_process(["sh", "-c", "echo one; echo two"], cwd=str(tmp_path))
            before = proc.expect("two", timeout=30).before
            left = b"".join(e.data for e in proc if isinstance(e, Output))
            return before, left

    before, left = await asyncio.to_thread(blocking)
    assert (before, left) == ("one\n", b"\n")
