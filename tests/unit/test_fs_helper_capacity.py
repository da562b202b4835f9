"""The default number of persistent sandboxed-fs helpers follows the memory this
daemon may use (execserver/fs/sandboxed/capacity.py): a quarter of it at 4 MiB
per helper, between 8 and 1,024; a container's cgroup limit counts, not the
host's memory."""

from __future__ import annotations

from execserver.fs.sandboxed.capacity import default_max_helpers, helpers_for_memory

GIB = 1 << 30


def test_a_quarter_of_the_memory_at_four_mib_a_helper_within_bounds() -> None:
    assert helpers_for_memory(2 * GIB) == 128
    assert helpers_for_memory(24 * GIB) == 1024
    assert helpers_for_memory(8 * GIB) == 512
    assert helpers_for_memory(100 << 20) == 8  # never fewer than the old fixed cap
    assert helpers_for_memory(1024 * GIB) == 1024


def test_a_cgroup_limit_below_the_machines_memory_is_what_counts() -> None:
    assert helpers_for_memory(64 * GIB, 2 * GIB) == 128  # a 2 GiB container on a big host
    assert helpers_for_memory(8 * GIB, 9223372036854771712) == 512  # v1: no limit
    assert helpers_for_memory(8 * GIB, None) == 512


def test_this_host_gets_a_cap_within_the_bounds() -> None:
    assert 8 <= default_max_helpers() <= 1024
