"""Process trees of managed children, so that none of their descendants outlives its owner.

The reference kills only the direct child; a grandchild that called setsid (or
any background job) survives its session and even the daemon. We do better
without cgroups: the daemon is a child subreaper (PR_SET_CHILD_SUBREAPER), so
orphaned descendants are re-parented to it instead of init and stay visible
in its process tree. A periodic sweep over /proc records each managed child's
descendants (pid + start time, so a recycled pid is never mistaken for one);
killing a tree SIGKILLs the child's session, its recorded descendants and
whatever descends from them, and the daemon reaps the orphans it inherited.
``process/terminate`` uses ``kill_now`` (the tree's own /proc entries only,
cheap on the request path) and a shared follow-up scan (``kill_trees``). With
per-process limits the tree's cgroup is the authoritative membership and kill
(execserver.containment); this tracking still reaps what we inherit.

The /proc files are read here by hand, not through psutil (which the daemon
uses elsewhere), because every reader below is on the terminate or sweep path
and psutil is several times slower at each of them. Same run, 329 processes on
the host, 2 loaded cores: one stat 63 us against 477 us for
``psutil.Process`` (+ getpgid/getsid: psutil has no session id); the full
scan 37 ms against 94 ms for ``process_iter(["ppid", "status",
"create_time"])``; the children of one process 0.19 ms from its
``task/*/children`` against 35 ms for ``Process.children()`` (a whole /proc
scan); an environment 47 us against 169 us for ``Process.environ()``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import signal
import time
from collections.abc import Callable, Collection, Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from execserver.sandbox.helper_pids import HELPER_ENV_ENTRY, helper_pids, is_helper, unregistered

if TYPE_CHECKING:
    from execserver.containment import ProcessCgroup

__all__ = [
    "ClaimedPids",
    "ProcTable",
    "ProcessTree",
    "adopt_orphans",
    "boot_ticks",
    "claim_unowned_children",
    "claimed_pids",
    "descendants",
    "enable_subreaper",
    "inherited_children",
    "kill_all_descendants",
    "kill_now",
    "kill_trees",
    "read_descendant_table",
    "read_own_children_table",
    "read_proc_table",
    "read_start",
    "read_stat",
    "read_tracked_table",
    "reap_orphans",
    "reap_stray_zombies",
    "settle_unread",
]

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


class ProcInfo(NamedTuple):
    state: str
    ppid: int
    pgid: int
    sid: int
    start: int  # clock ticks since boot; (pid, start) identifies a process


def enable_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux >= 3.4)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def boot_ticks() -> int:
    """Now, in the clock of ``ProcInfo.start``: the kernel counts a process's start
    in clock ticks of CLOCK_BOOTTIME (fs/proc/array.c), rounded down, so a process
    started after this call has a start at least this."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _TICKS_PER_S)


def _newborn(info: ProcInfo, newborn_since: int | None) -> bool:
    """Whether ``info`` may be a child the daemon is still spawning (started since
    ``newborn_since``, the start of the oldest spawn under way): its pid is not known
    yet, so no attribution may take it for an escapee."""
    return newborn_since is not None and info.start >= newborn_since


