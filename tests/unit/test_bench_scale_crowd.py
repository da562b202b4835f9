"""An agents' process of benchmarks/scale.py lowers its own session's CPU
priority, not its parent's (benchmarks/scale_crowd.py says why)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GROUP = "/proc/self/autogroup"

CHILD = f"""
import os
from benchmarks.scale_crowd import lower_autogroup
print(lower_autogroup(7))
print(open({GROUP!r}).read().strip() if os.path.exists({GROUP!r}) else "")
"""


def _own_group() -> str:
    with open(GROUP) as group:
        return group.read().strip()


def _group_name(line: str) -> str:
    # A task still in the root autogroup (its session never called setsid
    # since boot, as under a CI runner started by pid 1) reads an empty line.
    return line.split()[0] if line else "(root)"


def test_an_agents_process_lowers_its_own_sessions_cpu_priority() -> None:
    before = _own_group() if os.path.exists(GROUP) else ""
    run = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        start_new_session=True,  # as benchmarks/scale.py Crowd.start does
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lowered, group = run.stdout.splitlines()
    if not os.path.exists(GROUP):
        assert (lowered, group) == ("False", "")  # no autogroup in this kernel
        return
    if os.geteuid() == 0:
        assert lowered == "True"
    if lowered == "True":
        assert group.endswith(" nice 7"), group
        assert _group_name(group) != _group_name(before), "the child's session is its own"
    assert _own_group() == before  # the parent's group is untouched
