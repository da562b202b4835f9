"""The sandboxed fs helpers the daemon has running, by pid, for the process supervisor.

Helpers are the daemon's own direct children, in sessions of their own, started
after many a command; to the supervisor's escapee attribution
(``execserver.processes.tree``) they look like a command's orphans. A persistent
helper (shared by every session) whose environment resembled a command's was
taken into that command's tree and killed when its session ended, failing the
calls every other session had in it. Each spawn site registers its helper here
right after the spawn; the supervisor never attributes these pids.

Between the spawn and the registration the daemon awaits the child's pipes, and a
command's root exiting in that moment has its orphans attributed; so each helper
is also spawned with a marker in its environment (``helper_environment``), which
the attribution reads anyway, and an environment carrying it matches no tree.
The event loop spawns helpers (fork to exec in one call that returns once the
child has exec'd), so the supervisor, which runs on the loop too, never sees a
helper before its exec, when its environment would still be the daemon's.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from execserver.priority import NICE_ENV

__all__ = [
    "HELPER_ENV_ENTRY",
    "helper_environment",
    "helper_pids",
    "is_helper",
    "register_helper",
    "unregister_helper",
    "unregistered",
]

# Random per daemon: a command cannot name it to pass for a helper without reading
# a helper's environment first (an ``env -i`` escapee goes unattributed anyway).
_HELPER_ENV_NAME = "EXECSERVER_HELPER"
_HELPER_ENV_VALUE = secrets.token_hex(8)
# As /proc/<pid>/environ gives it (execserver.processes.tree.read_environ).
HELPER_ENV_ENTRY = f"{_HELPER_ENV_NAME}={_HELPER_ENV_VALUE}".encode()

_helpers: dict[int, int] = {}  # pid -> start time, so a recycled pid is told apart
# The table's size after its last pruning (register_helper), at least _PRUNE_FLOOR.
_PRUNE_FLOOR = 16
_pruned_at = _PRUNE_FLOOR


def _start_time(pid: int) -> int | None:
    # Field 22 of /proc/<pid>/stat, as execserver.processes.tree reads it (this
    # package may not import that one). The name in field 2 may hold spaces and
    # parentheses, so the fields are counted after the last ')'.
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2 :].split()[19])


def register_helper(pid: int) -> None:
    """Right after spawning a helper: ``pid`` is the daemon's, never a command's.
    Helpers that have gone are dropped here (one-shot helpers come and go with
    every call), so the supervisor's look-ups read no /proc files: whenever the
    table has doubled since the last pruning, so that a registration costs
    constant time on average (pruning at each one read every helper's stat: a
    million reads while 1,000 agents' helpers started)."""
    global _pruned_at
    if len(_helpers) >= 2 * _pruned_at:
        for known, known_start in list(_helpers.items()):
            if _start_time(known) != known_start:
                del _helpers[known]
        _pruned_at = max(len(_helpers), _PRUNE_FLOOR)
    start = _start_time(pid)
    if start is not None:
        _helpers[pid] = start


def unregister_helper(pid: int) -> None:
    """The helper ``pid`` has exited and been reaped: its pid is free for anyone."""
    _helpers.pop(pid, None)


def is_helper(pid: int) -> bool:
    """Whether ``pid`` is a registered helper (``helper_pids`` without the copy)."""
    return pid in _helpers


def unregistered(pids: set[int]) -> set[int]:
    """``pids`` without the registered helpers (``pids`` is emptied of them)."""
    pids.difference_update(_helpers)
    return pids


def helper_environment(env: Mapping[str, str], nice: int = 0) -> dict[str, str]:
    """``env`` plus the helper marker, and the nice steps the helper takes when
    ``nice`` (execserver/priority.py): the environment to spawn a helper with."""
    steps = {NICE_ENV: str(nice)} if nice > 0 else {}
    return {**env, **steps, _HELPER_ENV_NAME: _HELPER_ENV_VALUE}


def helper_pids() -> set[int]:
    """The helpers registered and not yet seen gone (at most a few: the pool's cap
    of persistent helpers and the one-shot calls in flight)."""
    return set(_helpers)
