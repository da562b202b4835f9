"""execserver/server/gil_tuning.py: the daemon's process hands the GIL over every
millisecond (the event loop waits at most that long for a busy worker thread)."""

from __future__ import annotations

import subprocess
import sys

from execserver.server.gil_tuning import SWITCH_INTERVAL_S


def test_a_serving_process_switches_every_millisecond() -> None:
    # In a process of its own: the interval is the whole interpreter's.
    script = (
        "import sys\n"
        "before = sys.getswitchinterval()\n"
        "from execserver.server.gil_tuning import shorten_switch_interval\n"
        "shorten_switch_interval()\n"
        "print(before, sys.getswitchinterval())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert float(out[0]) == 0.005  # CPython's default: what the daemon changes
    assert float(out[1]) == SWITCH_INTERVAL_S == 0.001
