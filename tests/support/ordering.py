"""The order the suite's tests start in: the longest first.

`make test` runs the suite on pytest-xdist workers with ``--dist loadgroup``,
which hands out the tests in collection order, a few at a time to whichever
worker has room. A test of a minute collected late starts when the others are
nearly done, and its worker then runs on alone for that minute: the suite takes
as long as its slowest worker. Started first, the long tests run while every
worker is busy, and the end of the run is made of short tests that share out
evenly.

``LONGEST_FIRST`` names the tests that take 5 s or more (on a 2-core machine
under the suite's own load, ``--durations``), longest first, by node id prefix:
a file's path stands for each of its tests. The rest keep pytest's order. A stale
or missing entry costs only balance, never a test; the list is worth refreshing
when a test's duration changes a lot (``make test`` prints the slowest).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

__all__ = ["LONGEST_FIRST", "longest_first"]

LONGEST_FIRST: tuple[str, ...] = (
    "tests/reliability/test_crash_storm.py",  # ~55-75 s
    "tests/integration/test_bench_scale.py",  # ~50 s
    "tests/interop/test_codex_cli",  # ~50 s in all, one worker's (xdist_group)
    "tests/reliability/test_atheris_decoder.py",  # ~35 s
    # ~25 s in all, one worker's (xdist_group): the image is built once.
    "tests/container/test_image.py",
    "tests/survival/test_survive_fifty.py",  # ~22 s
    "tests/security/test_tenancy_cgroups.py::test_b_pids_quota_holds",  # ~16 s
    "tests/unit/test_msgpack_lite.py::test_the_daemons_requests_are_what_the_helper_reads",
    "tests/survival/test_survive_streaming.py",
    "tests/integration/test_process_output.py::test_a_client_that_stops_reading_loses_nothing",
    "tests/integration/test_session_processes.py::test_escapee_outlives_its_retained_process",
    "tests/security/test_proxy_hardening.py::test_a_child_cannot_exhaust",
    "tests/security/test_tenancy_cgroups.py",
    "tests/unit/test_agent_sandbox_manifests.py::test_the_embedded_pod_is_checked",
    "tests/survival/test_survive_daemon.py::test_big_output_to_a_client_that_does_not_read",
    "tests/survival/test_survive_network.py::test_a_fetch_made_while_no_daemon_runs",
    "tests/security/test_unrestricted_containment.py::test_terminate_signals_exit_codes",
    "tests/security/test_fs_helper_reuse.py",
    "tests/integration/test_process_terminate_tree.py",
    "tests/security/test_launch_planning.py::test_deny_glob_expansion",
    "tests/survival/test_upgrade.py",
    "tests/security/test_tenancy_ceiling.py::test_no_accepted_request_exceeds_the_ceiling",
    "tests/integration/test_transport.py::test_oversized_message_is_closed_with_1009",
    "tests/reliability/test_resume_chaos.py",
)


def _rank(nodeid: str, prefixes: Sequence[str]) -> int:
    for index, prefix in enumerate(prefixes):
        if nodeid.startswith(prefix):
            return index
    return len(prefixes)


def longest_first(items: list[pytest.Item], prefixes: Sequence[str] = LONGEST_FIRST) -> None:
    """Reorder ``items`` in place: those ``prefixes`` name first, in the prefixes'
    order; within one prefix, and for all the others, pytest's order (a stable
    sort, the same in every worker, as xdist requires)."""
    items.sort(key=lambda item: _rank(item.nodeid, prefixes))
