"""``execserver shell`` gives the remote terminal the local size and follows resizes."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import struct
import termios
from pathlib import Path

from tests.integration.test_client_cli import PtyReader, cli, cli_env
from tests.support.servers import RunningServer


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


async def test_shell_starts_at_the_local_size_and_follows_sigwinch(
    any_server: RunningServer, tmp_path: Path
) -> None:
    master, slave = os.openpty()
    set_size(slave, 40, 100)
    proc = await asyncio.create_subprocess_exec(
        *cli("shell", any_server.url, "--cwd", str(tmp_path)),
        stdin=slave, stdout=slave, stderr=slave, env=cli_env(), start_new_session=True,
    )  # fmt: skip
    term = PtyReader(master)
    try:
        os.write(master, b"echo size-$(stty size | tr ' ' x)\r")
        await term.expect(b"size-40x100")
        set_size(slave, 50, 120)
        # Our pty is not the CLI's controlling terminal, so the kernel does not
        # signal it; send what a terminal emulator's resize would.
        proc.send_signal(signal.SIGWINCH)
        for _ in range(100):
            os.write(master, b"echo now-$(stty size | tr ' ' x)\r")
            await term.expect(b"now-")
            if b"now-50x120" in term.data:
                break
            await asyncio.sleep(0.1)
        assert b"now-50x120" in term.data
        os.write(master, b"exit 0\r")
        assert await proc.wait() == 0
    finally:
        term.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(master)
        os.close(slave)
