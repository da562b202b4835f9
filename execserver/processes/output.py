"""One child's output: its stdout/stderr/pty fds read into its numbered log.

Hot path: the loop calls ``_on_readable`` when an output fd is readable; it
reads up to eight chunks per syscall, cuts them at the reference's chunk size
and appends them to the ``OutputLog`` (which assigns the per-process seqs and
retains the last ``retained_bytes``), then wakes whoever waits for a change.
Whoever delivers the chunks (``ManagedProcess``'s sender) reports each seq it
handed on with ``delivered``; while more than ``PAUSE_BACKLOG`` chunks are
undelivered to an attached reader the pump stops reading, so the pipe fills
and the child blocks instead of the daemon growing or the log evicting output
nobody was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence

from execserver.processes.log import OutputLog

__all__ = [
    "CHUNKS_PER_READ",
    "PAUSE_BACKLOG",
    "PIPE_CHUNK",
    "PTY_CHUNK",
    "READS_PER_WAKEUP",
    "RESUME_BACKLOG",
    "OutputPump",
]

# Read sizes of the reference: pipes deliver <= 8192 bytes per chunk, a pty <= 4095.
PIPE_CHUNK = 8192
PTY_CHUNK = 4095
# Chunks' worth read per syscall, and syscalls per readiness callback before yielding
# to the loop (keeps one chatty child from starving the others).
CHUNKS_PER_READ = 8
READS_PER_WAKEUP = 4
# Unsent chunks at which the pump pauses / resumes. The backlog never exceeds
# PAUSE_BACKLOG + CHUNKS_PER_READ, well under the retention cap (128 chunks of
# 8 KiB), so an attached client never loses output to eviction.
PAUSE_BACKLOG = 64
RESUME_BACKLOG = 16
# Reads per stream when the child's leftovers are drained at its exit.
DRAIN_READS = 16


class OutputPump:
    """Reads ``outputs`` ({fd: stream name}) into ``log`` until each fd ends.

    The fds are the pump's: it closes each at its end of file, except the pty
    master (``pty_master``), which is also the child's terminal: that one is held
    open until ``release_pty_master`` (the owner calls it once the child has been
    reaped; see ``close_stream``). ``reader_attached`` says whether someone
    receives the output as it comes (only then does an undelivered backlog pause
    the reading); ``on_stream_ended(fd)`` runs when an fd is no longer read, while
    it is still open (a pty master is also the child's stdin: its writer lets go
    of the fd first).
    """

    def __init__(
        self,
        outputs: dict[int, str],
        *,
        retained_bytes: int,
        pty_master: int | None,
        reader_attached: Callable[[], bool],
        on_stream_ended: Callable[[int], None],
    ) -> None:
        self.log = OutputLog(retained_bytes)
        # Bytes read per stream, for audit and metrics.
        self.output_bytes: dict[str, int] = {}
        self._loop = asyncio.get_running_loop()
        self._streams = dict(outputs)
        self._pty_master = pty_master
        # The master after its output ended but before the child was reaped.
        self._held_master: int | None = None
        self._master_released = False
        self._reader_attached = reader_attached
        self._on_stream_ended = on_stream_ended
        self._paused = False
        self._delivered = 0  # highest seq the owner handed on
        self._waiters: list[asyncio.Future[None]] = []
        for fd, stream in self._streams.items():
            self._loop.add_reader(fd, self._on_readable, fd, stream)

    # ---- state ---------------------------------------------------------------------

    @property
    def streaming(self) -> bool:
        """Some output fd has not ended yet."""
        return bool(self._streams)

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def delivered_seq(self) -> int:
        return self._delivered

    @property
    def waiters(self) -> Sequence[asyncio.Future[None]]:
        """The ``wait_change`` calls not yet woken."""
        return tuple(self._waiters)

    def stream_open(self, fd: int) -> bool:
        return fd in self._streams

    # ---- readers' wake-ups -----------------------------------------------------------

    def wake(self) -> None:
        """Wake every ``wait_change``: new output, or a change the owner made (exit)."""
        waiters = self._waiters
        if waiters:
            self._waiters = []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_change(self, timeout: float | None = None) -> None:
        """Until the next ``wake`` or ``timeout`` seconds."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(fut)
        try:
            if timeout is None:
                await fut
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(fut, timeout)
        finally:
            # A timed-out or cancelled waiter must not pile up on a quiet process.
            if not fut.done() or fut.cancelled():
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)

    # ---- delivery and back-pressure --------------------------------------------------

    def delivered(self, seq: int) -> None:
        """The owner handed every event up to ``seq`` on; a paused pump resumes once
        the backlog is down to ``RESUME_BACKLOG``."""
        self._delivered = seq
        if self._paused and self.log.last_seq - seq <= RESUME_BACKLOG:
            self._resume()

    def caught_up(self) -> None:
        """The owner delivered all it was given: read again."""
        if self._paused:
            self._resume()

    def _backlogged(self) -> bool:
        """Too many chunks not yet handed to an attached reader.

        Reading more would let the log evict chunks the reader has not been sent
        (a detached session has no such reader: its output only feeds the log).
        """
        return self.log.last_seq - self._delivered > PAUSE_BACKLOG and self._reader_attached()

    def _pause(self) -> None:
        self._paused = True
        for fd in self._streams:
            self._loop.remove_reader(fd)

    def _resume(self) -> None:
        self._paused = False
        for fd, stream in self._streams.items():
            self._loop.add_reader(fd, self._on_readable, fd, stream)

    # ---- reading ---------------------------------------------------------------------

    def _on_readable(self, fd: int, stream: str) -> None:
        self._read_into_log(fd, stream, READS_PER_WAKEUP)
        self.wake()
        if not self._paused and self._backlogged():
            self._pause()

    def drain(self) -> None:
        """Read what the child left in its pipes (bounded), e.g. before its exit is
        numbered, so output it wrote comes before the exit."""
        for fd, stream in list(self._streams.items()):
            self._read_into_log(fd, stream, DRAIN_READS)

    def _read_into_log(self, fd: int, stream: str, max_reads: int) -> None:
        """Read what is available (up to ``max_reads`` syscalls) into the log.

        One syscall reads up to 8 chunks' worth; the data is then cut into chunks
        of the reference's size, so chunk boundaries never exceed 8192 (4095 on a
        pty) while the syscall count stays low on bulk output.
        """
        size = PTY_CHUNK if stream == "pty" else PIPE_CHUNK
        want = size * CHUNKS_PER_READ
        append = self.log.append
        for _ in range(max_reads):
            if self._backlogged():
                return  # never read more than the owner can deliver before eviction
            try:
                data = os.read(fd, want)
            except BlockingIOError:
                return
            except OSError:  # EIO: the pty's last slave fd was closed
                data = b""
            if not data:
                self.close_stream(fd)
                return
            n = len(data)
            self.output_bytes[stream] = self.output_bytes.get(stream, 0) + n
            if n <= size:
                append(stream, data)
            else:
                for start in range(0, n, size):
                    append(stream, data[start : start + size])
            if n < want:
                return  # most likely drained; the next readiness callback reads the rest

    def tail(self, max_bytes: int) -> bytes:
        """The last ``max_bytes`` of retained output, all streams in seq order."""
        tail: list[bytes] = []
        size = 0
        for chunk in reversed(self.log.since(0)):
            tail.append(chunk.data)
            size += len(chunk.data)
            if size >= max_bytes:
                break
        return b"".join(reversed(tail))[-max_bytes:]

    # ---- ending ----------------------------------------------------------------------

    def close_stream(self, fd: int) -> None:
        """Stop reading ``fd`` and close it (its end of file, or the owner gave up)."""
        if self._streams.pop(fd, None) is None:
            return
        self._loop.remove_reader(fd)
        stream_ended = self._on_stream_ended
        if not self._streams:
            # The last one: the owner's callbacks are needed no more. Dropped, they
            # leave no cycle (owner -> pump -> owner's bound method), so the owner
            # and the output it retains go by reference counting once it is
            # dropped, not at the next full collection: with the cycle the daemon's
            # settled RSS grew by ~100 MB over tests/reliability/test_soak.py.
            self._on_stream_ended = _ignore_stream
            self._reader_attached = _no_reader
        stream_ended(fd)
        if fd == self._pty_master and not self._master_released:
            # EIO means the slave's last fd is closed, not that the child is gone:
            # programs close their stdio before they exit. Closing the master now
            # would hang up the terminal and the kernel would SIGHUP the child (its
            # session leader) in that window, turning a clean exit into a kill.
            # The master stays open, unread, until the child has been reaped.
            self._held_master = fd
        else:
            os.close(fd)

    def close_all(self) -> None:
        """Stop reading every fd (output collection abandoned)."""
        for fd in list(self._streams):
            self.close_stream(fd)

    def release_pty_master(self) -> None:
        """The child was reaped (or is given up on): its terminal may hang up now."""
        self._master_released = True
        fd, self._held_master = self._held_master, None
        if fd is not None:
            os.close(fd)


def _ignore_stream(fd: int) -> None:
    del fd


def _no_reader() -> bool:
    return False
