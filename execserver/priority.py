"""What the daemon starts runs a few nice steps below the daemon's own event loop.

Every request, a command's output, a ``process/terminate`` goes through one event
loop. When the daemon's commands and its sandboxed fs helpers keep the CPUs busy,
the kernel shares CPU time between them and the loop by weight; at equal weight
each busy child counts as much as the loop, and with hundreds of them the loop
waits for a CPU behind all of them: every answer is late, a terminate too.
Measured with 1,000 agents on two CPUs, the daemon in a CPU cgroup of its own as
in a container (docs/scale.md): with the commands and helpers five steps below
the loop, 206-214 operations/s and a loop lag p99 of 48-51 ms in three levels,
against 135-173 and 68-128 ms at the loop's priority.

On Linux a nice value is a thread's, and a child starts with the nice value of
the thread that forked it. So the daemon's loop keeps its own, the threads that
start commands (the supervisor's spawn threads) take ``steps`` more once, and a
helper program the loop forks (the fs helpers, the keepers' zygote) lowers itself
first thing. A nice value only orders tasks that share a scheduling group: on
cgroup v2 a command's own cgroup or its tenant's group is a sibling of the
daemon's, so the daemon gives those cgroups the steps as a CPU weight
(containment/factory.py ``_weight_files``); where the kernel groups by session
(autogroup, on tasks in the root CPU cgroup) each command's session is a group
of its own.
"""

from __future__ import annotations

# The fs helper imports this module: nothing it does not need (not even typing).
import os

__all__ = ["MAX_NICE", "NICE_ENV", "lower_self", "nice_from_env"]

MAX_NICE = 19
# How a helper program the daemon starts learns its steps (its environment is the
# daemon's choice, never a command's).
NICE_ENV = "EXECSERVER_NICE_STEPS"


def lower_self(steps: int) -> None:
    """Lower the calling thread (and what it starts from now on) by ``steps`` nice
    steps, at most to the lowest priority; nothing when ``steps`` is 0. Lowering
    one's own priority needs no privilege; it cannot be undone without one."""
    if steps > 0:
        os.nice(steps)


def nice_from_env(text: str | None) -> int:
    """The steps a helper program was told to take (``text``, its ``NICE_ENV``): 0
    when not told, or told nonsense."""
    return min(int(text), MAX_NICE) if text is not None and text.isdigit() else 0
