"""One managed child: exit reaping, event delivery, stdin, signals.

Its output is read by an ``OutputPump`` (execserver/processes/output.py), which
numbers the chunks in the process's log and wakes the sender. A single sender
task per process turns log entries into notifications in seq order; when the
connection's outbound queue is full the sender waits, the backlog grows and the
pump pauses, so the pipe fills and the child blocks instead of the daemon
growing. Exit is reaped from a pidfd callback that never waits for the sender,
so ``process/read`` sees the exit at once even under backpressure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from execserver.aio.tasks import TaskSet
from execserver.processes.launch import Spawned
from execserver.processes.log import Chunk, OutputLog
from execserver.processes.output import OutputPump
from execserver.processes.stdin import StdinWriter
from execserver.wire import methods as m
from execserver.wire.errors import RpcError
from execserver.wire.process import (
    ProcessClosedNotification,
    ProcessExitedNotification,
    ProcessOutputNotification,
    WriteStatus,
)

if TYPE_CHECKING:
    from execserver.kernel.peer import Notifier
    from execserver.processes.supervisor import Supervisor
    from execserver.processes.tree import ProcessTree

__all__ = ["DenialClassifier", "ManagedProcess"]

log = logging.getLogger(__name__)

# Bytes of output kept for the sandbox-denial classifier.
DENIAL_TAIL_BYTES = 16 * 1024
# A process's pending notifications go out this many at a time, written together
# (16 full chunks: ~180 KB of frames).
NOTIFY_BATCH = 16
# Remembered writeIds per process (de-duplication); the oldest are forgotten first.
MAX_WRITE_IDS = 65536


@dataclass
class Accounting:
    """Resource use at the child's exit: of the whole tree from its cgroup when it
    has one (limits configured), else of the direct child from wait4()."""

    wall_s: float
    cpu_s: float
    # Peak memory of the command (KiB), None when it cannot be told apart from the
    # daemon: ru_maxrss also counts the pre-exec image (the forked copy of the
    # daemon, recorded at exec), so it only measures the command when it exceeds
    # the daemon's own peak. With a cgroup it is the tree's memory.peak.
    max_rss_kib: int | None
    peak_memory_bytes: int | None = None  # the cgroup's peak (whole tree)
    oom_kills: int = 0  # members killed by --process-memory-max
    pids_refused: int = 0  # forks refused by --process-pids-max


def _daemon_peak_rss_kib() -> int:
    # VmHWM, read by hand: psutil has no peak-RSS figure, and getrusage's
    # ru_maxrss is no substitute: it also counts the image that exec'ed the
    # daemon (e.g. a large test runner that spawned it), which hid every
    # command's own peak in a long test session.
    for line in (_read_text("/proc/self/status") or "").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _measure(wall_s: float, rusage: resource.struct_rusage | None, tree: ProcessTree) -> Accounting:
    cpu_s = (rusage.ru_utime + rusage.ru_stime) if rusage is not None else 0.0
    max_rss = int(rusage.ru_maxrss) if rusage is not None else 0
    own_rss: int | None = max_rss if max_rss > _daemon_peak_rss_kib() else None
    if tree.cgroup is None:
        return Accounting(wall_s, cpu_s, own_rss)
    usage = tree.cgroup.usage()
    peak = usage.peak_memory_bytes
    return Accounting(
        wall_s,
        usage.cpu_s if usage.cpu_s is not None else cpu_s,
        peak // 1024 if peak is not None else own_rss,
        peak,
        usage.oom_kills,
        usage.pids_refused,
    )


DenialClassifier = Callable[[int, bytes], bool]


class ManagedProcess:
    def __init__(
        self,
        process_id: str,
        spawned: Spawned,
        *,
        session: Notifier,
        supervisor: Supervisor,
        tree: ProcessTree,
        program: str,
        retained_bytes: int,
        drain_timeout_s: float,
        pipe_stdin: bool,
        classify_denial: DenialClassifier | None,
        on_closed: Callable[[ManagedProcess], None],
        on_exited: Callable[[ManagedProcess], None] | None = None,
    ) -> None:
        self.process_id = process_id
        self.pid = spawned.pid
        self.tty = spawned.pty_master is not None
        self.pipe_stdin = pipe_stdin
        self.program = program
        self.exit_code: int | None = None
        self.exit_seq: int | None = None
        self.closed_seq: int | None = None
        self.sandbox_denied = False
        self.failure: str | None = None
        self.accounting: Accounting | None = None
        # Audit/metrics observers run once at close.
        self.close_hooks: list[Callable[[ManagedProcess], None]] = []
        self._popen = spawned.popen
        self._session = session
        self._supervisor = supervisor
        self.tree = tree
        self._drain_timeout_s = drain_timeout_s
        self._classify_denial = classify_denial
        self._on_closed = on_closed
        self._on_exited = on_exited
        self._loop = asyncio.get_running_loop()
        self._started = time.monotonic()
        self._pty_master = spawned.pty_master
        self._abandon = False
        self._terminated = False
        self._drain_timer: asyncio.TimerHandle | None = None
        self._drain_mark = 0  # log.next_seq when the drain timer was armed
        self._stdin: StdinWriter | None = None
        if spawned.stdin_fd is not None:
            owns = spawned.stdin_fd != spawned.pty_master
            self._stdin = StdinWriter(spawned.stdin_fd, owns_fd=owns)
        self._write_ids: dict[str, None] = {}
        self._output = OutputPump(
            dict(spawned.outputs),
            retained_bytes=retained_bytes,
            pty_master=spawned.pty_master,
            reader_attached=lambda: session.attached,
            on_stream_ended=self._stream_ended,
        )
        self.log: OutputLog = self._output.log
        # Bytes of output per stream so far (audit and metrics): the pump's own
        # totals, updated in place as it reads.
        self.output_bytes: dict[str, int] = self._output.output_bytes
        self._pidfd = os.pidfd_open(self.pid)
        self._loop.add_reader(self._pidfd, self._on_exit)
        # One task per process, for its lifetime: aclose (or forget) ends it.
        self._tasks = TaskSet(f"process {process_id}", logger=log)
        self._sender = self._tasks.spawn(self._send_loop(), name="sender")

    # ---- state ---------------------------------------------------------------------

    @property
    def exited(self) -> bool:
        return self.exit_code is not None

    @property
    def closed(self) -> bool:
        return self.closed_seq is not None

    @property
    def replaying(self) -> bool:
        """Whether what is known of the process is still arriving (a re-adopted kept
        process's replay, processes/kept.py): requests about it wait_replayed first."""
        return False

    async def wait_replayed(self) -> None:
        """Until ``replaying`` is over (at once here: a child of the daemon's)."""

    # Read by tests/unit/test_process_managed.py: the sender's cursor and the
    # readers waiting for a change.
    @property
    def _sent(self) -> int:
        return self._output.delivered_seq

    @property
    def _waiters(self) -> Sequence[asyncio.Future[None]]:
        return self._output.waiters

    async def wait_newer(self, after_seq: int, timeout: float) -> None:
        """Long-poll: until output newer than ``after_seq`` exists, the child exited, or timeout."""
        deadline = self._loop.time() + timeout
        while not self.exited and not self.log.has_after(after_seq):
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return
            await self._output.wait_change(remaining)

    async def wait_closed(self, timeout: float) -> None:
        deadline = self._loop.time() + timeout
        while not self.closed:
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return
            await self._output.wait_change(remaining)

    # ---- output --------------------------------------------------------------------

    def _stream_ended(self, fd: int) -> None:
        if fd == self._pty_master:  # the pty master is both output and input
            self._close_stdin()
        if self.exited and not self._output.streaming:
            self._mark_closed()

    def _arm_drain_timer(self) -> None:
        self._drain_mark = self.log.next_seq
        self._drain_timer = self._loop.call_later(self._drain_timeout_s, self._drain_expired)

    def _drain_expired(self) -> None:
        """The child exited a while ago and its pipes are still open.

        Only a *silent* holder (e.g. a daemonised grandchild) is cut off: if output
        arrived since the timer was armed, or the pumps are paused for a slow
        client, the pipe is live and we keep reading until EOF as the reference does.
        """
        if self._output.paused or self.log.next_seq != self._drain_mark:
            self._arm_drain_timer()
            return
        self._abandon_streams()

    def _abandon_streams(self) -> None:
        self._drain_timer = None
        self._output.close_all()
        if self.exited and not self.closed:
            self._mark_closed()

    # ---- exit ----------------------------------------------------------------------

    def _on_exit(self) -> None:
        try:
            pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status, rusage = self.pid, 0, None
        if pid == 0:
            return  # not yet (spurious wakeup)
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = -1
        self._output.release_pty_master()
        if os.WIFSIGNALED(status):
            # As the reference: 128+N through pipes; a pty child killed by a signal reports 1.
            code = 1 if self.tty else 128 + os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status)
        if self._popen is not None:
            self._popen.returncode = code  # the Popen object must never wait() for it again
        self.accounting = _measure(time.monotonic() - self._started, rusage, self.tree)
        if not self._abandon:
            self._output.drain()
        self.exit_code = code
        if self._classify_denial is not None and code != 0:
            self.sandbox_denied = self._classify_denial(code, self._output.tail(DENIAL_TAIL_BYTES))
        self.exit_seq = self.log.reserve()
        self._supervisor.root_exited(self.tree)
        if self._on_exited is not None:
            self._on_exited(self)
        self._output.wake()
        if self._abandon or not self._output.streaming:
            # After process/terminate the reference abandons output collection at once.
            self._abandon_streams()
        else:
            # A background grandchild may hold the pipes; bound how long we wait for EOF.
            self._arm_drain_timer()

    def _mark_closed(self) -> None:
        if self.closed:
            return
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        self._close_stdin()
        self.closed_seq = self.log.reserve()
        self._output.wake()
        acct = self.accounting
        log.info(
            "process %s closed: exit=%s program=%s wall=%.3fs cpu=%.3fs peak_rss=%sKiB%s",
            self.process_id,
            self.exit_code,
            os.path.basename(self.program),
            acct.wall_s if acct else 0.0,
            acct.cpu_s if acct else 0.0,
            acct.max_rss_kib if acct and acct.max_rss_kib is not None else "?",
            " (killed by --process-memory-max)" if acct and acct.oom_kills else "",
        )
        self._on_closed(self)
        for hook in self.close_hooks:  # audit + metrics
            hook(self)

    # ---- notifications -------------------------------------------------------------

    def _pending(self, cursor: int) -> list[tuple[int, object]]:
        events: list[tuple[int, object]] = []
        exit_seq = self.exit_seq
        pid = self.process_id
        for chunk in self.log.since(cursor):
            if exit_seq is not None and cursor < exit_seq < chunk.seq:
                events.append((exit_seq, self._exited_note()))
                exit_seq = None
            events.append((chunk.seq, _output_note(pid, chunk)))
        if exit_seq is not None and exit_seq > cursor:
            events.append((exit_seq, self._exited_note()))
        if self.closed_seq is not None and self.closed_seq > cursor:
            events.append((self.closed_seq, ProcessClosedNotification(pid, self.closed_seq)))
        return events

    def _exited_note(self) -> ProcessExitedNotification:
        assert self.exit_seq is not None and self.exit_code is not None
        return ProcessExitedNotification(
            self.process_id, self.exit_seq, self.exit_code, self.sandbox_denied
        )

    async def _send_loop(self) -> None:
        notify_many = self._session.notify_many
        methods: dict[type, str] = {
            ProcessOutputNotification: m.PROCESS_OUTPUT,
            ProcessExitedNotification: m.PROCESS_EXITED,
            ProcessClosedNotification: m.PROCESS_CLOSED,
        }
        while True:
            events = self._pending(self._output.delivered_seq)
            if not events:
                if self.closed:
                    return
                await self._output.wait_change()
                continue
            # Written out NOTIFY_BATCH at a time (one send each, not one per chunk).
            for at in range(0, len(events), NOTIFY_BATCH):
                batch = events[at : at + NOTIFY_BATCH]
                await notify_many([(methods[type(note)], note) for _, note in batch])
                self._output.delivered(batch[-1][0])
            self._output.caught_up()

    # ---- stdin -----------------------------------------------------------------------

    def write(self, write_id: str, data: bytes) -> WriteStatus:
        if not self.tty and not self.pipe_stdin:
            return "stdinClosed"
        if write_id in self._write_ids:
            return "accepted"  # a retry of a write we already delivered
        if self._terminated:
            # The reference drops its stdin channel on terminate; new writes then fail.
            raise RpcError.internal("failed to write to process stdin")
        self._write_ids[write_id] = None
        if len(self._write_ids) > MAX_WRITE_IDS:
            del self._write_ids[next(iter(self._write_ids))]
        if self._stdin is not None:
            self._stdin.write(data)
        return "accepted"

    def _close_stdin(self) -> None:
        if self._stdin is not None:
            self._stdin.close()
            self._stdin = None

    # ---- signals ---------------------------------------------------------------------

    def interrupt(self) -> None:
        """SIGINT to the foreground process group (the child's own group for pipes)."""
        if self.exited:
            return
        group = self.pid
        if self._pty_master is not None and self._output.stream_open(self._pty_master):
            with contextlib.suppress(OSError):
                group = os.tcgetpgrp(self._pty_master)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGINT)

    def terminate(self) -> bool:
        """SIGKILL the whole tree of the child; True if the child was running.

        Beyond the reference, which kills only the child's process group: every
        process the daemon attributes to this child dies too, setsid and
        double-fork escapees included (the resource-limit cgroup when there is
        one, else the subreaper tree and the start-environment sweep), so a
        terminated dev server never keeps its port. Everything is signalled
        synchronously, before the child's exit can even be reaped, so none of it
        is alive when ``closed`` goes out. Exit code and notifications are the
        reference's. A child that exited on its own is left alone (``running``
        false): its background jobs live on until the session ends, as there.
        """
        if self.exited:
            return False
        self._abandon = True
        self._terminated = True
        # The tree first, while the child is alive and its descendants still hang
        # from it (once it dies they are re-parented to us, and only traced by
        # their start environment); then the child itself, by pidfd.
        self._supervisor.kill(self.tree)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        return True

    # ---- teardown --------------------------------------------------------------------

    async def aclose(self) -> None:
        """Session gone: kill the whole tree, release every fd, stop the sender."""
        self._abandon = True
        self._supervisor.kill(self.tree)
        if not self.exited:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    while not self.exited:
                        await self._output.wait_change()
        if not self.closed:
            self._abandon_streams()
        # A child that would not die: its terminal goes anyway.
        self._output.release_pty_master()
        self._close_stdin()
        await self._tasks.aclose()
        self._output.wake()

    def read_through(self, seq: int) -> None:
        """A process/read returned everything up to ``seq`` (a kept process's log
        holds what a detached session missed until then: processes/kept.py)."""

    def forget(self) -> None:
        """The retention period is over: drop the sender (the process is closed)."""
        self._tasks.cancel()


def _output_note(process_id: str, chunk: Chunk) -> ProcessOutputNotification:
    return ProcessOutputNotification(process_id, chunk.seq, chunk.stream, chunk.data)  # type: ignore[arg-type]
