"""The processes of one session: the processId namespace, retention, teardown.

A processId stays taken while the process runs and for the retention period
after it closed (the reference keeps exited processes readable ~80 s), then
it is forgotten and may be reused. Closing the table (session expiry, daemon
shutdown) kills every process tree of the session.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from execserver.config import LimitsConfig
from execserver.containment import Placement, ProcessCgroup, ProcessCgroups
from execserver.keeper.client import KeeperGone
from execserver.kernel.limits import check_below
from execserver.kernel.peer import SessionHandle
from execserver.kernel.telemetry import Telemetry
from execserver.netproxy.kept import KeptNetwork, SavedListeners
from execserver.processes.kept import KeptProcess
from execserver.processes.launch import Spawned, spawn
from execserver.processes.managed import DenialClassifier, ManagedProcess
from execserver.processes.released_spawn import released_spawner
from execserver.processes.supervisor import Supervisor
from execserver.processes.tree import ProcessTree, read_start
from execserver.sandbox.plan import LaunchPlan
from execserver.wire.errors import RpcError

__all__ = ["ProcessTable"]

log = logging.getLogger(__name__)


class ProcessTable:
    def __init__(
        self,
        session: SessionHandle,
        supervisor: Supervisor,
        *,
        retention_s: float,
        retained_bytes: int,
        drain_timeout_s: float,
        limits: LimitsConfig | None,
        telemetry: Telemetry | None = None,
        containment: ProcessCgroups | None = None,
    ) -> None:
        self._session = session
        self._supervisor = supervisor
        self._retention_s = retention_s
        self._retained_bytes = retained_bytes
        self._drain_timeout_s = drain_timeout_s
        self._limits = limits
        self._telemetry = telemetry
        self._containment = containment
        # With --tenants, its principal: its processes' cgroups go in that one's group.
        self._principal: str | None = getattr(session, "principal", None)
        self._procs: dict[str, ManagedProcess] = {}
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._leftover_trees: list[ProcessTree] = []
        # Starts whose child is being spawned (ids taken meanwhile): _start_off_loop.
        self._starting: dict[str, asyncio.Future[None]] = {}
        self._closed = False

    def get(self, process_id: str) -> ManagedProcess | None:
        return self._procs.get(process_id)

    def __len__(self) -> int:
        return len(self._procs)

    def running_mortal(self) -> int:
        """Running processes that end with this daemon: all of them without
        --state-dir; with it, those whose keeper does not outlive it."""
        return sum(
            1
            for p in self._procs.values()
            if not p.exited and not (isinstance(p, KeptProcess) and p.outlives_daemon)
        )

    def check_available(self, process_id: str) -> None:
        if process_id in self._procs or process_id in self._starting:
            raise RpcError.invalid_request(f"process {process_id} already exists")
        if self._closed:
            raise RpcError.invalid_request("session is closed")
        if self._limits is not None and self._limits.max_processes_per_session is not None:
            running = len(self._starting) + sum(1 for p in self._procs.values() if not p.closed)
            check_below(
                self._limits, "max_processes_per_session", running, "too many running processes"
            )

    async def start(
        self,
        process_id: str,
        plan: LaunchPlan,
        classify_denial: DenialClassifier | None,
        program: str | None = None,
        *,
        keep: bool = True,
        network: KeptNetwork | None = None,
        on_started: Callable[[ManagedProcess], None] | None = None,
    ) -> ManagedProcess:
        """Spawn and register. The child is registered on the loop as soon as it runs,
        whether or not the request still waits for it: a cancelled request can never
        leave an unowned child behind.

        ``program``: the name the log gives the process, the requested argv[0]
        (a sandboxed plan execs bwrap or the launcher, not the program).
        ``keep``: with --state-dir, whether it may outlive the daemon (False: it
        needs what only this daemon holds, a proxy's masked secrets; its keeper
        then ends it as soon as the daemon is gone, instead of orphaning it).
        ``network``: the listeners of its managed network, for its keeper to hold
        (``netproxy.launch.NetworkSetup.hand_over``; closed here without keepers).
        ``plan`` is closed either way: a refused start releases its fds and mount
        points (process_start checks the id before planning; a cgroup that could
        not be made left them held).
        ``on_started``: called with the process as it is registered, before the
        loop runs again (a short command may have exited by the time this returns)."""
        announce = on_started if on_started is not None else _nothing
        try:
            try:
                self.check_available(process_id)
            except BaseException:
                plan.close()
                raise
            keepers = self._supervisor.keepers
            if keepers is not None and keepers.accepts(plan):
                kept = self._start_kept(
                    process_id, plan, classify_denial, program, outlive=keep, network=network
                )
                announce(kept)
                return kept
        finally:
            if network is not None:
                network.close()  # what the keeper did not take (all of it without one)
        supervisor = self._supervisor
        launch: Callable[[], tuple[Spawned, float]]
        cgroup: ProcessCgroup | None = None
        abandon: Callable[[], object] | None = None
        # In the spawn threads with --child-nice: a child takes the nice value of
        # the thread that forks it (posix_spawn, exec-as and subprocess's pre-exec
        # hook alike). And, for posix_spawn, whenever spawns wait for a CPU: it
        # waits for the child's exec without the GIL while the loop runs on.
        in_threads = supervisor.child_nice > 0
        if self._containment is None:
            launch = functools.partial(_timed_spawn, plan)
            in_threads = in_threads or (supervisor.spawns_wait() and released_spawner() is not None)
        elif (group := self._shared_group()) is not None:
            containment = self._containment
            place = _fail_closed(plan, lambda: containment.group_placement(group))
            launch = functools.partial(_timed_spawn_placed, plan, place)
            abandon = place.close
        else:
            cgroup = self._new_cgroup(plan)
            launch = functools.partial(_timed_spawn_into, plan, cgroup)
            abandon = cgroup.remove
        if in_threads:
            return await self._start_off_loop(
                process_id,
                plan,
                classify_denial,
                program,
                announce,
                launch,
                cgroup=cgroup,
                abandon=abandon,
            )
        spawned, took = launch()
        supervisor.spawn_took(took)
        tree = supervisor.track(spawned.pid, plan.env, cgroup, sandbox_child=_child_of(plan))
        proc = self._register(process_id, plan, spawned, tree, classify_denial, program)
        announce(proc)
        return proc

    async def _start_off_loop(
        self,
        process_id: str,
        plan: LaunchPlan,
        classify_denial: DenialClassifier | None,
        program: str | None,
        on_started: Callable[[ManagedProcess], None],
        launch: Callable[[], tuple[Spawned, float]],
        *,
        cgroup: ProcessCgroup | None = None,
        abandon: Callable[[], object] | None = None,
    ) -> ManagedProcess:
        """``start`` of a child in the supervisor's spawn threads (``launch`` runs
        there), once spawns wait for a CPU (``Supervisor.spawns_wait``) or with
        --child-nice: there posix_spawn (processes/released_spawn.py) waits for the
        child's exec without the GIL, the event loop runs meanwhile, and the child
        takes the threads' lower priority. The id counts as taken until then.
        ``cgroup``: the child's own, tracked with it; ``abandon``: releases what
        ``launch`` would have (a placement, a cgroup) when it never runs (the daemon
        shutting down)."""
        loop = asyncio.get_running_loop()
        # The child, once it runs. The request registers it when it resumes, in the
        # step that queues its response, so that the response precedes the child's
        # notifications (registered earlier, on the way back from the thread, its
        # output and exit were sent first). A request cancelled meanwhile leaves that
        # to the callback, or registers it as it unwinds.
        outcome: asyncio.Future[Spawned] = loop.create_future()
        # Set once the child is registered or the spawn failed: a closing session
        # waits for it (aclose).
        settled: asyncio.Future[None] = loop.create_future()
        self._starting[process_id] = settled
        # Until the child is tracked the supervisor takes no new child for an escapee.
        token = self._supervisor.spawn_began()

        def finish() -> None:
            self._starting.pop(process_id, None)
            self._supervisor.spawn_ended(token)
            if not settled.done():
                settled.set_result(None)

        def adopt(spawned: Spawned) -> ManagedProcess:
            try:
                tree = self._supervisor.track(
                    spawned.pid,
                    plan.env,
                    cgroup,
                    sandbox_child=_child_of(plan),
                    start=spawned.start,
                )
                proc = self._register(process_id, plan, spawned, tree, classify_denial, program)
                on_started(proc)
                return proc
            finally:
                finish()

        def started(spawning: asyncio.Future[tuple[Spawned, float]]) -> None:
            if spawning.cancelled():  # the daemon is shutting down: it never ran
                plan.close()
                if abandon is not None:
                    abandon()
                outcome.cancel()
                finish()
                return
            error = spawning.exception()
            if error is not None:
                finish()
                if not outcome.done():
                    outcome.set_exception(error)
                return
            spawned, took = spawning.result()
            self._supervisor.spawn_took(took)
            if outcome.done():  # the request was cancelled: no one else will
                try:
                    adopt(spawned)
                except Exception:
                    log.exception("process %s: registering the child failed", process_id)
                return
            outcome.set_result(spawned)

        spawning = loop.run_in_executor(self._supervisor.spawner, _then_read_start, launch)
        spawning.add_done_callback(started)
        try:
            spawned = await outcome
        except asyncio.CancelledError:
            if outcome.done() and not outcome.cancelled() and outcome.exception() is None:
                adopt(outcome.result())  # it ran before the cancellation reached us
            raise
        return adopt(spawned)

    def _register(
        self,
        process_id: str,
        plan: LaunchPlan,
        spawned: Spawned,
        tree: ProcessTree,
        classify_denial: DenialClassifier | None,
        program: str | None,
    ) -> ManagedProcess:
        proc = ManagedProcess(
            process_id,
            spawned,
            session=self._session,
            supervisor=self._supervisor,
            tree=tree,
            program=program if program is not None else plan.executable,
            retained_bytes=self._retained_bytes,
            drain_timeout_s=self._drain_timeout_s,
            pipe_stdin=plan.pipe_stdin,
            classify_denial=classify_denial,
            on_closed=self._on_closed,
            on_exited=self._on_exited,
        )
        self._procs[process_id] = proc
        if self._telemetry is not None:
            self._telemetry.process_spawned()
        return proc

    def _start_kept(
        self,
        process_id: str,
        plan: LaunchPlan,
        classify_denial: DenialClassifier | None,
        program: str | None,
        *,
        outlive: bool,
        network: KeptNetwork | None,
    ) -> ManagedProcess:
        """``start`` with --state-dir: the child is a keeper's (execserver/keeper/)."""
        keepers = self._supervisor.keepers
        assert keepers is not None
        name = program if program is not None else plan.executable
        cgroup: ProcessCgroup | None = None
        enter: list[str] = []
        if self._containment is not None:
            if (group := self._shared_group()) is not None:
                containment = self._containment
                assert containment is not None
                enter = _fail_closed(plan, lambda: containment.group_members(group))
            else:
                cgroup = self._new_cgroup(plan)
        try:
            link, answer, directory = keepers.spawn(
                self._session.id,
                self._principal,
                process_id,
                plan,
                program=name,
                cgroups=cgroup.directories if cgroup is not None else [],
                enter=enter,
                outlive=outlive,
                network=network,
            )
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise
        proc = self._kept(
            process_id,
            link,
            directory,
            pid=int(answer["pid"]),
            tty=plan.tty,
            pipe_stdin=plan.pipe_stdin,
            program=name,
            classify_denial=classify_denial,
            outlive=outlive,
        )
        if self._telemetry is not None:
            self._telemetry.process_spawned()
        return proc

    def _shared_group(self) -> str | None:
        """The principal whose group's shared leaf the process goes into, when it
        needs no cgroup of its own (``ProcessCgroups.per_process``)."""
        containment = self._containment
        if containment is None or containment.per_process:
            return None
        return self._principal

    def _new_cgroup(self, plan: LaunchPlan) -> ProcessCgroup:
        """The process's resource-limit cgroup (in its principal's group). Fails
        closed: with limits configured nothing runs without them (``plan`` is then
        closed and the start refused)."""
        containment = self._containment
        assert containment is not None
        try:
            cgroup = containment.create(self._principal)
            # The next one, in a worker thread: on the loop it ran between this
            # spawn's answer and its command's exit, on the way to its `closed`.
            made = asyncio.get_running_loop().run_in_executor(
                None, containment.prepare, self._principal
            )
            made.add_done_callback(_log_failure)
            return cgroup
        except OSError as exc:
            plan.close()
            raise _no_cgroup(exc) from None

    def _kept(
        self,
        process_id: str,
        link: socket.socket,
        directory: str,
        *,
        pid: int,
        tty: bool,
        pipe_stdin: bool,
        program: str,
        classify_denial: DenialClassifier | None,
        outlive: bool = True,
    ) -> KeptProcess:
        keepers = self._supervisor.keepers
        assert keepers is not None
        proc = KeptProcess(
            process_id,
            link,
            pid=pid,
            tty=tty,
            pipe_stdin=pipe_stdin,
            directory=directory,
            session=self._session,
            supervisor=self._supervisor,
            program=program,
            retained_bytes=self._retained_bytes,
            classify_denial=classify_denial,
            on_closed=self._on_closed,
            on_exited=self._on_exited,
            on_released=lambda p: keepers.released(p.directory),
            leaving=lambda: keepers.leaving,
        )
        proc.outlives_daemon = outlive
        self._procs[process_id] = proc
        return proc

    def readopt(
        self, process_id: str, name: str
    ) -> tuple[ManagedProcess, list[SavedListeners]] | None:
        """A process a previous daemon started (--state-dir): reconnected to its keeper,
        which replays its journal, so its log and seqs are what they were; with the
        listeners of its managed network the keeper held (the caller serves them:
        netproxy.launch.restore_network). None if its keeper is gone (it is dropped
        from the session's file)."""
        keepers = self._supervisor.keepers
        assert keepers is not None
        try:
            adopted = keepers.adopt(self._session.id, name)
        except KeeperGone as exc:
            log.warning("process %s of session %s is gone: %s", process_id, self._session.id, exc)
            keepers.forget_gone(self._session.id, name)
            return None
        meta = adopted.meta
        proc = self._kept(
            process_id,
            adopted.link,
            adopted.directory,
            pid=int(meta["pid"]),
            tty=bool(meta["tty"]),
            pipe_stdin=bool(meta["pipe_stdin"]),
            program=str(meta.get("program") or ""),
            classify_denial=None,
        )
        if meta.get("replay_mark"):
            proc.expect_replay()
        if self._telemetry is not None:
            self._telemetry.process_spawned()  # balanced by its exit, replayed or to come
        return proc, adopted.network

    def _on_exited(self, proc: ManagedProcess) -> None:
        if self._telemetry is not None:
            self._telemetry.process_exited(proc)

    def _on_closed(self, proc: ManagedProcess) -> None:
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        self._expiry[proc.process_id] = loop.call_later(
            self._retention_s, self._forget, proc.process_id, proc
        )

    def _forget(self, process_id: str, proc: ManagedProcess) -> None:
        self._expiry.pop(process_id, None)
        if self._procs.get(process_id) is proc:
            del self._procs[process_id]
            proc.forget()
            # Escapees of a forgotten process still belong to the session: they are
            # killed when it ends, not when the id is released.
            if not proc.tree.empty:
                self._leftover_trees.append(proc.tree)

    async def aclose(self) -> None:
        self._closed = True
        for timer in self._expiry.values():
            timer.cancel()
        self._expiry.clear()
        # Children being spawned are registered when they run: then killed with the rest.
        await asyncio.gather(*self._starting.values(), return_exceptions=True)
        procs = list(self._procs.values())
        self._procs.clear()
        if procs:
            log.info("session %s closing: killing %d process tree(s)", self._session.id, len(procs))
        await asyncio.gather(*(p.aclose() for p in procs), return_exceptions=True)
        for tree in self._leftover_trees:
            self._supervisor.kill(tree)
        self._leftover_trees.clear()
        keepers = self._supervisor.keepers
        if keepers is not None:
            keepers.session_closed(self._session.id)


