"""The retained output of one process, addressed by sequence number.

One counter per process numbers every event: output chunks, the exit and the
close each take the next value. Only output chunks are kept here; the log
retains the most recent ``cap_bytes`` of them and evicts the oldest whole
chunks, so a reader that fell behind sees the loss as a seq gap and never as
bytes missing inside a chunk.
"""

from __future__ import annotations

import bisect
import operator
from typing import NamedTuple

# ServerConfig.process_retained_bytes: the last 1 MiB of output, as the reference.
from execserver.config import DEFAULT_RETAINED_BYTES

__all__ = ["DEFAULT_RETAINED_BYTES", "Chunk", "OutputLog"]


class Chunk(NamedTuple):
    seq: int
    stream: str
    data: bytes


# A C-level key for bisect: a Python function here was called once per bisection step.
_seq_of = operator.itemgetter(0)


class OutputLog:
    __slots__ = ("_bytes", "_chunks", "_head", "cap_bytes", "next_seq")

    def __init__(self, cap_bytes: int = DEFAULT_RETAINED_BYTES) -> None:
        self.cap_bytes = cap_bytes
        self.next_seq = 1  # the next unused seq (what process/read reports as nextSeq)
        # A list with a moving head instead of a deque: reads bisect by seq.
        self._chunks: list[Chunk] = []
        self._head = 0
        self._bytes = 0

    @property
    def retained_bytes(self) -> int:
        return self._bytes

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1

    @property
    def first_seq(self) -> int | None:
        """The seq of the oldest chunk retained (None: none is)."""
        chunks = self._chunks
        return chunks[self._head].seq if len(chunks) > self._head else None

    def append(self, stream: str, data: bytes) -> int:
        seq = self.next_seq
        self.next_seq = seq + 1
        self._chunks.append(Chunk(seq, stream, data))
        self._bytes += len(data)
        if self._bytes > self.cap_bytes:
            self._evict()
        return seq

    def evicts_after(self, length: int, kept_from: int) -> bool:
        """Whether appending ``length`` bytes would evict a chunk with seq >=
        ``kept_from`` (0: nothing is to be kept)."""
        if not kept_from:  # the common case, on every chunk: nothing held back
            return False
        over = self._bytes + length - self.cap_bytes
        if over <= 0:
            return False
        chunks = self._chunks
        index = self._head
        while over > 0 and index < len(chunks):
            if chunks[index].seq >= kept_from:
                return True
            over -= len(chunks[index].data)
            index += 1
        return False

    def reserve(self) -> int:
        """Take a seq for a non-output event (exit, close)."""
        seq = self.next_seq
        self.next_seq = seq + 1
        return seq

    def _evict(self) -> None:
        chunks = self._chunks
        head = self._head
        while self._bytes > self.cap_bytes and head < len(chunks):
            self._bytes -= len(chunks[head].data)
            head += 1
        # Compact now and then so the dead prefix never dominates memory.
        if head > 256 and head * 2 > len(chunks):
            del chunks[:head]
            head = 0
        self._head = head

    def _index_after(self, after_seq: int) -> int:
        return bisect.bisect_right(self._chunks, after_seq, lo=self._head, key=_seq_of)

    def since(self, after_seq: int) -> list[Chunk]:
        """Every retained chunk with seq > after_seq."""
        return self._chunks[self._index_after(after_seq) :]

    def has_after(self, after_seq: int) -> bool:
        chunks = self._chunks
        return len(chunks) > self._head and chunks[-1].seq > after_seq

    def read(self, after_seq: int, max_bytes: int | None) -> tuple[list[Chunk], int]:
        """Chunks after ``after_seq`` within ``max_bytes``, and the nextSeq to report.

        As the reference (measured): the first chunk is returned even when it alone
        exceeds the budget. With a budget, nextSeq is the seq after the last returned
        chunk whenever one was returned (even if nothing was left out); without one,
        or when nothing was returned, it is the next unused seq.
        """
        chunks = self._chunks
        # _index_after inlined: this runs on every process/read poll.
        start = bisect.bisect_right(chunks, after_seq, self._head, key=_seq_of)
        if max_bytes is None:
            return chunks[start:], self.next_seq
        count = len(chunks)
        if start == count:
            return [], self.next_seq
        total = len(chunks[start].data)  # the first chunk goes whatever its size
        end = start + 1
        while end < count:
            total += len(chunks[end].data)
            if total > max_bytes:
                break
            end += 1
        return chunks[start:end], chunks[end - 1].seq + 1
