"""The local terminal side of ``execserver run``/``shell``: raw mode, reading
stdin without blocking the loop, and the window size.

The protocol cannot resize a remote pty (it starts at 24x80). ``shell``
therefore runs ``stty rows R cols C`` inside the new terminal before the
program starts, and on every local SIGWINCH runs ``stty -F <pty> rows R cols C``
as a second, short process on the executor; changing the size makes the
kernel send SIGWINCH to the remote foreground job, as a local resize would.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import struct
import sys
import termios
import tty
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from execserver.aio.tasks import TaskSet
from execserver.client.errors import ExecServerError

if TYPE_CHECKING:
    from execserver.client.connection import ExecServerClient

__all__ = ["forward_window_size", "raw_terminal", "read_stdin", "read_stdin_to_end", "window_size"]

log = logging.getLogger(__name__)

READ_SIZE = 65536


def window_size() -> tuple[int, int] | None:
    """(rows, cols) of the local terminal, or None when stdout/stdin is not one."""
    for fd in (1, 0, 2):
        try:
            packed = fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
        except OSError:
            continue
        rows, cols, _, _ = struct.unpack("HHHH", packed)
        if rows and cols:
            return rows, cols
    return None


@contextlib.asynccontextmanager
async def forward_window_size(
    client: ExecServerClient, tty_file: str | None
) -> AsyncIterator[None]:
    """While active, a local SIGWINCH resizes the remote pty named in ``tty_file``."""
    if tty_file is None:
        yield
        return
    loop = asyncio.get_running_loop()
    resizes = TaskSet("execserver-window-size")
    pty_name: list[str] = []

    async def resize() -> None:
        size = window_size()
        if size is None:
            return
        try:
            if not pty_name:
                name = (await client.fs.read_file(tty_file)).decode().strip()
                if not name.startswith("/dev/"):
                    return
                pty_name.append(name)
            rows, cols = size
            await client.run(
                ["stty", "-F", pty_name[0], "rows", str(rows), "cols", str(cols)],
                cwd="/",
                timeout=10,
            )
        except (ExecServerError, OSError) as exc:
            log.debug("could not resize the remote terminal: %s", exc)

    def on_winch() -> None:
        if not resizes.closed:
            resizes.spawn(resize(), name="resize")

    loop.add_signal_handler(signal.SIGWINCH, on_winch)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGWINCH)
        await resizes.aclose()


async def read_stdin() -> AsyncIterator[bytes]:
    """Chunks of local stdin until EOF, without blocking the event loop."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    fd = sys.stdin.fileno()

    def readable() -> None:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
        queue.put_nowait(data)

    try:
        loop.add_reader(fd, readable)
    except (PermissionError, ValueError, OSError):
        # A regular file cannot be polled; read it in a worker thread instead.
        while data := await asyncio.to_thread(os.read, fd, READ_SIZE):
            yield data
        return
    try:
        while data := await queue.get():
            yield data
    finally:
        loop.remove_reader(fd)


async def read_stdin_to_end(limit: int) -> bytes:
    """All of local stdin; ``ValueError`` beyond ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for data in read_stdin():
        size += len(data)
        if size > limit:
            raise ValueError(
                f"--stdin without --tty reads stdin to its end first, at most {limit} bytes; "
                "copy larger input to the executor and redirect it there"
            )
        parts.append(data)
    return b"".join(parts)


@contextlib.contextmanager
def raw_terminal(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    # TCSANOW, not the default TCSAFLUSH: keep what was typed ahead.
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
