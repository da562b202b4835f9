"""The collector settings the daemon applies at start-up (server/memory_tuning.py)."""

from __future__ import annotations

import gc

from execserver.server.memory_tuning import freeze_startup_objects


def test_what_survived_start_up_leaves_the_collected_generations() -> None:
    class Built:  # stands for what start-up builds: it survives and stays
        pass

    survivors = [Built() for _ in range(1000)]
    try:
        frozen = freeze_startup_objects()
        assert frozen == gc.get_freeze_count() >= len(survivors)
        # A full collection no longer walks them.
        tracked = {id(o) for o in gc.get_objects()}
        assert not any(id(o) in tracked for o in survivors)
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
    assert id(survivors[0]) in {id(o) for o in gc.get_objects()}
