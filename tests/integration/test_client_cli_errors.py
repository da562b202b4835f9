"""The client command-line tools past the happy path: exit codes, one-line
errors, and no remote process left behind whatever ends the local side."""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.integration.test_client_cli import cli, cli_env, run_cli
from tests.support.servers import RunningServer, start_server


def marker() -> str:
    return f"{300 + uuid.uuid4().int % 10_000}.{uuid.uuid4().int % 1000:03d}"


def remote_processes(server: RunningServer, name: str) -> list[psutil.Process]:
    """Live descendants of the server process named ``name`` (or with that argument)."""
    found = []
    for proc in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.name() == name or name in proc.cmdline():
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


async def gone_within(server: RunningServer, name: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not remote_processes(server, name):
            return True
        await asyncio.sleep(0.05)
    return not remote_processes(server, name)


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ INFO ")


async def present_within(server: RunningServer, name: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if remote_processes(server, name):
            return True
        await asyncio.sleep(0.05)
    return bool(remote_processes(server, name))


def one_line(err: bytes) -> str:
    text = err.decode()
    assert text.count("\n") == 1 and text.endswith("\n"), text
    assert "Traceback" not in text
    return text


# -- exit codes --------------------------------------------------------------------


async def test_missing_program_exits_127_and_not_executable_126(
    any_server: RunningServer, tmp_path: Path
) -> None:
    code, _, err = await run_cli("run", any_server.url, "--cwd", str(tmp_path), "--", "nope-21")
    assert code == 127
    assert "nope-21" in one_line(err) and "-32603" not in err.decode()
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    code, _, err = await run_cli("run", any_server.url, "--cwd", str(tmp_path), "--", str(script))
    assert code == 126 and str(script) in one_line(err)
    code, _, err = await run_cli(
        "run", any_server.url, "--tty", "--cwd", str(tmp_path), "--", "nope-21"
    )
    assert code == 127 and "nope-21" in one_line(err)


async def test_missing_cwd_is_named_and_differs_from_a_missing_program(
    any_server: RunningServer, tmp_path: Path
) -> None:
    missing = tmp_path / "gone"
    code, _, err = await run_cli("run", any_server.url, "--cwd", str(missing), "--", "true")
    assert code == 125
    line = one_line(err)
    assert str(missing) in line and "--cwd" in line


async def test_usage_errors_exit_2_with_one_line(execserver: RunningServer) -> None:
    for args in (
        ("run", execserver.url, "--cwd", "relative/dir", "--", "true"),
        ("run", execserver.url, "--env", "NOEQUALS", "--", "true"),
        ("run", "127.0.0.1:8765", "--", "true"),
        ("run", execserver.url, "--bogus-flag", "--", "true"),
        ("serve", "--log-level", "debugg"),
    ):
        code, out, err = await run_cli(*args)
        assert (code, out) == (2, b""), args
        one_line(err)
    _, _, err = await run_cli("run", "127.0.0.1:8765", "--", "true")
    assert "ws://127.0.0.1:8765" in err.decode()


async def test_connection_failure_exits_255_with_one_line() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    code, _, err = await run_cli("run", f"ws://127.0.0.1:{port}", "--", "true")
    assert code == 255
    assert "connection refused" in one_line(err)


@pytest.mark.parametrize("kind", ["execserver", "reference"])
async def test_401_names_the_servers_reason_and_the_token_options(
    kind: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-21\n")
    extra = ["--ws-auth", "capability-token", "--ws-token-file", str(token_file)]
    async with start_server(kind, extra) as server:
        code, _, err = await run_cli("run", server.url, "--", "true")
        line = one_line(err)
        assert code == 255
        assert "missing websocket bearer token" in line
        assert "--token" in line and "$EXECSERVER_TOKEN" in line
        code, _, err = await run_cli("run", server.url, "--token", "wrong", "--", "true")
        assert code == 255 and "invalid websocket bearer token" in one_line(err)


async def test_serve_on_a_busy_port_is_one_line_and_exit_2(execserver: RunningServer) -> None:
    code, out, err = await run_cli("serve", "--listen", execserver.url)
    assert (code, out) == (2, b"")
    # The daemon's INFO start-up log lines may come first; the error is one line.
    errors = [line for line in err.decode().splitlines() if not LOG_LINE.match(line)]
    assert len(errors) == 1 and "Traceback" not in err.decode(), err
    assert "already in use" in errors[0] and "--listen" in errors[0]


# -- the remote command never outlives the local side --------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
async def test_a_signal_to_run_terminates_the_remote_command(
    any_server: RunningServer, tmp_path: Path, signum: signal.Signals
) -> None:
    mark = marker()
    proc = await asyncio.create_subprocess_exec(
        *cli("run", any_server.url, "--cwd", str(tmp_path), "--",
             "sh", "-c", f"echo ready; sleep {mark}"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        env=cli_env(),
    )  # fmt: skip
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    # sh prints "ready" before it starts sleep: wait for the sleep to exist.
    assert await present_within(any_server, mark, 10)
    proc.send_signal(signum)
    assert await gone_within(any_server, mark, 2), remote_processes(any_server, mark)
    assert await proc.wait() == 128 + signum


async def test_yes_into_head_exits_cleanly_and_stops_the_remote_yes(
    any_server: RunningServer,
) -> None:
    run = cli("run", any_server.url, "--cwd", "/", "--", "yes")
    command = " ".join(shlex.quote(part) for part in run) + " | head -2"
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=cli_env(),
    )  # fmt: skip
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert (proc.returncode, out, err) == (0, b"y\ny\n", b"")
    assert await gone_within(any_server, "yes", 2), remote_processes(any_server, "yes")


# -- stdin -------------------------------------------------------------------------


async def test_stdin_on_a_pipe_reaches_the_command_and_it_ends(
    any_server: RunningServer, tmp_path: Path
) -> None:
    async with asyncio.timeout(30):
        code, out, _ = await run_cli(
            "run", any_server.url, "--stdin", "--cwd", str(tmp_path), "--", "cat",
            stdin=b"a\nb\n",
        )  # fmt: skip
    assert (code, out) == (0, b"a\nb\n")


async def test_stdin_under_tty_ends_with_end_of_input(
    any_server: RunningServer, tmp_path: Path
) -> None:
    async with asyncio.timeout(30):
        _, out, _ = await run_cli(
            "run", any_server.url, "--tty", "--cwd", str(tmp_path), "--", "cat",
            stdin=b"partial line",
        )  # fmt: skip
    assert b"partial line" in out


# -- patch -------------------------------------------------------------------------


PATCH = "*** Begin Patch\n*** Add File: new.txt\n+hello\n*** End Patch\n"


async def test_patch_takes_a_token_from_the_environment_and_checks_cwd(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-21\n")
    work = tmp_path / "work"
    work.mkdir()
    extra = ["--ws-auth", "capability-token", "--ws-token-file", str(token_file)]
    async with start_server("execserver", extra) as server:
        env = {**cli_env(), "EXECSERVER_TOKEN": "s3cret-token-21"}
        missing = work / "missing" / "deeper"
        code, _, err = await _patch(server.url, missing, env)
        assert code == 125 and str(missing) in one_line(err)
        assert not (work / "missing").exists()  # nothing was touched
        code, _, err = await _patch(server.url, work, env)
        assert code == 0, err
        assert (work / "new.txt").read_text() == "hello\n"
        no_token = {k: v for k, v in cli_env().items() if k != "EXECSERVER_TOKEN"}
        code, _, err = await _patch(server.url, work, no_token)
        assert code == 255 and "--token" in one_line(err)


async def _patch(url: str, cwd: Path, env: dict[str, str]) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *cli("patch", url, "--cwd", str(cwd)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await proc.communicate(PATCH.encode())
    assert proc.returncode is not None
    return proc.returncode, out, err


async def test_patch_interrupted_while_waiting_is_one_line_and_exit_130(tmp_path: Path) -> None:
    # A listener that accepts and never answers: the command waits in the
    # websocket handshake when the ^C comes.
    accepted: list[asyncio.StreamWriter] = []

    def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    listener = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        proc = await asyncio.create_subprocess_exec(
            *cli("patch", f"ws://127.0.0.1:{port}", "--cwd", str(tmp_path)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=cli_env(),
        )
        assert proc.stdin is not None
        proc.stdin.write(b"*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch\n")
        proc.stdin.close()
        await asyncio.sleep(1.0)  # well past start-up: connected, waiting for the answer
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 10)
    finally:
        for writer in accepted:
            writer.close()
        listener.close()
        await listener.wait_closed()
    assert accepted, "the command never connected"
    assert proc.returncode == 130
    assert out == b""
    assert "interrupted" in one_line(err)
    assert not (tmp_path / "a.txt").exists()
