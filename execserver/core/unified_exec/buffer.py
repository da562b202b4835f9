"""Head/tail output buffer.

A process may print far more than anyone will read. The buffer keeps the
first half of its budget from the start of the output and the second half
from the most recent output, and only counts what falls in between, so
memory stays bounded and both the command's banner and its final lines
survive.
"""

from __future__ import annotations

from collections import deque

__all__ = ["DEFAULT_MAX_BYTES", "HeadTailBuffer"]

DEFAULT_MAX_BYTES = 1024 * 1024
_COALESCE_BELOW = 4096


class HeadTailBuffer:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max(0, max_bytes)
        self.head_budget = self.max_bytes // 2
        self.tail_budget = self.max_bytes - self.head_budget
        self._head = bytearray()
        # Tail chunks as they came, trimmed from the left when over budget; a
        # deque of chunks (not one bytearray) keeps appends O(chunk).
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.omitted = 0

    def __len__(self) -> int:
        return len(self._head) + self._tail_len

    @property
    def total_seen(self) -> int:
        return len(self) + self.omitted

    @property
    def tail_chunks(self) -> int:
        return len(self._tail)

    def push(self, chunk: bytes) -> None:
        if not chunk:
            return
        room = self.head_budget - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
            if not chunk:
                return
        if self.tail_budget == 0:
            self.omitted += len(chunk)
            return
        if len(chunk) >= self.tail_budget:
            # The chunk alone fills the tail: everything before its last bytes goes.
            self.omitted += self._tail_len + len(chunk) - self.tail_budget
            self._tail.clear()
            self._tail.append(chunk[-self.tail_budget :])
            self._tail_len = self.tail_budget
            return
        if self._tail and len(self._tail[-1]) < _COALESCE_BELOW:
            # Many tiny writes (a progress bar) would otherwise cost one deque
            # entry each.
            self._tail[-1] += chunk
        else:
            self._tail.append(chunk)
        self._tail_len += len(chunk)
        self._trim_tail()

    def _trim_tail(self) -> None:
        excess = self._tail_len - self.tail_budget
        while excess > 0:
            first = self._tail[0]
            if len(first) <= excess:
                self._tail.popleft()
                self._tail_len -= len(first)
                self.omitted += len(first)
                excess -= len(first)
            else:
                self._tail[0] = first[excess:]
                self._tail_len -= excess
                self.omitted += excess
                excess = 0

    def contents(self) -> bytes:
        """Head and tail joined, without a marker."""
        return bytes(self._head) + b"".join(self._tail)

    def render(self) -> bytes:
        """Head and tail with ``... N bytes omitted ...`` between them when the
        middle was dropped."""
        if not self.omitted:
            return self.contents()
        marker = f"\n... {self.omitted} bytes omitted ...\n".encode()
        return bytes(self._head) + marker + b"".join(self._tail)

    def drain(self) -> tuple[bytes, int]:
        """Rendered content and the omitted count; the buffer starts over."""
        out, omitted = self.render(), self.omitted
        self._head = bytearray()
        self._tail.clear()
        self._tail_len = 0
        self.omitted = 0
        return out, omitted
