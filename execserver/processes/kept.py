"""A managed process held by a keeper (``--state-dir``; execserver/keeper/).

The keeper is the child's parent: it reaps it, owns its stdio, numbers every
event (output chunks, exit, close) and journals them before it sends them on
its link. This side turns the link's frames into the same numbered
``OutputLog`` a ``ManagedProcess`` keeps, and is one to the rest of the
daemon: ``KeptProcess`` *is* a ``ManagedProcess`` (same notifications, same
sender, same ``process/read`` state); only where the bytes come from and where
stdin, signals and kills go differ. The seqs are the keeper's, so a daemon that
re-adopts the keeper later serves the same numbers.

Back-pressure as the output pump's: while too many chunks are undelivered to an
attached reader the link is not read, the keeper's sends block, its journal
fills to its budget and it stops reading the child. What the log evicts (beyond
``process_retained_bytes``) is acknowledged, and the keeper deletes it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from execserver.aio.tasks import TaskSet
from execserver.keeper.client import send_line
from execserver.keeper.program import (
    CHUNK_BYTES,
    CHUNKS_PER_READ,
    FRAME,
    KIND_CLOSED,
    KIND_EXIT,
    KIND_INFO,
    KIND_PTY,
    KIND_STDERR,
    KIND_STDOUT,
    REPLAYED_THROUGH,
)
from execserver.processes.log import OutputLog
from execserver.processes.managed import (
    DENIAL_TAIL_BYTES,
    Accounting,
    DenialClassifier,
    ManagedProcess,
)
from execserver.processes.output import PAUSE_BACKLOG, PIPE_CHUNK, RESUME_BACKLOG
from execserver.processes.tree import ProcessTree

if TYPE_CHECKING:
    from execserver.kernel.peer import Notifier
    from execserver.processes.supervisor import Supervisor

__all__ = ["KeeperOutput", "KeptProcess"]

log = logging.getLogger(__name__)

_STREAMS = {KIND_STDOUT: "stdout", KIND_STDERR: "stderr", KIND_PTY: "pty"}
# The largest frame a keeper sends (one read of the child's): the buffer grows by
# reads until it holds a whole one.
RECV_BYTES = FRAME.size + max(CHUNK_BYTES.values()) * CHUNKS_PER_READ
# Acknowledge evictions in steps of this many chunks (1 MiB of pipe output; one
# small line each, and each wakes the keeper: on 2 busy CPUs the wake-up preempted
# the daemon inside its send).
ACK_EVERY = 128
# How long a request about a re-adopted process waits for its keeper's replay (see
# KeptProcess.wait_replayed): a keeper that has not sent its journal by then is
# stuck or gone, and the process is served as its log then is (a warning says so).
REPLAY_WAIT_S = 30.0


class KeeperOutput:
    """The link's frames into ``log``; the ``OutputPump`` interface ``ManagedProcess``
    uses (wake/wait_change, delivered/caught_up, back-pressure)."""

    def __init__(
        self,
        link: socket.socket,
        *,
        retained_bytes: int,
        reader_attached: Callable[[], bool],
        on_exit: Callable[[int, dict[str, Any]], None],
        on_closed: Callable[[int], None],
        on_gone: Callable[[], None],
    ) -> None:
        self.log = OutputLog(retained_bytes)
        self.output_bytes: dict[str, int] = {}
        self.link: socket.socket | None = link
        self._loop = asyncio.get_running_loop()
        self._reader_attached = reader_attached
        self._on_exit = on_exit
        self._on_closed = on_closed
        self._on_gone = on_gone
        self._buffer = bytearray()
        self._paused = False
        self._delivered = 0
        # Output "delivered" while the session was detached went nowhere (the
        # reference does not replay it as notifications after a resume: the client
        # reads it back with process/read). From the first such seq on, the log
        # evicts nothing until a read has returned it; the keeper's journal holds
        # what follows meanwhile (then the child waits), so a client that resumes,
        # even after a daemon restart, reads every byte. 0: no such hole.
        self._hole_from = 0
        self._hole_to = 0
        self._acked = 0
        # Re-adopted: the last seq of the keeper's replay, once its mark came (-1:
        # not yet); None when there is no replay to wait for.
        self._replay_end: int | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._loop.add_reader(link.fileno(), self._on_readable)

    def expect_replay(self) -> None:
        """The link is a re-adoption's: its keeper answers the hello with how far its
        replay goes (execserver.keeper.program.replay_mark)."""
        self._replay_end = -1

    @property
    def replaying(self) -> bool:
        """Whether the log still lacks part of what the keeper had journaled when it
        was re-adopted. Not when the link is gone, nor while the log holds back the
        rest until a read (a detached session's output, ``_keep_from``): what the
        log has is then all a read can be given."""
        end = self._replay_end
        if end is None:
            return False
        if (end >= 0 and self.log.next_seq > end) or self.link is None or self._held_back():
            self._replay_end = None
            return False
        return True

    def give_up_replay(self) -> None:
        self._replay_end = None

    @property
    def streaming(self) -> bool:
        return self.link is not None

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def delivered_seq(self) -> int:
        return self._delivered

    @property
    def waiters(self) -> Sequence[asyncio.Future[None]]:
        return tuple(self._waiters)

    def wake(self) -> None:
        waiters = self._waiters
        if waiters:
            self._waiters = []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_change(self, timeout: float | None = None) -> None:
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(fut)
        try:
            if timeout is None:
                await fut
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(fut, timeout)
        finally:
            if not fut.done() or fut.cancelled():
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)

    def delivered(self, seq: int) -> None:
        if not self._reader_attached() and seq > self._delivered:
            if not self._hole_from:
                self._hole_from = self._delivered + 1
            self._hole_to = seq
        self._delivered = seq
        if self._paused and self.log.last_seq - seq <= RESUME_BACKLOG and not self._held():
            self._resume()

    def read_through(self, seq: int) -> None:
        """A process/read returned everything up to ``seq``."""
        if not self._hole_from or seq < self._hole_from:
            return
        if seq >= self._hole_to:
            self._hole_from = self._hole_to = 0
        else:
            self._hole_from = seq + 1
        if self._paused and not self._backlogged():
            self._resume()

    def _keep_from(self) -> int:
        """The oldest seq the log may not evict yet (0: none): the first one an
        attached reader was not sent yet, or a hole's first. The link's reads are a
        keeper's reads of the child (32 chunks each) and a parse takes several: the
        backlog check alone, made after a parse, let a log full of unsent output
        evict some of it (8 KiB chunks lost under load)."""
        keep = self._delivered + 1 if self._reader_attached() else 0
        hole = self._hole_from
        if hole and (not keep or hole < keep):
            return hole
        return keep

    def _held_back(self) -> bool:
        """Paused until a read: the log holds what it may not evict yet."""
        return self._paused and self._held()

    def _held(self) -> bool:
        """Whether the next chunk would evict output not yet sent or read back."""
        return self.log.evicts_after(PIPE_CHUNK, self._keep_from())

    def caught_up(self) -> None:
        if self._paused and not self._held():
            self._resume()

    def _backlogged(self) -> bool:
        if self._held():
            return True
        return self.log.last_seq - self._delivered > PAUSE_BACKLOG and self._reader_attached()

    def _pause(self) -> None:
        self._paused = True
        if self.link is not None:
            self._loop.remove_reader(self.link.fileno())

    def _resume(self) -> None:
        self._paused = False
        if self.link is not None:
            self._loop.add_reader(self.link.fileno(), self._on_readable)
            self._on_readable()  # frames already buffered

    def _on_readable(self) -> None:
        link = self.link
        if link is None:
            return
        gone = False
        try:
            # A buffer still holding a read's worth (held back for a hole) is not
            # grown further: the keeper's journal is where output waits.
            if len(self._buffer) < RECV_BYTES:
                data = link.recv(RECV_BYTES)
                if not data:
                    gone = True
                else:
                    self._buffer += data
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            gone = True
        self._parse()
        self._ack()
        self.wake()
        if gone:
            self.close()
            self._on_gone()
        elif not self._paused and self._backlogged():
            self._pause()

    def _parse(self) -> None:
        buffer = self._buffer
        log_ = self.log
        offset = 0
        size = FRAME.size
        end = len(buffer)
        # Each chunk is copied once, out of a view (a slice of the bytearray would
        # be a copy of its own before the bytes).
        view = memoryview(buffer)
        keep_from = self._keep_from()
        try:
            while end - offset >= size:
                seq, kind, length = FRAME.unpack_from(buffer, offset)
                if end - offset - size < length:
                    break
                start = offset + size
                stream = _STREAMS.get(kind)
                if stream is not None:
                    # One read of the child's: the reference's chunks of it, a seq each.
                    chunk = CHUNK_BYTES[kind]
                    stop = start + length
                    held = False
                    for at in range(start, stop, chunk):
                        if seq < log_.next_seq:
                            seq += 1
                            continue  # a replay of what we hold already
                        upto = min(at + chunk, stop)
                        if log_.evicts_after(upto - at, keep_from):
                            held = True  # the frame waits in the buffer until read back
                            break
                        log_.next_seq = seq
                        log_.append(stream, view[at:upto].tobytes())
                        self.output_bytes[stream] = self.output_bytes.get(stream, 0) + upto - at
                        seq += 1
                    if held:
                        break
                elif kind == KIND_EXIT:
                    if seq >= log_.next_seq:
                        log_.next_seq = seq + 1
                        self._on_exit(seq, json.loads(view[start : start + length].tobytes()))
                elif kind == KIND_CLOSED:
                    if seq >= log_.next_seq:
                        log_.next_seq = seq + 1
                        self._on_closed(seq)
                elif kind == KIND_INFO and self._replay_end == -1:
                    mark = json.loads(view[start : start + length].tobytes())
                    self._replay_end = int(mark[REPLAYED_THROUGH])
                offset = start + length
        finally:
            view.release()  # before the bytearray may shrink
        if offset:
            del buffer[:offset]

    def _ack(self) -> None:
        """Tell the keeper what the log no longer holds (it may delete it)."""
        first = self.log.first_seq
        evicted = (first - 1) if first is not None else 0
        if evicted - self._acked >= ACK_EVERY and self.link is not None:
            self._acked = evicted
            self.send({"op": "ack", "seq": evicted})

    def send(self, message: dict[str, Any]) -> None:
        if self.link is not None:
            send_line(self.link, message)

    def tail(self, max_bytes: int) -> bytes:
        tail: list[bytes] = []
        size = 0
        for chunk in reversed(self.log.since(0)):
            tail.append(chunk.data)
            size += len(chunk.data)
            if size >= max_bytes:
                break
        return b"".join(reversed(tail))[-max_bytes:]

    def close(self) -> None:
        """Let go of the link (the keeper lives on unless it was told otherwise)."""
        link, self.link = self.link, None
        if link is None:
            return
        if not self._paused:
            self._loop.remove_reader(link.fileno())
        link.close()
        self._on_exit = _ignore_exit
        self._on_closed = _ignore_seq
        self._reader_attached = _no_reader
        self.wake()


class _KeeperStdin:
    """``ManagedProcess.write``'s writer: the bytes go to the keeper, which queues
    them for the child's stdin (or pty) as StdinWriter does in the daemon."""

    def __init__(self, output: KeeperOutput) -> None:
        self._output: KeeperOutput | None = output

    def write(self, data: bytes) -> None:
        if data and self._output is not None:
            self._output.send({"op": "write", "data": base64.b64encode(data).decode()})

    def close(self) -> None:
        self._output = None


class KeptProcess(ManagedProcess):
    """A ManagedProcess whose child is a keeper's (see the module docstring).

    ``__init__`` does not call ManagedProcess's (that one spawns the pump and the
    pidfd watch of a child of the daemon's): it sets the same state, so every
    inherited method (the sender, reads, ``write``) works unchanged."""

    def __init__(
        self,
        process_id: str,
        link: socket.socket,
        *,
        pid: int,
        tty: bool,
        pipe_stdin: bool,
        directory: str,
        session: Notifier,
        supervisor: Supervisor,
        program: str,
        retained_bytes: int,
        classify_denial: DenialClassifier | None,
        on_closed: Callable[[ManagedProcess], None],
        on_exited: Callable[[ManagedProcess], None] | None = None,
        on_released: Callable[[KeptProcess], None] | None = None,
        started_s: float | None = None,
        leaving: Callable[[], bool],
    ) -> None:
        self.process_id = process_id
        # With a keeper that outlives the daemon (False: ended with it, e.g. a
        # process behind the daemon's own proxy): a drain need not wait for it.
        self.outlives_daemon = True
        self.pid = pid
        self.tty = tty
        self.pipe_stdin = pipe_stdin
        self.program = program
        self.directory = directory
        self.exit_code: int | None = None
        self.exit_seq: int | None = None
        self.closed_seq: int | None = None
        self.sandbox_denied = False
        self.failure: str | None = None
        self.accounting: Accounting | None = None
        self.close_hooks: list[Callable[[ManagedProcess], None]] = []
        self._session = session
        self._supervisor = supervisor
        # The keeper holds the tree (it is the subreaper of the child's escapees):
        # the daemon's supervisor tracks nothing of it, so this one stays empty.
        self.tree = ProcessTree(pid, 0, root_alive=False)
        self._classify_denial = classify_denial
        self._on_closed = on_closed
        self._on_exited = on_exited
        self._on_released = on_released
        self._leaving = leaving
        self._loop = asyncio.get_running_loop()
        self._started = time.monotonic() if started_s is None else started_s
        self._pty_master = None
        self._abandon = False
        self._terminated = False
        self._drain_timer = None
        self._drain_mark = 0
        self._write_ids: dict[str, None] = {}
        self._kept = KeeperOutput(
            link,
            retained_bytes=retained_bytes,
            reader_attached=lambda: session.attached,
            on_exit=self._keeper_exit,
            on_closed=self._keeper_closed,
            on_gone=self._keeper_gone,
        )
        self._output = self._kept  # type: ignore[assignment]
        self._stdin = _KeeperStdin(self._kept)  # type: ignore[assignment]
        self.log: OutputLog = self._kept.log
        self.output_bytes = self._kept.output_bytes
        self._pidfd = -1
        self._tasks = TaskSet(f"process {process_id}", logger=log)
        self._sender = self._tasks.spawn(self._send_loop(), name="sender")

    def read_through(self, seq: int) -> None:
        self._kept.read_through(seq)

    def expect_replay(self) -> None:
        """Re-adopted from a keeper that marks its replay's end (its meta.json says
        ``replay_mark``): requests about the process wait for the replay."""
        self._kept.expect_replay()

    @property
    def replaying(self) -> bool:
        return self._kept.replaying

    async def wait_replayed(self) -> None:
        deadline = self._loop.time() + REPLAY_WAIT_S
        while self._kept.replaying:
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                log.warning(
                    "process %s: its keeper's replay did not arrive within %.0f s; "
                    "served from what it has",
                    self.process_id,
                    REPLAY_WAIT_S,
                )
                self._kept.give_up_replay()
                return
            await self._kept.wait_change(remaining)

    # ---- the keeper's events -----------------------------------------------------------

    def _keeper_exit(self, seq: int, info: dict[str, Any]) -> None:
        code = int(info["code"])
        max_rss = info.get("max_rss_kib")
        self.accounting = Accounting(
            time.monotonic() - self._started,
            float(info.get("cpu_s", 0.0)),
            int(max_rss) if isinstance(max_rss, int) else None,
        )
        self.exit_code = code
        if self._classify_denial is not None and code != 0:
            self.sandbox_denied = self._classify_denial(code, self._kept.tail(DENIAL_TAIL_BYTES))
        self.exit_seq = seq
        if self._on_exited is not None:
            self._on_exited(self)
        self._kept.wake()

    def _keeper_closed(self, seq: int) -> None:
        if self.closed:
            return
        self._close_stdin()
        self.closed_seq = seq
        self._kept.wake()
        log.info(
            "process %s closed: exit=%s program=%s (kept)",
            self.process_id,
            self.exit_code,
            os.path.basename(self.program),
        )
        self._on_closed(self)
        for hook in self.close_hooks:
            hook(self)

    def _keeper_gone(self) -> None:
        """The link ended without a close: the keeper died (or was killed)."""
        if self.closed or self._leaving():
            return
        self.failure = "the process keeper exited"
        if self.exit_code is None:
            self.exit_code = 1 if self.tty else 137
            self.exit_seq = self.log.reserve()
            if self._on_exited is not None:
                self._on_exited(self)
        self._keeper_closed(self.log.reserve())

    # ---- stdin, signals, terminate -------------------------------------------------------

    def interrupt(self) -> None:
        if not self.exited:
            self._kept.send({"op": "signal"})

    def terminate(self) -> bool:
        """The keeper kills the whole tree (cgroup.kill when it has one, its group and
        everything re-parented to it) before it reports the exit, as ``terminate``."""
        if self.exited:
            return False
        self._abandon = True
        self._terminated = True
        self._kept.send({"op": "terminate"})
        return True

    # ---- teardown ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Session gone: the keeper kills the tree and removes its files. At daemon
        shutdown (``leaving``) only the link is let go: the keeper waits for the
        next daemon (or kills everything when the TTL runs out)."""
        self._abandon = True
        if not self._leaving() and self._kept.link is not None:
            self._kept.send({"op": "kill"})
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    while self._kept.link is not None:
                        await self._kept.wait_change()
        self._kept.close()
        self._close_stdin()
        await self._tasks.aclose()
        self._kept.wake()

    def forget(self) -> None:
        """Retention over: the keeper kills what the process left and exits."""
        self._tasks.cancel()
        self._kept.send({"op": "release"})
        self._kept.close()
        if self._on_released is not None:
            self._on_released(self)

    def detach(self) -> None:
        """Let go of the keeper without a word (daemon shutdown with --state-dir)."""
        self._kept.close()


def _ignore_exit(seq: int, info: dict[str, Any]) -> None:
    del seq, info


def _ignore_seq(seq: int) -> None:
    del seq


def _no_reader() -> bool:
    return False
