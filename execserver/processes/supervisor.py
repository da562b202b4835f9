"""Server-wide owner of every managed process tree: sweeps, orphan reaping, final kill.

Lives in ``runtime.state`` so that it is closed at daemon shutdown after the
sessions (which kill their own trees first); whatever is left then — a tree
of a session that was mid-close, or an orphan — is killed here.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING

from execserver.priority import lower_self
from execserver.processes.tree import (
    ClaimedPids,
    ProcessTree,
    ProcTable,
    adopt_orphans,
    boot_ticks,
    claim_unowned_children,
    claimed_pids,
    enable_subreaper,
    inherited_children,
    kill_all_descendants,
    kill_now,
    kill_trees,
    read_own_children_table,
    read_proc_table,
    read_start,
    read_tracked_table,
    reap_orphans,
    reap_stray_zombies,
    settle_unread,
)

if TYPE_CHECKING:
    from execserver.containment import ProcessCgroup
    from execserver.kernel.resources import Resources
    from execserver.processes.keepers import KeeperHost
    from execserver.processes.orphan_guard import OrphanGuard

__all__ = ["Supervisor", "server_supervisor"]

log = logging.getLogger(__name__)

# How often descendants are recorded while trees are alive. A descendant that
# escapes (setsid + parent exit) faster than this is still caught by the
# adopt-at-exit scan and, at the latest, by the shutdown sweep.
SWEEP_INTERVAL_S = 1.0
# On a host of many processes a sweep (the /proc read in a thread, then applying
# it to every tree on the loop) takes long: the next one waits this many times
# as long as the last one took (CPU time), up to SWEEP_INTERVAL_MAX_S, so that sweeping
# takes at most ~5 % of the daemon's time. With 1,000 agents (6,400 processes
# on the host, 2,000 trees) a sweep every second was a steady share of an event
# loop already short of CPU.
SWEEP_COST_FACTOR = 20.0
SWEEP_INTERVAL_MAX_S = 10.0
# After a kill on the request path: the follow-up scan, shared by a burst of kills.
FINISH_KILL_DELAY_S = 0.02
# Orphans whose environment could not be read at their root's exit (mid-execve) are
# read again this often, and given up as not ours after this many tries: an
# execve takes well under a millisecond, so an environment still empty after half
# a second is really empty (``env -i``), which the reading could never attribute.
UNREAD_RETRY_S = 0.01
UNREAD_TRIES = 50
# A sandbox's pid 1 not named yet or still exiting when its bwrap has gone: looked
# at again this often, this many times (then the stray-zombie sweep reaps it).
SANDBOX_CHILD_RETRY_S = 0.02
SANDBOX_CHILD_TRIES = 50
# With no tree left, how often children nobody owns are looked at (while there are
# any), so that one which exits is reaped, not left a zombie until the daemon ends.
STRAY_SWEEP_S = 2.0
# The threads that start processes (ProcessTable, released_spawn.py): each waits, off
# the GIL, until its child has exec'd, which on a busy machine takes tens of
# milliseconds, so a burst of starts needs several.
SPAWN_THREADS = 8
# When a spawn goes to those threads: once recent spawns (a moving average, each
# weighing SPAWN_COST_WEIGHT) waited this long for their child's exec. On an idle
# machine a spawn takes ~0.2 ms, less than the hop to a thread and back (~0.5-1 ms:
# the thread's wake-up, the loop's); among busy commands the child waits for a CPU,
# 15-90 ms, and in the loop's thread that wait stopped every session.
SPAWN_OFF_LOOP_S = 0.001
SPAWN_COST_WEIGHT = 0.25
# "At once", for a sweep asked for while one was reading /proc.
SWEEP_SOON_S = 0.001


def server_supervisor(resources: Resources, child_nice: int = 0) -> Supervisor:
    """The daemon's Supervisor, made on first use from what start-up provided: the
    keepers (--state-dir) and the orphan guard; its children ``child_nice`` nice
    steps below the daemon (--child-nice)."""
    from execserver.processes.keepers import KeeperHost
    from execserver.processes.orphan_guard import OrphanGuard

    return Supervisor(
        keepers=resources.get(KeeperHost),
        guard=resources.get(OrphanGuard),
        child_nice=child_nice,
    )


class Supervisor:
    def __init__(
        self,
        keepers: KeeperHost | None = None,
        read_table: Callable[[], ProcTable] = read_proc_table,
        guard: OrphanGuard | None = None,
        child_nice: int = 0,
    ) -> None:
        # Nice steps below the daemon for the processes it starts (execserver/priority.py):
        # they inherit them from the spawn threads, which alone start processes then.
        self.child_nice = child_nice
        # With --state-dir: the process keepers (the processes they hold are theirs
        # to reap and kill; the supervisor only keeps its hands off them).
        self.keepers = keepers
        # Told of every tree, so that a daemon killed before it could end them does
        # not leave them running (processes/orphan_guard.py).
        self._guard = guard
        # Members of trees in a session of their own (setsid escapees) the guard was
        # told of: pid -> start. A root's session it finds itself; these it cannot.
        self._guarded: dict[int, int] = {}
        # How a sweep reads all of /proc (a test slows it down).
        self._read_table = read_table
        self.subreaper = enable_subreaper()
        if not self.subreaper:
            log.warning("PR_SET_CHILD_SUBREAPER unavailable; setsid escapees may outlive sessions")
        self._trees: set[ProcessTree] = set()
        # The trees' roots, with how many trees have each (a recycled pid can be the
        # root of a new tree while the old one's members live on): ClaimedPids.
        self._roots: collections.Counter[int] = collections.Counter()
        # inherited_children() as read this event-loop round, for the kills of the
        # round (see kill).
        self._inherited: list[int] | None = None
        self._timer: asyncio.TimerHandle | None = None
        # SWEEP_INTERVAL_S, longer after a sweep that took long (SWEEP_COST_FACTOR).
        self._interval = SWEEP_INTERVAL_S
        self._closed = False
        # Trees killed on the request path, finished by one /proc scan shortly after.
        self._doomed: set[ProcessTree] = set()
        self._finish_timer: asyncio.TimerHandle | None = None
        # Children nobody owns (orphans no tree could claim): their zombies waiting
        # to be reaped (pid -> (start, first seen)), and whether any still runs.
        self._stray_zombies: dict[int, tuple[int, float]] = {}
        self._strays_running = False
        # The /proc scan of a sweep, in a worker thread (see _sweep), and whether
        # another sweep was asked for meanwhile.
        self._scan: asyncio.Future[tuple[ProcTable, float]] | None = None
        self._sweep_again = False
        # The cgroups of trees that ended, for the next sweep to remove.
        self._finished: list[ProcessCgroup] = []
        self._spawner: ThreadPoolExecutor | None = None
        # Spawns under way, each with when it began (boot_ticks): their children exist
        # before their pids are known here, and no attribution may take them.
        self._spawning: dict[object, int] = {}
        self._spawn_cost_s = 0.0

    def spawn_began(self) -> object:
        """A spawn is under way (its token for ``spawn_ended``): until then every child
        started since is spared by the attributions (processes/tree.py ``_newborn``)."""
        token = object()
        self._spawning[token] = boot_ticks()
        return token

    def spawn_ended(self, token: object) -> None:
        """The spawn of ``token`` failed or its child is tracked."""
        self._spawning.pop(token, None)

    def spawn_took(self, seconds: float) -> None:
        """A spawn waited ``seconds`` for its child's exec (``spawns_wait``)."""
        self._spawn_cost_s += SPAWN_COST_WEIGHT * (seconds - self._spawn_cost_s)

    def spawns_wait(self) -> bool:
        """Whether spawns belong in ``spawner``, not in the event loop's thread: when
        they wait for a CPU these days, and always when children run below the
        daemon (a child takes the nice value of the thread that starts it, and the
        loop's thread keeps the daemon's)."""
        return self.child_nice > 0 or self._spawn_cost_s >= SPAWN_OFF_LOOP_S

    def _newborn_since(self) -> int | None:
        return min(self._spawning.values(), default=None)

    @property
    def spawner(self) -> Executor:
        """Where processes are started (made on first use, shut down by aclose)."""
        if self._spawner is None:
            self._spawner = ThreadPoolExecutor(
                SPAWN_THREADS,
                thread_name_prefix="execserver-spawn",
                initializer=lower_self,
                initargs=(self.child_nice,),
            )
        return self._spawner

    def track(
        self,
        pid: int,
        env: dict[str, str],
        cgroup: ProcessCgroup | None = None,
        sandbox_child: Callable[[], int | None] | None = None,
        start: int | None = None,
    ) -> ProcessTree:
        """``sandbox_child``: for a sandboxed root, what names the sandbox's own
        child once bwrap has said it (``PlanResources.child_pid``). ``start``: the
        root's start time when already read (``Spawned.start``); else it is read
        here."""
        if start is None:
            start = read_start(pid)
        entries = frozenset(f"{k}={v}".encode(errors="surrogateescape") for k, v in env.items())
        tree = ProcessTree(
            pid,
            start if start is not None else 0,
            entries,
            cgroup=cgroup,
            sandbox_child=sandbox_child,
        )
        self._trees.add(tree)
        self._roots[pid] += 1
        if self._guard is not None and start is not None:
            self._guard.started(pid, start)
        self._schedule()
        return tree

    def root_exited(self, tree: ProcessTree) -> None:
        tree.root_alive = False
        if tree.sandbox_child is not None:
            # bwrap's only child is the sandbox's pid 1, in a pid namespace of its own
            # (--unshare-pid): an orphan inside goes to that pid 1, never to the daemon,
            # and everything inside dies with it. So no escapee to look for, only the
            # pid 1 to reap (looking cost a read of the daemon's ~3,000 children at
            # each sandboxed command's exit, at 1,000 agents).
            self._reap_sandbox_child(tree.sandbox_child, SANDBOX_CHILD_TRIES)
        else:
            claimed = ClaimedPids(self._roots, self._trees, but=tree, also=self._own_helpers())
            adopt_orphans(tree, claimed, self._newborn_since())
        if tree.unread:
            self._retry_unread(tree, UNREAD_TRIES)
        else:
            self._keep_or_forget(tree)

    def _reap_sandbox_child(self, child: Callable[[], int | None], tries_left: int) -> None:
        """Reap bwrap's pid 1 of a sandbox whose root (bwrap) has exited. bwrap
        exits once its pid 1 has reported the command's status, without waiting
        for it, so every sandboxed command left its pid 1 to the daemon (the
        subreaper) as a zombie for the stray-zombie sweep, a second later. Every
        other root's exit read each of those zombies' /proc files meanwhile: at
        1,000 agents that was a third of the event loop's time.

        ``child`` names the pid 1 once the sandbox's watcher thread has read it
        from bwrap's status pipe; on a loaded machine that thread may not have run
        yet when the root's exit is handled, so an unnamed pid 1 is asked for again
        as one still exiting is."""
        pid = child()
        if pid is not None:
            try:
                reaped, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return  # not the daemon's child (no subreaper), or reaped already
            if reaped != 0:
                return
        if tries_left > 0 and not self._closed:  # not named yet, or still exiting
            asyncio.get_running_loop().call_later(
                SANDBOX_CHILD_RETRY_S, self._reap_sandbox_child, child, tries_left - 1
            )

    def _keep_or_forget(self, tree: ProcessTree) -> None:
        if tree.empty:
            self._forget(tree)
        else:
            self._schedule()

    def _retry_unread(self, tree: ProcessTree, tries_left: int) -> None:
        asyncio.get_running_loop().call_later(
            UNREAD_RETRY_S, self._settle_unread, tree, tries_left - 1
        )

    def _settle_unread(self, tree: ProcessTree, tries_left: int) -> None:
        if self._closed or tree not in self._trees:
            return
        if settle_unread(tree) and tree.killed:
            # it escaped the kill: now it goes too
            kill_trees([tree], list(self._trees), self._newborn_since())
        if tree.unread and tries_left > 0:
            self._retry_unread(tree, tries_left)
            return
        tree.unread.clear()
        self._keep_or_forget(tree)

    def _forget(self, tree: ProcessTree) -> None:
        if tree in self._trees:
            self._trees.discard(tree)
            self._roots[tree.root] -= 1
            if self._roots[tree.root] <= 0:
                del self._roots[tree.root]
        if self._guard is not None:
            self._guard.ended(tree.root)
        if tree.cgroup is not None:
            # Empty now; removed by the next sweep's thread, not here on the way to
            # the process's `closed` (five rmdirs on a v1 host, ~0.16 ms).
            self._finished.append(tree.cgroup)
        if not self._trees:
            self._schedule(STRAY_SWEEP_S)  # one look for what the trees left unowned

    def kill(self, tree: ProcessTree) -> None:
        """Kill the whole tree now (before its root's exit can be reaped, so before
        ``closed``); one /proc scan shortly after catches a fork that raced the
        signals, for every tree killed meanwhile. Orphans are reaped by the sweeps."""
        tree.killed = True
        if tree.cgroup is not None:
            # Every member, however it detached, in one go (the tracking still
            # records the orphans we inherit, for reaping).
            tree.cgroup.kill()
        claimed = ClaimedPids(self._roots, self._trees, but=tree, also=self._own_helpers())
        if kill_now(tree, claimed, self._inherited_this_round(), self._newborn_since()) == 0:
            # A lone child: nothing could fork past the signals (a fork it made
            # just before is in its group, which was killed too).
            self._schedule(0.05)
            return
        self._doomed.add(tree)
        if self._finish_timer is None and not self._closed:
            self._finish_timer = asyncio.get_running_loop().call_later(
                FINISH_KILL_DELAY_S, self._finish_kills
            )

    def _inherited_this_round(self) -> list[int]:
        """The daemon's inherited children, read once per event-loop round: a
        shutdown kills every session's processes in one round, and each kill read
        the list (thousands of pids at 1,000 agents: 60 % of a 14 s shutdown). An
        escapee re-parented later in the round is a later sweep's (a killed tree's
        orphans are killed when attributed, the first sweep at most 50 ms after a
        kill that signalled more than its root)."""
        if self._inherited is None:
            self._inherited = inherited_children()
            asyncio.get_running_loop().call_soon(self._forget_inherited)
        return self._inherited

    def _forget_inherited(self) -> None:
        self._inherited = None

    def _finish_kills(self) -> None:
        self._finish_timer = None
        doomed = [t for t in self._doomed if t in self._trees]
        self._doomed.clear()
        if doomed:
            kill_trees(doomed, list(self._trees), self._newborn_since())
        for tree in doomed:
            if tree.empty:
                self._forget(tree)
        if self._trees:
            self._schedule(0.05)  # reap what the kill left to us

    def _guard_escapees(self, table: ProcTable) -> None:
        """Tell the orphan guard of the escapees this sweep knows (killed with their
        tree by the daemon, but after a SIGKILL of the daemon only the guard can)."""
        guard = self._guard
        assert guard is not None
        guarded = self._guarded
        for pid in [pid for pid in guarded if pid not in table]:
            del guarded[pid]
        for tree in self._trees:
            for pid, start in tree.tracked.items():
                info = table.get(pid)
                if info is not None and info.sid != tree.root and pid not in guarded:
                    guarded[pid] = start
                    guard.started(pid, start)

    def _own_helpers(self) -> list[int]:
        """The daemon's long-lived children that are no tree's (the orphan guard, the
        keepers' zygote): always among its children, they are nobody's escapees."""
        pids = [self._guard.pid] if self._guard is not None else []
        if self.keepers is not None:
            pids.append(self.keepers.zygote_pid)
        return pids

    def _spared(self) -> set[int]:
        spared = self.keepers.keeper_pids() if self.keepers is not None else set()
        if self._guard is not None:
            spared.add(self._guard.pid)
        return spared

    def _schedule(self, delay: float | None = None) -> None:
        if self._closed:
            return
        if delay is None:
            delay = self._interval
        # Never 0: uvloop's call_later(0) is a call_soon, whose handle has no when().
        delay = max(delay, SWEEP_SOON_S)
        if self._timer is not None:
            if self._timer.when() - asyncio.get_running_loop().time() <= delay:
                return
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay, self._sweep)

    def _sweep(self) -> None:
        """Read /proc in a worker thread; ``_swept`` applies it on the loop. A whole
        scan reads every process's stat (~17 us each: 21 ms on a host of 1,230
        processes) and ran every second while any tree lived, one block of the
        event loop each time; in a thread the loop gets the GIL back every switch
        interval instead."""
        self._timer = None
        if self._scan is not None:
            self._sweep_again = True  # after the one in flight, at once
            return
        # With no tree left only our own unowned children are of interest.
        whole = bool(self._trees)
        before = {tree: set(tree.tracked) for tree in self._trees}
        finished, self._finished = self._finished, []
        read = self._read_table if whole else read_own_children_table
        scan = asyncio.get_running_loop().run_in_executor(None, _remove_then_read, finished, read)
        self._scan = scan
        scan.add_done_callback(lambda done: self._swept(done, whole, before))

    def _swept(
        self,
        scan: asyncio.Future[tuple[ProcTable, float]],
        whole: bool,
        before: dict[ProcessTree, set[int]],
    ) -> None:
        self._scan = None
        again, self._sweep_again = self._sweep_again, False
        if self._closed or scan.cancelled():
            return
        error = scan.exception()
        if error is not None:
            log.error("process sweep: cannot read /proc: %r", error)
            self._schedule()
            return
        table, read_cpu = scan.result()
        applying = time.thread_time()
        if self._trees and not whole:
            self._schedule(SWEEP_SOON_S)  # a tree came meanwhile: it needs the whole table
            return
        # Members recorded while the scan ran (an orphan adopted at its root's exit,
        # a tree started meanwhile) are not in the table, which would say they died:
        # they stay, for the next sweep to judge.
        later: dict[ProcessTree, dict[int, int]] = {}
        for tree in self._trees:
            known = before.get(tree, set())
            later[tree] = {pid: start for pid, start in tree.tracked.items() if pid not in known}
        for tree in list(self._trees):
            tree.refresh(table)
        newborn_since = self._newborn_since()
        claim_unowned_children(list(self._trees), table, newborn_since)
        reap_orphans(self._trees, table)
        for tree, members in later.items():
            for pid, start in members.items():
                if pid not in table:
                    tree.tracked.setdefault(pid, start)
        if self._guard is not None:
            self._guard_escapees(table)
        self._stray_zombies, self._strays_running = reap_stray_zombies(
            table,
            claimed_pids(self._trees) | self._spared(),
            self._stray_zombies,
            asyncio.get_running_loop().time(),
            newborn_since,
        )
        for tree in [t for t in self._trees if t.empty]:
            self._forget(tree)
        # CPU time, not wall time: what the sweep costs the daemon, not how long
        # it waited for a CPU or the GIL on a busy machine.
        took = read_cpu + time.thread_time() - applying
        self._interval = min(max(SWEEP_INTERVAL_S, took * SWEEP_COST_FACTOR), SWEEP_INTERVAL_MAX_S)
        if again:
            self._schedule(SWEEP_SOON_S)
        elif self._trees:
            self._schedule()
        elif self._stray_zombies or self._strays_running:
            self._schedule(STRAY_SWEEP_S)

    async def aclose(self) -> None:
        """Daemon shutdown: nothing a session started may survive it."""
        self._closed = True
        if self._spawner is not None:
            # The sessions have waited for their starts in flight (ProcessTable.aclose).
            self._spawner.shutdown(wait=False, cancel_futures=True)
        if self._timer is not None:
            self._timer.cancel()
        if self._finish_timer is not None:
            self._finish_timer.cancel()
        for tree in list(self._trees):
            if tree.cgroup is not None:
                tree.cgroup.kill()
        if self._trees:  # (each round of kill_trees reads the whole of /proc)
            kill_trees(list(self._trees), list(self._trees))
        # Whatever it started that still runs (an escapee nobody could attribute)
        # dies too: nothing a session started may outlive the daemon.
        kill_all_descendants(self._spared())
        # Reap what we inherited; a SIGKILLed process dies within milliseconds.
        for _ in range(50):
            if all(not t.tracked for t in self._trees):
                break
            reap_orphans(self._trees, read_tracked_table(self._trees))
            if all(not t.tracked for t in self._trees):
                break
            await asyncio.sleep(0.02)
        finished, self._finished = self._finished, []
        for cgroup in finished:
            cgroup.remove()
        for _ in range(50):
            if all(t.cgroup is None or t.cgroup.remove() for t in self._trees):
                break
            await asyncio.sleep(0.02)  # SIGKILLed members leave their cgroup within ms
        self._trees.clear()
        self._roots.clear()


def _remove_then_read(
    finished: list[ProcessCgroup], read: Callable[[], ProcTable]
) -> tuple[ProcTable, float]:
    """A sweep's work in its thread: the ended trees' cgroups go, then /proc is read.
    Also returns the CPU time it took (the thread's, not the wall clock's)."""
    started = time.thread_time()
    for cgroup in finished:
        cgroup.remove()
    return read(), time.thread_time() - started