def read_stat(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields follow the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    return ProcInfo(
        fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    )


def read_start(pid: int) -> int | None:
    """``pid``'s start (``ProcInfo.start``), or None when it is gone."""
    info = read_stat(pid)
    return info.start if info is not None else None


class ProcTable(dict[int, ProcInfo]):
    """A /proc snapshot with indexes built once per snapshot (sweeps cover many trees)."""

    @functools.cached_property
    def children(self) -> dict[int, list[int]]:
        index: dict[int, list[int]] = {}
        for pid, info in self.items():
            index.setdefault(info.ppid, []).append(pid)
        return index

    @functools.cached_property
    def by_session(self) -> dict[int, list[int]]:
        index: dict[int, list[int]] = {}
        for pid, info in self.items():
            index.setdefault(info.sid, []).append(pid)
        return index


def read_proc_table() -> ProcTable:
    table = ProcTable()
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = read_stat(int(name))
            if info is not None:
                table[int(name)] = info
    return table


def _stat_table(pids: Iterable[int]) -> ProcTable:
    """The /proc entries of ``pids`` that still exist."""
    table = ProcTable()
    for pid in pids:
        info = read_stat(pid)
        if info is not None:
            table[pid] = info
    return table


def read_own_children_table() -> ProcTable:
    """Our direct children only: what a sweep needs when no tree is left (a whole
    /proc scan costs milliseconds on a busy host; this reads a few files)."""
    return _stat_table(own_children())


def read_descendant_table(root: int) -> ProcTable:
    """``root``'s descendants only, walked through /proc's children lists: what a
    question about our own subtree needs (a whole /proc scan reads every process on
    the host, thousands on a busy one). A child forked during the walk may be
    missed, as it may by a scan."""
    table = ProcTable()
    stack = [root]
    while stack:
        for child in child_pids(stack.pop()):
            if child in table:
                continue
            info = read_stat(child)
            if info is not None:
                table[child] = info
                stack.append(child)
    return table


def inherited_children() -> list[int]:
    """The children of this process's main thread: among them every orphan it
    inherited as a subreaper, since the kernel hands an orphan to the first live
    thread of its new parent, the main thread (kernel/exit.c, find_new_reaper and
    find_alive_thread). A child a worker thread started is on that thread's list,
    and it is never an orphan. A root's exit and a kill look here for escapees;
    reading every thread's list cost them ~1.6 ms each at 1,000 agents."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children", "rb") as f:
            return list(map(int, f.read().split()))
    except OSError:
        return []


def own_children() -> list[int]:
    """Direct children of this process (all threads)."""
    pids: list[int] = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                pids.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return pids


def descendants(roots: Iterable[int], table: ProcTable) -> set[int]:
    children = table.children
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


@dataclass(eq=False)
class ProcessTree:
    """One managed child (session leader ``root``) and the descendants seen so far."""

    root: int
    root_start: int
    # "NAME=value" entries of the environment the child was started with: escapees
    # inherit it, which is how an orphan we cannot trace by parentage is attributed.
    env_entries: frozenset[bytes] = frozenset()
    root_alive: bool = True
    tracked: dict[int, int] = field(default_factory=dict)  # pid -> start
    # The tree's resource-limit cgroup (when limits are configured): it holds every
    # descendant, escapees included, so it decides emptiness and does the kill.
    cgroup: ProcessCgroup | None = None
    # Orphans found at the root's exit whose environment read back empty, so not yet
    # attributed (pid -> start): a process in the middle of execve has no readable
    # environment for an instant. `setsid sleep &` in a shell that exits at once hit
    # that window in 47 of 300 tries. ``settle_unread`` reads them again.
    unread: dict[int, int] = field(default_factory=dict)
    killed: bool = False  # an orphan attributed after the kill is killed on sight
    # For a sandboxed root: the sandbox's own child (bwrap's pid 1), once bwrap has
    # said it (None before, or unsandboxed). See Supervisor.root_exited.
    sandbox_child: Callable[[], int | None] | None = None

    def live_tracked(self, table: dict[int, ProcInfo]) -> list[int]:
        return [
            pid
            for pid, start in self.tracked.items()
            if (info := table.get(pid)) is not None and info.start == start
        ]

    def refresh(self, table: ProcTable) -> None:
        """Re-record the descendants; forget those that died (or whose pid was recycled)."""
        alive = self.live_tracked(table)
        roots = [self.root, *alive] if self.root_alive else alive
        members = descendants(roots, table)
        # Members of the child's own session, even if re-parented away from it.
        members.update(table.by_session.get(self.root, ()))
        members.update(alive)
        members.discard(self.root)
        self.tracked = {pid: table[pid].start for pid in members if pid in table}

    @property
    def empty(self) -> bool:
        if self.root_alive or self.tracked or self.unread:
            return False
        return self.cgroup is None or not self.cgroup.populated()


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads), from /proc without a full scan."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return found


def escapee_candidates(
    tree: ProcessTree,
    claimed: ClaimedPids,
    inherited: Iterable[int],
    skip: Container[int],
) -> Iterator[tuple[int, ProcInfo]]:
    """The children we inherited (``inherited``) that may have escaped ``tree``: not
    in ``skip``, alive (a zombie has nothing left to attribute: the stray sweep
    reaps it), started after its root, outside our session, and owned by no other
    tree (``claimed``), with their /proc stat.

    At 1,000 agents the daemon has ~3,000 children (the agents' commands, their
    fs helpers), and every root's exit and every kill looked at each one in turn,
    building the set of every tree's members on the way: a quarter of the event
    loop's time. So the roots and the helpers go first, by set operations
    (``ClaimedPids.unclaimed_among``); a pid left is read, and only a live one
    that passes the stat tests is looked up among the other trees' members (the
    sandboxes' pid 1s waiting to be reaped are zombies)."""
    my_sid = os.getsid(0)
    for pid in claimed.unclaimed_among(inherited):
        if pid in skip:
            continue
        info = read_stat(pid)
        if info is None or info.state == "Z" or info.start < tree.root_start:
            continue
        if info.sid == my_sid or pid in claimed:
            continue
        yield pid, info


def kill_now(
    tree: ProcessTree,
    claimed: ClaimedPids,
    inherited: list[int] | None = None,
    newborn_since: int | None = None,
) -> int:
    """SIGKILL the tree at once, reading only its own part of /proc (terminate is on
    the request path; a full /proc scan costs milliseconds per call).

    Members: the root's session, the descendants of the root and of the recorded
    members (walked while the root is still alive, so the parent chain is intact),
    and children we inherited as subreaper that escaped this tree since the last
    sweep (started after the root, outside our session, carrying its environment).
    ``claimed``: every pid some tree already owns (never taken from another tree).
    ``inherited``: ``inherited_children()``, when the caller has it (read this
    event-loop round). ``newborn_since``: children started since are spared (they
    may be the daemon's spawns under way: ``_newborn``). Returns how many members
    besides the root were signalled.
    """
    targets: set[int] = set()
    stack = [tree.root] if tree.root_alive else []
    for pid, start in tree.tracked.items():
        info = read_stat(pid)
        if info is not None and info.start == start:
            targets.add(pid)
            stack.append(pid)
    while stack:
        for child in child_pids(stack.pop()):
            if child not in targets:
                targets.add(child)
                stack.append(child)
    children = inherited if inherited is not None else inherited_children()
    for pid, info in escapee_candidates(tree, claimed, children, targets):
        if _newborn(info, newborn_since):
            continue
        if env_similarity(read_environ(pid), tree) >= MIN_ENV_SIMILARITY:
            targets.add(pid)
            tree.tracked[pid] = info.start
            stack.append(pid)
    while stack:  # what the escapees started
        for child in child_pids(stack.pop()):
            if child not in targets:
                targets.add(child)
                stack.append(child)
    if tree.root_alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(tree.root, signal.SIGKILL)  # the root's group, however deep
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(targets)


def kill_trees(
    trees: list[ProcessTree], all_trees: list[ProcessTree], newborn_since: int | None = None
) -> None:
    """SIGKILL every member of ``trees``: a few rounds, one /proc scan per round for all
    of them (a member may fork between the snapshot and the signal). Orphans are
    attributed among ``all_trees`` first (``claim_unowned_children``)."""
    for _ in range(3):
        table = read_proc_table()
        claim_unowned_children(all_trees, table, newborn_since)
        targets: list[int] = []
        for tree in trees:
            tree.refresh(table)
            targets += tree.tracked
            if tree.root_alive:
                targets.append(tree.root)
        targets = [p for p in targets if p in table and table[p].state != "Z"]
        if not targets:
            return
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def read_tracked_table(trees: Iterable[ProcessTree]) -> ProcTable:
    """The /proc entries of the members ``trees`` have recorded: all that
    ``reap_orphans`` looks at, without a scan of the whole host."""
    return _stat_table(pid for tree in trees for pid in tree.tracked)


def reap_orphans(trees: Iterable[ProcessTree], table: dict[int, ProcInfo]) -> None:
    """Reap zombies the daemon inherited as subreaper (only pids known to be ours)."""
    me = os.getpid()
    for tree in trees:
        for pid in list(tree.tracked):
            info = table.get(pid)
            if info is None:
                tree.tracked.pop(pid, None)
            elif info.ppid == me and info.state == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                tree.tracked.pop(pid, None)


# Share of a tree's start environment an orphan must still carry to be attributed
# to it (shells add and change a few variables; they rarely drop most of them).
MIN_ENV_SIMILARITY = 0.5


def env_similarity(env: frozenset[bytes], tree: ProcessTree) -> float:
    if HELPER_ENV_ENTRY in env:
        return 0.0  # the daemon's own helper, maybe not registered yet: nobody's escapee
    if not tree.env_entries:
        return MIN_ENV_SIMILARITY  # no evidence either way: a weak match
    return len(env & tree.env_entries) / len(tree.env_entries)


def read_environ(pid: int) -> frozenset[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return frozenset(f.read().split(b"\0")) - {b""}
    except OSError:
        return frozenset()


class ClaimedPids:
    """``claimed_pids`` for membership tests, built only for a pid that is neither
    a tree's root nor a helper: most of the daemon's children are those (``roots``
    holds the roots), and building the whole set walked every member of every tree
    at each root's exit and each kill (17 % of a shutdown's event loop at 1,000
    agents). ``also``: pids claimed besides (the daemon's own long-lived children)."""

    __slots__ = ("_but", "_extra", "_full", "_roots", "_trees")

    def __init__(
        self,
        roots: Collection[int],
        trees: Iterable[ProcessTree],
        but: ProcessTree | None = None,
        also: Iterable[int] = (),
    ) -> None:
        self._roots = roots
        self._trees = trees
        self._but = but
        self._full: set[int] | None = None
        self._extra: set[int] = set(also)

    def unclaimed_among(self, pids: Iterable[int]) -> list[int]:
        """``pids`` without the roots, the pids claimed besides and the helpers,
        ascending; what is left may still be another tree's member (``in``)."""
        rest = set(pids)
        rest.difference_update(self._roots)
        rest -= self._extra
        return sorted(unregistered(rest))

    def __contains__(self, pid: object) -> bool:
        if pid in self._roots or pid in self._extra:
            return True
        if isinstance(pid, int) and is_helper(pid):
            return True
        if self._full is None:
            self._full = claimed_pids(self._trees, self._but)
        return pid in self._full


def claimed_pids(trees: Iterable[ProcessTree], but: ProcessTree | None = None) -> set[int]:
    """What no attribution may take: every tree's root, what every tree but ``but``
    has recorded or is still reading (its unread orphans), and the daemon's own
    helpers."""
    claimed = helper_pids()
    for tree in trees:
        claimed.add(tree.root)
        if tree is not but:
            claimed.update(tree.tracked, tree.unread)
    return claimed


def claim_unowned_children(
    trees: list[ProcessTree], table: ProcTable, newborn_since: int | None = None
) -> None:
    """Attribute children the daemon inherited as subreaper that no tree has recorded.

    Such an orphan escaped (setsid + parent exit) between two sweeps. Among the
    trees started before it, the one whose start environment it shares most
    (descendants inherit it) gets it; an orphan resembling none stays unclaimed
    and is killed at daemon shutdown at the latest. One started since
    ``newborn_since`` waits for a later sweep (``_newborn``).
    """
    me = os.getpid()
    my_sid = table[me].sid if me in table else os.getsid(0)
    claimed = claimed_pids(trees)
    for pid in table.children.get(me, ()):
        info = table[pid]
        if pid in claimed or info.sid == my_sid or info.state == "Z":
            continue
        if _newborn(info, newborn_since):
            continue
        env = read_environ(pid)
        best: ProcessTree | None = None
        best_score = 0.0
        for tree in trees:
            if tree.root_start > info.start:
                continue
            score = env_similarity(env, tree)
            if score < MIN_ENV_SIMILARITY:
                continue
            # The closest match wins; among equals, the most recently started tree.
            # Start times are clock ticks (10 ms), so roots started in one tick are
            # ordered by pid, which the kernel hands out in order (until it wraps).
            if (
                best is None
                or score > best_score
                or (
                    score == best_score
                    and (tree.root_start, tree.root) > (best.root_start, best.root)
                )
            ):
                best, best_score = tree, score
        if best is not None:
            best.tracked[pid] = info.start
            for sub in descendants([pid], table):
                best.tracked[sub] = table[sub].start


def reap_stray_zombies(
    table: ProcTable,
    claimed: set[int],
    seen: dict[int, tuple[int, float]],
    now: float,
    newborn_since: int | None = None,
) -> tuple[dict[int, tuple[int, float]], bool]:
    """Reap the zombies among our children that nothing owns (``claimed``: every
    tree's root and members, and the daemon's own helpers) once they have been
    zombies for ``STRAY_ZOMBIE_GRACE_S``.

    Such a child is an orphan we inherited and no tree could claim (one that
    cleared its environment); nothing else would ever reap it. Whatever the daemon
    starts itself is reaped by its owner as soon as the event loop sees it exit (a
    pidfd reader, the loop's child watcher, a thread blocked in ``waitpid``), so a
    child that stays a zombie that long has no owner. A child in the daemon's own
    session is never such an orphan (see ``kill_all_descendants``): its owner, maybe
    the program the daemon runs in, reaps it and wants its exit status.
    ``seen``: the zombies of the last call, pid -> (start, first seen). Returns
    them for this call, and whether an unowned child is still running (to be
    reaped when it exits).
    """
    me = os.getpid()
    my_sid = table[me].sid if me in table else os.getsid(0)
    zombies: dict[int, tuple[int, float]] = {}
    running = False
    for pid in table.children.get(me, ()):
        if pid in claimed:
            continue
        info = table[pid]
        if info.sid == my_sid or _newborn(info, newborn_since):
            continue
        if info.state != "Z":
            running = True
            continue
        start, first_seen = seen.get(pid, (info.start, now))
        if start != info.start:
            first_seen = now  # a recycled pid: a new zombie
        if now - first_seen >= STRAY_ZOMBIE_GRACE_S:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        else:
            zombies[pid] = (info.start, first_seen)
    return zombies, running


# How long a zombie child nobody owns stays before ``reap_stray_zombies`` reaps it:
# far longer than any owner takes to reap its own child after the exit.
STRAY_ZOMBIE_GRACE_S = 1.0


def adopt_orphans(
    tree: ProcessTree, claimed: ClaimedPids, newborn_since: int | None = None
) -> None:
    """Right after ``tree.root`` exited: its orphans are now our children; record them.

    A child we did not spawn as a managed root, that no other tree has recorded
    (``claimed``: every root, and the other trees' members), started after the
    root, in a session other than ours, and sharing the root's start
    environment, is an escapee of this tree (another service's helper would not
    match all of these). One started since ``newborn_since`` is left to the sweeps
    (``_newborn``).
    """
    for pid, info in escapee_candidates(tree, claimed, inherited_children(), tree.tracked):
        if _newborn(info, newborn_since):
            continue
        env = read_environ(pid)
        if not env and tree.env_entries:
            tree.unread[pid] = info.start  # maybe mid-execve: decided on a re-read
        elif env_similarity(env, tree) >= MIN_ENV_SIMILARITY:
            tree.tracked[pid] = info.start


def settle_unread(tree: ProcessTree) -> list[int]:
    """Read the environments of ``tree.unread`` again: each orphan whose environment
    is readable now is attributed (or not) as ``adopt_orphans`` would have; one that
    died or whose pid was recycled is dropped; the rest stay for another try.
    Returns the pids attributed now."""
    attributed: list[int] = []
    for pid, start in list(tree.unread.items()):
        info = read_stat(pid)
        if info is None or info.start != start or info.state == "Z":
            del tree.unread[pid]
            continue
        env = read_environ(pid)
        if not env:
            continue
        del tree.unread[pid]
        if env_similarity(env, tree) >= MIN_ENV_SIMILARITY:
            tree.tracked[pid] = start
            attributed.append(pid)
    return attributed


def kill_all_descendants(spared: Iterable[int] = ()) -> None:
    """Daemon shutdown: SIGKILL every child of this process outside its session,
    with all of its descendants, but ``spared`` and their descendants (the process
    keepers of ``--state-dir``, the orphan guard).

    What a session started runs outside the daemon's session: each managed root
    leads a session of its own and an escapee made one more. A child still in the
    daemon's session is something the daemon or its host started itself, ended by
    whoever owns it: a daemon run inside another program (the tests' workers, an
    application embedding the server) killed that program's other children, and
    theirs, before this rule.
    """
    me = os.getpid()
    my_sid = os.getsid(0)
    spared = set(spared)
    for _ in range(3):
        # Only our subtree matters here (our children and theirs; the spared among
        # them), so only it is read.
        table = read_descendant_table(me)
        keep = spared | descendants(spared, table)
        left = [
            child
            for child in table.children.get(me, ())
            if child not in keep and table[child].sid != my_sid
        ]
        subtrees = set(left) | descendants(left, table)
        targets = [p for p in subtrees if table[p].state != "Z" and p not in keep]
        if not targets:
            return
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
