"""`execserver run` as a subprocess and `execserver shell` under a pty, against both servers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.servers import PROJECT_ROOT, RunningServer, start_server


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "execserver", *args]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    return env


async def run_cli(*args: str, stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *cli(*args),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=cli_env(),
    )
    out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out, err


async def test_run_streams_stdout_and_stderr_and_exits_with_the_remote_code(
    any_server: RunningServer, tmp_path: Path
) -> None:
    code, out, err = await run_cli(
        "run", any_server.url, "--cwd", str(tmp_path), "--",
        "bash", "-c", "pwd; echo to-err >&2; exit 7",
    )  # fmt: skip
    assert (code, out, err) == (7, f"{tmp_path}\n".encode(), b"to-err\n")


async def test_run_passes_env_and_inherits_the_server_path(
    any_server: RunningServer, tmp_path: Path
) -> None:
    code, out, _ = await run_cli(
        "run", any_server.url, "--cwd", str(tmp_path), "--env", "GREETING=hi there", "--",
        "bash", "-c", 'echo "$GREETING"; command -v ls',
    )  # fmt: skip
    assert code == 0
    assert out.splitlines()[0] == b"hi there"
    assert out.splitlines()[1].endswith(b"/ls")


async def test_run_tty_uses_a_remote_terminal(any_server: RunningServer, tmp_path: Path) -> None:
    code, out, err = await run_cli(
        "run", any_server.url, "--tty", "--cwd", str(tmp_path), "--",
        "bash", "-c", "test -t 1 && echo is-a-tty; exit 2",
    )  # fmt: skip
    assert (code, err) == (2, b"")
    assert out == b"is-a-tty\r\n"


async def test_run_stdin_forwards_local_input(any_server: RunningServer, tmp_path: Path) -> None:
    code, out, _ = await run_cli(
        "run", any_server.url, "--stdin", "--cwd", str(tmp_path), "--", "head", "-n", "1",
        stdin=b"first line\nsecond\n",
    )  # fmt: skip
    assert (code, out) == (0, b"first line\n")


async def test_run_forwards_local_sigint_as_interrupt(
    any_server: RunningServer, tmp_path: Path
) -> None:
    proc = await asyncio.create_subprocess_exec(
        *cli("run", any_server.url, "--cwd", str(tmp_path), "--",
             "bash", "-c", "echo ready; exec sleep 60"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        env=cli_env(),
    )  # fmt: skip
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    proc.send_signal(signal.SIGINT)
    assert await proc.wait() == 130


async def test_run_reports_an_unreachable_server_with_255() -> None:
    # A port nobody listens on: bind one, close it, use it.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    code, out, err = await run_cli("run", f"ws://127.0.0.1:{port}", "--", "true")
    assert (code, out) == (255, b"")
    assert b"cannot connect" in err


@pytest.mark.parametrize("kind", ["execserver", "reference"])
async def test_run_token_authenticates_with_a_bearer_header(kind: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    extra = ["--ws-auth", "capability-token", "--ws-token-file", str(token_file)]
    async with start_server(kind, extra) as server:
        code, out, _ = await run_cli(
            "run", server.url, "--token", "s3cret-token", "--cwd", str(tmp_path), "--",
            "echo", "authorised",
        )  # fmt: skip
        assert (code, out) == (0, b"authorised\n")
        code, _, err = await run_cli("run", server.url, "--token", "wrong", "--", "true")
        assert code == 255 and b"401" in err


class PtyReader:
    """Everything the program wrote to its terminal, readable until a marker appears."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = b""
        self._changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO once the other side is closed
            chunk = b""
        if not chunk:
            asyncio.get_running_loop().remove_reader(self.fd)
        self.data += chunk
        self._changed.set()

    async def expect(self, marker: bytes) -> None:
        try:
            async with asyncio.timeout(30):
                while marker not in self.data:
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"{marker!r} never appeared in {self.data!r}") from None

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.fd)


@contextlib.asynccontextmanager
async def shell_under_pty(
    url: str, cwd: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int, PtyReader]]:
    master, slave = os.openpty()
    proc = await asyncio.create_subprocess_exec(
        *cli("shell", url, "--cwd", str(cwd)),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=cli_env(),
        start_new_session=True,
    )
    reader = PtyReader(master)
    try:
        yield proc, slave, reader
    finally:
        reader.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(master)
        os.close(slave)


async def test_shell_is_interactive_and_forwards_ctrl_c(
    any_server: RunningServer, tmp_path: Path
) -> None:
    async with shell_under_pty(any_server.url, tmp_path) as (proc, slave, term):
        before = termios.tcgetattr(slave)
        os.write(term.fd, b"echo hello-$((6*7))\r")
        await term.expect(b"hello-42")
        assert termios.tcgetattr(slave) != before  # the local terminal went raw
        # The marker comes from the foreground job itself: the shell hands that job
        # the terminal before it runs, so once the marker is out a ^C reaches the
        # job. (Printed by the shell before forking `sleep`, a ^C could land while
        # the shell still held the terminal, and the shell would wait out the sleep.)
        os.write(term.fd, b"bash -c 'echo started-$((0+1)); exec sleep 60'; echo after-$((1+1))\r")
        await term.expect(b"started-1")
        os.write(term.fd, b"\x03")
        os.write(term.fd, b"echo alive-$((2+3))\r")
        await term.expect(b"alive-5")
        os.write(term.fd, b"exit 3\r")
        assert await proc.wait() == 3
        assert b"after-2" not in term.data
        assert termios.tcgetattr(slave) == before  # and was restored
