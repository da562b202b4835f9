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
