"""Process ids and the store of processes that outlive their call.

Ids are small random integers the model can type back; they are reserved at
allocation so two concurrent calls never share one, and released when a call
fails before storing. At most 64 processes are kept: storing one more prunes
one, never among the 8 most recently used, preferring processes that have
exited, and never one a running call is using.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = [
    "MAX_PROCESSES",
    "PROTECTED_RECENT",
    "WARNING_THRESHOLD",
    "Exitable",
    "ProcessIdAllocator",
    "ProcessStore",
    "StoredProcess",
]

MAX_PROCESSES = 64
PROTECTED_RECENT = 8
WARNING_THRESHOLD = 60
ID_RANGE = (1000, 100_000)


class ProcessIdAllocator:
    """Random ids in [1000, 100000); ``deterministic`` hands out 1000, 1001, ..."""

    def __init__(self, *, deterministic: bool = False, rng: random.Random | None = None) -> None:
        self._reserved: set[int] = set()
        self._counter: Iterator[int] | None = (
            itertools.count(ID_RANGE[0]) if deterministic else None
        )
        self._rng = rng or random.SystemRandom()

    def allocate(self) -> int:
        while True:
            if self._counter is not None:
                candidate = next(self._counter)
            else:
                candidate = self._rng.randrange(*ID_RANGE)
            if candidate not in self._reserved:
                self._reserved.add(candidate)
                return candidate

    def release(self, process_id: int) -> None:
        self._reserved.discard(process_id)

    def is_reserved(self, process_id: int) -> bool:
        return process_id in self._reserved


class Exitable(Protocol):
    @property
    def exited(self) -> bool: ...


P = TypeVar("P", bound=Exitable)


@dataclass
class StoredProcess(Generic[P]):
    id: int
    process: P
    last_used: int
    in_use: int = 0  # calls currently working with it


class ProcessStore(Generic[P]):
    """Stored processes by id, with their recency; only ``exited`` of a
    process matters here."""

    def __init__(
        self,
        *,
        max_processes: int = MAX_PROCESSES,
        protected_recent: int = PROTECTED_RECENT,
    ) -> None:
        self.max_processes = max_processes
        self.protected_recent = protected_recent
        self._entries: dict[int, StoredProcess[P]] = {}
        self._clock = itertools.count(1)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, process_id: int) -> bool:
        return process_id in self._entries

    def ids(self) -> list[int]:
        return list(self._entries)

    def get(self, process_id: int) -> StoredProcess[P] | None:
        return self._entries.get(process_id)

    def touch(self, process_id: int) -> None:
        entry = self._entries.get(process_id)
        if entry is not None:
            entry.last_used = next(self._clock)

    def store(self, process_id: int, process: P) -> StoredProcess[P] | None:
        """Store ``process`` (marked in use by the storing call). Returns the
        entry pruned to make room, which the caller must terminate."""
        pruned = None
        if len(self._entries) >= self.max_processes:
            victim = self.prune_candidate()
            if victim is not None:
                pruned = self._entries.pop(victim)
        self._entries[process_id] = StoredProcess(process_id, process, next(self._clock), in_use=1)
        return pruned

    def prune_candidate(self) -> int | None:
        by_recency = sorted(self._entries.values(), key=lambda e: e.last_used, reverse=True)
        protected = {e.id for e in by_recency[: self.protected_recent]}
        candidates = [e for e in reversed(by_recency) if e.id not in protected and e.in_use == 0]
        for entry in candidates:
            if entry.process.exited:
                return entry.id
        return candidates[0].id if candidates else None

    def remove(self, process_id: int) -> StoredProcess[P] | None:
        return self._entries.pop(process_id, None)

    def clear(self) -> list[StoredProcess[P]]:
        entries = list(self._entries.values())
        self._entries.clear()
        return entries
