"""Non-blocking delivery of ``process/write`` bytes to a child's stdin (pipe or pty master).

``process/write`` answers as soon as the bytes are queued (the reference hands
them to a writer task the same way); the queue drains whenever the fd is
writable, so a child that does not read never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque

__all__ = ["StdinWriter"]


class StdinWriter:
    def __init__(self, fd: int, *, owns_fd: bool) -> None:
        self.fd: int | None = fd
        # A pty master is also the output stream: its owner closes it, not us.
        self._owns_fd = owns_fd
        self._queue: deque[memoryview] = deque()
        self._waiting = False  # registered with add_writer
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:
        if not data or self.fd is None:
            return  # after close the bytes are dropped, as the reference drops them
        self._queue.append(memoryview(data))
        if not self._waiting:
            self._flush()

    def _flush(self) -> None:
        fd = self.fd
        queue = self._queue
        while queue and fd is not None:
            try:
                n = os.write(fd, queue[0])
            except BlockingIOError:
                if not self._waiting:
                    self._waiting = True
                    self._loop.add_writer(fd, self._flush)
                return
            except OSError:  # EPIPE/EIO: the child closed its stdin; drop the bytes
                queue.clear()
                break
            if n == len(queue[0]):
                queue.popleft()
            else:
                queue[0] = queue[0][n:]
        if self._waiting and fd is not None:
            self._waiting = False
            self._loop.remove_writer(fd)

    def close(self) -> None:
        fd = self.fd
        if fd is None:
            return
        self.fd = None
        self._queue.clear()
        if self._waiting:
            self._waiting = False
            self._loop.remove_writer(fd)
        if self._owns_fd:
            os.close(fd)
