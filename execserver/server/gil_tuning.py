"""The GIL hand-over interval of the daemon's process.

The event loop's thread drops the GIL at every blocking call (a statx of the fs
helpers' file identities, a /proc read at a process's exit, a pipe read) and
takes it back afterwards. When a worker thread is running Python code meanwhile
(a policy resolution, a spawn's preparation) the loop waits for it to give the
GIL up, which CPython asks of it only after the switch interval, 5 ms by
default: the convoy effect (https://bugs.python.org/issue7946). At 1,000 agents
about one worker thread is runnable at any time, and every statx of the dozen
per sandboxed fs call could cost the loop those 5 ms. Measured on the benchmark
VM with one thread spinning in Python: twelve statx calls through ctypes (which
releases the GIL) took 8.5 ms at p99 with the default interval, 0.06 ms with
1 ms (31 and 28 µs at p50).

A shorter interval costs CPU-bound threads more hand-overs between themselves
(a few µs each, one per millisecond at most); the daemon's threads wait on
system calls far more than they compute. The identity statx themselves now keep
the GIL (``execserver/sandbox/statx.py`` ``holding_gil``): a hand-over, however
quick, cost more than the system call on a cached path.
"""

from __future__ import annotations

import sys
from typing import Final

__all__ = ["SWITCH_INTERVAL_S", "shorten_switch_interval"]

SWITCH_INTERVAL_S: Final = 0.001


def shorten_switch_interval() -> None:
    """Let the event loop's thread take the GIL back within a millisecond."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
