"""How many persistent sandboxed-fs helpers a daemon keeps by default.

A helper serves one resolved policy, and agents each have a workspace of their
own, so a shared daemon needs about one helper per agent: with fewer, every
call of a policy whose helper was retired starts one (~30 ms), and past the
cap the daemon spends its CPUs starting helpers (docs/scale.md). What bounds
them is memory: a helper (bwrap and its interpreter) costs 3.8-4.0 MB PSS
(measured: 20 helpers of a daemon, and one after 4,000 calls; 9.0 MB before
the helper stopped importing msgspec, typing and the rest, 2026-12-06;
benchmarks/fs_helper_cost.py). So the default is what a quarter of the memory
this daemon may use holds at 4 MiB a helper, the smaller of the machine's and
its cgroup's limit (a container's), between 8 and 1,024.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["HELPER_BYTES", "default_max_helpers", "helpers_for_memory"]

HELPER_BYTES: Final = 4 * 1024 * 1024
MEMORY_SHARE: Final = 4  # a quarter
FLOOR: Final = 8
CEILING: Final = 1024
# cgroup v2, then v1: the limit of the cgroup this process is in (as mounted in a
# container: its own).
_LIMIT_FILES: Final = (
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
)


def helpers_for_memory(physical_bytes: int, cgroup_limit: int | None = None) -> int:
    """For a machine of ``physical_bytes`` and this process's cgroup limit (None:
    none; v1's "no limit" is a number larger than any machine)."""
    memory = min(physical_bytes, cgroup_limit) if cgroup_limit else physical_bytes
    return max(FLOOR, min(CEILING, memory // MEMORY_SHARE // HELPER_BYTES))


def _cgroup_limit() -> int | None:
    for path in _LIMIT_FILES:
        try:
            with open(path) as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
        return None  # "max"
    return None


def default_max_helpers() -> int:
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return FLOOR
    return helpers_for_memory(memory, _cgroup_limit())
