"""The collector settings the daemon applies at start-up (server/memory_tuning.py)."""

from __future__ import annotations

import subprocess
import sys

# Run in a process of its own, with no other thread: in the suite's process a thread
# left by an earlier test could free frozen objects between two counts of them.
_CHECK = """
import gc

from execserver.server.memory_tuning import freeze_startup_objects


class Built:  # stands for what start-up builds: it survives and stays
    pass


survivors = [Built() for _ in range(1000)]
try:
    frozen = freeze_startup_objects()
    assert frozen == gc.get_freeze_count() >= len(survivors), (frozen, gc.get_freeze_count())
    # A full collection no longer walks them.
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(o) in tracked for o in survivors)
finally:
    gc.unfreeze()
assert gc.get_freeze_count() == 0
assert id(survivors[0]) in {id(o) for o in gc.get_objects()}
print("ok")
"""


def test_what_survived_start_up_leaves_the_collected_generations() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHECK], capture_output=True, text=True, check=False, timeout=60
    )
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr


# Operations in flight under load: objects that outlive a few young collections and
# then die. With CPython's thresholds they reach the oldest generation, and full
# collections follow that walk the whole heap for nothing; with the daemon's, the
# same churn brings none.
_CHURN = """
import gc, sys

from execserver.server.memory_tuning import tune_collector

if sys.argv[1] == "tuned":
    tune_collector()
heap = [[i] for i in range(200_000)]  # the sessions' long-lived state (lists: tracked)
gc.collect()
full = []
def count(phase, info):
    if phase == "stop" and info["generation"] == 2:
        full.append(1)
gc.callbacks.append(count)
for burst in range(40):  # a burst of requests, answered
    in_flight = [[i] for i in range(30_000)]
    del in_flight
print(len(full))
"""


def _full_collections(mode: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def test_operations_in_flight_bring_no_full_collection_with_the_daemons_thresholds() -> None:
    assert _full_collections("default") > 0  # the churn does bring them by default
    assert _full_collections("tuned") == 0
