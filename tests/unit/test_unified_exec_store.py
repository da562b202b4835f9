"""Process ids and pruning of the unified-exec store (cases ported
from the Codex pruning tests). Only ``exited`` of a stored process matters to
the store, so plain values stand in for processes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from execserver.core.unified_exec.store import (
    MAX_PROCESSES,
    PROTECTED_RECENT,
    ProcessIdAllocator,
    ProcessStore,
)


@dataclass
class Proc:
    exited: bool = False


def _store(n: int, *, exited: frozenset[int] = frozenset()) -> ProcessStore[Proc]:
    store: ProcessStore[Proc] = ProcessStore(max_processes=10, protected_recent=3)
    for i in range(n):
        store.store(i, Proc(i in exited))
        entry = store.get(i)
        assert entry is not None
        entry.in_use = 0
    return store


def test_limits_are_the_reference_constants() -> None:
    assert (MAX_PROCESSES, PROTECTED_RECENT) == (64, 8)


def test_pruning_prefers_exited_processes_outside_recently_used() -> None:
    store = _store(10, exited=frozenset({2, 5, 8}))
    # 7, 8, 9 are the three most recent: 8 is protected although exited.
    assert store.prune_candidate() == 2
    pruned = store.store(99, Proc())
    assert pruned is not None and pruned.id == 2
    assert 2 not in store and 99 in store


def test_pruning_falls_back_to_lru_when_no_exited() -> None:
    store = _store(10)
    store.touch(0)
    assert store.prune_candidate() == 1


def test_pruning_protects_recent_processes_even_if_exited() -> None:
    store = _store(10, exited=frozenset({9}))
    assert store.prune_candidate() == 0


def test_pruning_skips_processes_in_use() -> None:
    store = _store(10)
    entry = store.get(0)
    assert entry is not None
    entry.in_use = 1
    assert store.prune_candidate() == 1


def test_store_below_the_limit_prunes_nothing() -> None:
    store = _store(3)
    assert store.store(3, Proc()) is None
    assert sorted(store.ids()) == [0, 1, 2, 3]


def test_deterministic_ids_count_up_and_skip_reserved() -> None:
    ids = ProcessIdAllocator(deterministic=True)
    assert [ids.allocate() for _ in range(3)] == [1000, 1001, 1002]
    ids.release(1001)
    assert not ids.is_reserved(1001)
    assert ids.allocate() == 1003


def test_random_ids_are_in_range_and_unique() -> None:
    ids = ProcessIdAllocator()
    seen = {ids.allocate() for _ in range(2000)}
    assert len(seen) == 2000
    assert all(1000 <= i < 100_000 for i in seen)


@pytest.mark.parametrize("count", [1, 5])
def test_clear_returns_every_entry(count: int) -> None:
    store = _store(count)
    assert sorted(e.id for e in store.clear()) == list(range(count))
    assert len(store) == 0
