"""Per-process event ordering: publish strictly by seq, exactly once.

The server numbers every event of a process (output, exited, closed) from one
counter, but does not send them in that order: ``exited`` can overtake
trailing output, and events produced while no connection was attached are
never sent at all. ``SeqOrderer`` parks early events, drops duplicates, and
fills holes from a ``process/read`` answer (``reconcile``). It is pure logic
with no I/O, so every ordering rule is unit-tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from execserver.client.events import Closed, Exited, Output, SeqEvent
from execserver.wire.process import ReadResponse

__all__ = ["SeqOrderer"]


@dataclass
class Reconciled:
    """What a ``process/read`` answer made publishable, and what is still missing."""

    events: list[SeqEvent]
    unexplained: list[int]


@dataclass
class SeqOrderer:
    next_seq: int = 1
    parked: dict[int, SeqEvent] = field(default_factory=dict)
    exited_known: bool = False
    closed_published: bool = False

    @property
    def last_published(self) -> int:
        return self.next_seq - 1

    @property
    def has_gap(self) -> bool:
        return bool(self.parked)

    def push(self, event: SeqEvent) -> list[SeqEvent]:
        """Accept one event; return the events that can now be published, in order."""
        if self.closed_published or event.seq < self.next_seq or event.seq in self.parked:
            return []
        if isinstance(event, Exited):
            self.exited_known = True
        self.parked[event.seq] = event
        return self._drain()

    def reconcile(self, read: ReadResponse) -> Reconciled:
        """Fill holes from a ``process/read`` made with ``afterSeq`` at or below our cursor.

        ``read`` must not have been cut short by ``maxBytes``: then ``nextSeq`` is
        the process's next unused seq, so every seq below it belongs to an output
        chunk, the exit or the close. Chunks fill their own seqs; ``closed`` owns
        ``nextSeq - 1``; a reported exit we never saw owns the single seq left.
        Anything else still missing is output the server no longer retains.
        """
        events: list[SeqEvent] = []
        for chunk in read.chunks:
            events += self.push(Output(chunk.seq, chunk.stream, chunk.chunk))
        if self.closed_published:
            return Reconciled(events, [])
        upper = read.next_seq
        missing = [s for s in range(self.next_seq, upper) if s not in self.parked]
        if read.closed and missing and missing[-1] == upper - 1:
            missing.pop()
            closed_seq = upper - 1
        else:
            closed_seq = None
        exited_seq = None
        if read.exited and not self.exited_known and len(missing) == 1:
            exited_seq = missing.pop()
        if missing:
            # Do not publish anything synthesised past a hole; the caller decides
            # whether to wait for stragglers or to fail the process.
            return Reconciled(events, missing)
        if exited_seq is not None:
            events += self.push(Exited(exited_seq, read.exit_code or 0, read.sandbox_denied))
        if closed_seq is not None:
            events += self.push(Closed(closed_seq))
        return Reconciled(events, [])

    def _drain(self) -> list[SeqEvent]:
        ready: list[SeqEvent] = []
        while self.next_seq in self.parked:
            event = self.parked.pop(self.next_seq)
            self.next_seq += 1
            ready.append(event)
            if isinstance(event, Closed):
                self.closed_published = True
                self.parked.clear()
                break
        return ready
