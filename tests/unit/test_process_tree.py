"""Process-tree tracking on real processes: descendants, setsid escapees, the kill."""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from execserver.processes.tree import (
    ClaimedPids,
    ProcessTree,
    boot_ticks,
    claim_unowned_children,
    claimed_pids,
    descendants,
    kill_now,
    kill_trees,
    read_descendant_table,
    read_proc_table,
    read_stat,
)
from execserver.sandbox.helper_pids import register_helper, unregister_helper


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait(predicate: object, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def tree_root() -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    """A session leader with a plain background job and a setsid escapee."""
    script = "sleep 1000 & echo $!; setsid sleep 1000 & echo $!; echo ready; wait"
    proc = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]
    pids = [int(x) for x in lines[:2]]
    assert _wait(lambda: os.getsid(pids[1]) == pids[1])
    try:
        yield proc, pids
    finally:
        for pid in [proc.pid, *pids]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                continue
        proc.wait()
        proc.stdout.close()


def test_stat_and_descendants(tree_root: tuple[subprocess.Popen[bytes], list[int]]) -> None:
    proc, (job, escapee) = tree_root
    info = read_stat(proc.pid)
    assert info is not None and info.sid == proc.pid and info.pgid == proc.pid
    table = read_proc_table()
    assert {job, escapee} <= descendants([proc.pid], table)
    assert table.by_session[proc.pid].count(job) == 1
    assert escapee not in table.by_session.get(proc.pid, [])


def test_the_descendant_table_is_the_subtree_of_the_whole_table(
    tree_root: tuple[subprocess.Popen[bytes], list[int]],
) -> None:
    """Daemon shutdown reads only its own subtree; it must find what a whole scan
    finds there (the setsid escapee included) and nothing else."""
    proc, (job, escapee) = tree_root
    mine = read_descendant_table(proc.pid)
    assert set(mine) == descendants([proc.pid], read_proc_table()) == {job, escapee}
    assert mine[escapee].sid == escapee and mine[job].sid == proc.pid
    assert proc.pid in read_descendant_table(os.getpid())


def test_kill_reaches_the_setsid_escapee(
    tree_root: tuple[subprocess.Popen[bytes], list[int]],
) -> None:
    proc, (job, escapee) = tree_root
    start = read_stat(proc.pid)
    assert start is not None
    tree = ProcessTree(proc.pid, start.start)
    tree.refresh(read_proc_table())
    assert {job, escapee} <= set(tree.tracked)
    kill_trees([tree], [tree])
    proc.wait()
    assert _wait(lambda: _dead(job) and _dead(escapee))


def test_kill_now_walks_the_tree_without_a_sweep(
    tree_root: tuple[subprocess.Popen[bytes], list[int]],
) -> None:
    """The request-path kill: nothing recorded yet, the walk from the live root finds both."""
    proc, (job, escapee) = tree_root
    start = read_stat(proc.pid)
    assert start is not None
    tree = ProcessTree(proc.pid, start.start)
    assert kill_now(tree, ClaimedPids(collections.Counter([proc.pid]), [tree])) >= 2
    proc.wait()
    assert _wait(lambda: _dead(job) and _dead(escapee))


ORPHAN_ENV = {"PATH": "/usr/bin:/bin", "MARKER": "tree-a"}


@contextlib.contextmanager
def unrecorded_child(env: dict[str, str]) -> Iterator[int]:
    """An unrecorded child of ours in its own session, standing for an orphan the
    daemon inherited as subreaper; its pid once its environment is readable.

    Popen returns once close-on-exec fds are closed, which is before the kernel has
    set up the new image's environment: /proc/PID/environ reads empty until then
    (and again during a second exec). "ready" is printed by the program itself, so
    its exec is complete and its environment readable when we look."""
    proc = subprocess.Popen(
        ["bash", "-c", "echo ready; read -r _"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == b"ready\n"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()


def test_escapee_of_an_exited_root_is_claimed_by_environment() -> None:
    # It is attributed by the environment it started with: a tree started before
    # the orphan with the same environment claims it; one with another does not.
    with unrecorded_child(ORPHAN_ENV) as pid:
        matching = ProcessTree(1, 0, frozenset(f"{k}={v}".encode() for k, v in ORPHAN_ENV.items()))
        other = ProcessTree(2, 0, frozenset({b"PATH=/usr/bin:/bin", b"MARKER=tree-b", b"X=1"}))
        claim_unowned_children([other, matching], read_proc_table())
        assert pid in matching.tracked and pid not in other.tracked


def test_claimed_pids_built_lazily_answer_as_the_whole_set_does() -> None:
    """ClaimedPids (what a root's exit and a kill test against) skips building the
    whole set for the roots, the helpers and the pids given besides; every answer
    is claimed_pids' all the same."""
    first = ProcessTree(100, 1, tracked={101: 1, 102: 1}, unread={103: 1})
    second = ProcessTree(200, 1, tracked={201: 1})
    trees = [first, second]
    roots = collections.Counter(tree.root for tree in trees)
    for but in (None, first, second):
        whole = claimed_pids(trees, but)
        lazy = ClaimedPids(roots, trees, but, also=[300])
        for pid in range(1, 400):
            assert (pid in lazy) == (pid in whole or pid == 300), (but, pid)
    lazy = ClaimedPids(roots, trees, first, also=[150])
    assert 150 in lazy and 101 not in lazy and 201 in lazy


def test_unclaimed_among_drops_only_what_is_claimed() -> None:
    """The set operations a root's exit and a kill start with take out the roots,
    the pids given besides and the helpers, and nothing else: every pid dropped is
    claimed, and another tree's member is left for the whole set to decide."""
    first = ProcessTree(100, 1, tracked={101: 1, 102: 1}, unread={103: 1})
    second = ProcessTree(200, 1, tracked={201: 1})
    trees = [first, second]
    lazy = ClaimedPids(collections.Counter(t.root for t in trees), trees, first, also=[300])
    helper = subprocess.Popen(["sleep", "30"])
    register_helper(helper.pid)
    try:
        pids = [helper.pid, *range(400, 0, -1)]
        left = lazy.unclaimed_among(pids)
        assert left == sorted(left)
        assert helper.pid not in left and not {100, 200, 300} & set(left)
        assert {101, 103, 201, 1, 399} <= set(left)
        assert all(pid in lazy for pid in pids if pid not in left)
    finally:
        unregister_helper(helper.pid)
        helper.kill()
        helper.wait()


def test_a_child_started_during_a_spawn_under_way_is_left_to_a_later_sweep() -> None:
    # The same orphan as above, but started after a spawn of the daemon's began: it
    # may be that spawn's child, whose pid is not known yet, so no tree claims it.
    since = boot_ticks()
    with unrecorded_child(ORPHAN_ENV) as pid:
        matching = ProcessTree(1, 0, frozenset(f"{k}={v}".encode() for k, v in ORPHAN_ENV.items()))
        claim_unowned_children([matching], read_proc_table(), newborn_since=since)
        assert pid not in matching.tracked
        claim_unowned_children([matching], read_proc_table())  # once the spawn has ended
        assert pid in matching.tracked