def _timed_spawn(plan: LaunchPlan, place: Placement | None = None) -> tuple[Spawned, float]:
    """``spawn(plan, place)`` and how long it waited for the child's exec."""
    began = time.perf_counter()
    spawned = spawn(plan, place)
    return spawned, time.perf_counter() - began


def _timed_spawn_placed(plan: LaunchPlan, place: Placement) -> tuple[Spawned, float]:
    """``_timed_spawn`` into a principal's shared leaf; ``place`` closed after."""
    try:
        return _timed_spawn(plan, place)
    finally:
        place.close()


def _timed_spawn_into(plan: LaunchPlan, cgroup: ProcessCgroup) -> tuple[Spawned, float]:
    """``_timed_spawn`` into the process's own cgroup, removed when the spawn fails
    (``plan`` closed too: entering the cgroup can fail before the spawn closes it)."""
    try:
        with cgroup.placement() as place:
            return _timed_spawn(plan, place)
    except BaseException:
        plan.close()
        cgroup.remove()
        raise


def _then_read_start(launch: Callable[[], tuple[Spawned, float]]) -> tuple[Spawned, float]:
    """``launch``, then the child's start time, both in a spawn thread. Right after
    its exec a child may still hold its exec lock, which a read of its /proc stat
    waits for (the kernel's ``do_task_stat``); a child below the loop's priority on
    a busy machine takes a while to get the CPU and let it go. Read on the loop
    (``Supervisor.track``), that stopped every session: 110 times in 15 s at 1,000
    agents, for up to 51 ms (docs/scale.md, "What stops the loop")."""
    spawned, took = launch()
    spawned.start = read_start(spawned.pid)
    return spawned, took


def _nothing(proc: ManagedProcess) -> None:
    """No ``on_started``."""


def _log_failure(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and (error := done.exception()) is not None:
        log.error("preparing the next process cgroup failed: %r", error)


def _no_cgroup(exc: OSError) -> RpcError:
    """The refusal of a start whose cgroup could not be made or entered (fail closed:
    with limits or quotas configured nothing runs outside them)."""
    return RpcError.internal(f"cannot create the process's resource-limit cgroup: {exc.strerror}")


T = TypeVar("T")


def _fail_closed(plan: LaunchPlan, make: Callable[[], T]) -> T:
    """``make()``, or, when the cgroup it needs cannot be had, ``plan`` closed and the
    start refused (``_no_cgroup``)."""
    try:
        return make()
    except OSError as exc:
        plan.close()
        raise _no_cgroup(exc) from None


def _child_of(plan: LaunchPlan) -> Callable[[], int | None] | None:
    """What names a sandboxed plan's pid 1 once bwrap has said it (its status pipe
    is read by the sandbox's watcher thread); None for an unsandboxed plan."""
    if plan.mechanism != "bwrap":
        return None
    resources = plan.resources
    return lambda: resources.child_pid
