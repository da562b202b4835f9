"""Which persistent helper serves a call, and how long helpers live.

There is at most one helper per **resolved** policy (host paths after
``realpath``, globs expanded, missing paths dropped): a policy that resolves
differently — another writable root, a new file matching a deny glob — gets a
helper of its own, and one helper never serves two policies.

A helper's mount view is only as good as the files its mounts sit on. When the
host renames a file over a masked (denied) file, or removes a read-only
carve-out, the kernel detaches the helper's mount on that name in the helper's
long-lived namespace, and the name would be served unmasked. So the pool
records, when it starts a helper, the identity of every path a rule names
(``execserver/sandbox/fs_helper/identity.py``)
(device, inode and birth time: an inode number alone comes back with the next
file created, a birth time does not), and of the protected names (``.git``,
``.codex``, ...) in every writable root once the sandbox is up. Before each call
it compares them with the host's: on any difference the helper is retired —
removed from the pool at once, so nothing can pick it again — and a new one
set up. As a second, independent line the helper itself refuses to serve once
any of its mounts is gone (``program.py``), and the pool then
retries the call in a fresh helper.

Lifetime: at most ``max_helpers`` live helpers (by default as many as a quarter
of the memory holds, ``capacity.py``; the least recently used one is retired
beyond that) and each exits after ``idle_seconds`` without calls — or, for a
helper whose user comes back at longer intervals, after twice the longest
interval between its calls (its predecessor's last one included), at most
``IDLE_CEILING_FACTOR`` times ``idle_seconds``. Why: with 1,000 agents on two
CPUs an agent's turn took longer than 30 s, its helper was retired between two
turns and started again at the next, and those starts took the CPU the turns
needed (two thirds of the event loop's samples were helper starts; 9.9
operations/s, against over 200 with 100 agents). A helper used at a steady
rhythm now lives through it; one whose agent left goes after that allowance.
Retiring closes the request pipe; calls already sent still complete.

A helper that does not come up within its start timeout (``helper.py``) is
retired like a dead one and the call goes to a fresh helper: no call was sent to
it, so nothing ran twice. Past ``_ATTEMPTS`` such helpers the call fails with
-32603 naming the timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any, Final

from execserver.aio.tasks import TaskSet
from execserver.containment import ProcessCgroups
from execserver.fs.sandboxed import program
from execserver.fs.sandboxed.capacity import default_max_helpers
from execserver.fs.sandboxed.helper import (
    DEFAULT_START_TIMEOUT,
    FsHelper,
    HelperDied,
    HelperNotStarted,
    HelperStale,
    spawn_helper,
)
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.fs_helper.identity import protected_identity, rules_identity
from execserver.sandbox.fs_helper.runtime import helper_runtime, serves_policy
from execserver.sandbox.policy import ResolvedPolicy
from execserver.wire.errors import RpcError

__all__ = ["DEFAULT_IDLE_SECONDS", "HelperPool"]

DEFAULT_IDLE_SECONDS: Final = 30.0
# A helper is kept idle at most this many times idle_seconds, however long the
# intervals of its calls have been.
IDLE_CEILING_FACTOR: Final = 10.0
# A fresh helper whose mounts change under the call again is retired too; past
# this many the call fails rather than chase a host that keeps replacing files.
_ATTEMPTS: Final = 3
_UNSTABLE_MESSAGE: Final = (
    "fs sandbox helper: the sandbox's paths kept changing on the host during the call"
)


class HelperPool:
    """The helpers of one event loop (their sockets belong to it); built by the
    fs service's client on its first persistent call and closed with it."""

    def __init__(
        self,
        *,
        max_helpers: int | None = None,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        module: str = program.__name__,
        containment: ProcessCgroups | None = None,
        nice: int = 0,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        # None: as many as the memory allows (capacity.py).
        self.max_helpers = default_max_helpers() if max_helpers is None else max_helpers
        # The daemon's per-process limits hold for its helpers too (None without them).
        self._containment = containment
        # Nice steps below the daemon the helpers take (execserver/priority.py).
        self._nice = nice
        self.start_timeout = start_timeout
        self.idle_seconds = idle_seconds
        self._runtime = helper_runtime(module)
        self._helpers: OrderedDict[ResolvedPolicy, FsHelper] = OrderedDict()
        self._starting: dict[ResolvedPolicy, asyncio.Future[FsHelper | None]] = {}
        self._closing = TaskSet("fs-helper-pool")
        self._reaper: asyncio.TimerHandle | None = None
        self._closed = False
        # When the helpers retired for idleness were last used, by policy (as
        # many as max_helpers): a helper started again for one of them is kept
        # for the interval its user actually took.
        self._left_idle: OrderedDict[ResolvedPolicy, float] = OrderedDict()

    def live(self) -> list[FsHelper]:
        return list(self._helpers.values())

    def serves(self, policy: ResolvedPolicy, backend: SandboxBackend) -> bool:
        """Whether a helper of this pool can serve ``policy`` here. When not, a
        confined helper does (it enforces the same policy, only slower)."""
        return self._runtime is not None and serves_policy(policy, backend)

    async def call(
        self, policy: ResolvedPolicy, backend: SandboxBackend, op: str, args: dict[str, Any]
    ) -> tuple[bool, Any]:
        """(True, result) when a persistent helper ran the call; (False, None)
        when none can serve this policy (the caller uses a confined helper).
        Errors of the operation, and the death of the helper, raise RpcError."""
        failure = _UNSTABLE_MESSAGE
        for _attempt in range(_ATTEMPTS):
            helper = await self._helper_for(policy, backend)
            if helper is None:
                return False, None
            try:
                result = await helper.call(op, args)
            except HelperDied:
                self._retire(policy, helper)
                continue  # died before this call was sent: nothing ran, start a new one
            except HelperNotStarted as exc:
                self._retire(policy, helper)
                failure = str(exc)
                continue  # never came up, so it never read this call: start a new one
            except HelperStale:
                # The helper saw one of its mounts go and did not answer (or, for
                # a write, the host changed the view while it ran): a fresh helper
                # with the current view runs the call again.
                self._retire(policy, helper)
                continue
            if helper.guard is None:
                # The sandbox is up now (it answered): its synthetic mount points exist.
                helper.guard = protected_identity(policy)
            return True, result
        raise RpcError.internal(failure)

    def _current(self, helper: FsHelper, policy: ResolvedPolicy) -> bool:
        """Whether ``helper`` may serve another call of ``policy``: still taking
        calls, and every file its mounts sit on still the one it mounted."""
        if not helper.accepting or helper.identity != rules_identity(policy):
            return False
        return helper.guard is None or helper.guard == protected_identity(policy)

    async def _helper_for(self, policy: ResolvedPolicy, backend: SandboxBackend) -> FsHelper | None:
        if self._closed:
            raise RuntimeError("fs helper pool is closed")
        while True:
            helper = self._helpers.get(policy)
            if helper is None:
                break
            if self._current(helper, policy):
                self._helpers.move_to_end(policy)
                return helper
            self._retire(policy, helper)
        starting = self._starting.get(policy)
        if starting is not None:
            return await asyncio.shield(starting)
        future: asyncio.Future[FsHelper | None] = asyncio.get_running_loop().create_future()
        self._starting[policy] = future
        try:
            runtime = self._runtime
            assert runtime is not None  # serves() checked it
            # Taken before the sandbox mounts anything: a file replaced between
            # here and the mounts makes the next call's comparison fail (a retire,
            # never a stale view served).
            identity = rules_identity(policy)
            helper = await spawn_helper(
                policy, backend, runtime, self._containment, self._nice, self.start_timeout
            )
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            self._starting.pop(policy, None)
        if helper is not None:
            helper.identity = identity
            left = self._left_idle.pop(policy, None)
            if left is not None:
                # Its user came back after the last helper went idle: that
                # interval is the rhythm the new one is kept for.
                helper.longest_gap = time.monotonic() - left
        future.set_result(helper)
        if helper is not None:
            self._helpers[policy] = helper
            self._evict_beyond_cap()
            self._arm_reaper()
        return helper

    # ---- retiring -------------------------------------------------------------

    def _retire(self, key: ResolvedPolicy, helper: FsHelper) -> None:
        if self._helpers.get(key) is not helper:
            return  # retired already (every call that found it gone retires it)
        del self._helpers[key]
        if self._closing.closed:  # a call that ended after the pool closed
            helper.kill()
            return
        self._closing.spawn(helper.aclose(), name=f"retire-{helper.process.pid}")

    def _evict_beyond_cap(self) -> None:
        while len(self._helpers) > self.max_helpers:
            key, helper = next(iter(self._helpers.items()))
            self._retire(key, helper)

    def _arm_reaper(self) -> None:
        if self._reaper is None and self._helpers:
            loop = asyncio.get_running_loop()
            self._reaper = loop.call_later(max(self.idle_seconds / 2, 0.05), self._reap)

    def keeps(self, helper: FsHelper) -> float:
        """How long ``helper`` may stay without calls: ``idle_seconds``, or twice
        the longest interval between its calls so far, up to the ceiling."""
        rhythm = 2 * helper.longest_gap
        return min(max(self.idle_seconds, rhythm), IDLE_CEILING_FACTOR * self.idle_seconds)

    def _reap(self) -> None:
        self._reaper = None
        now = time.monotonic()
        for key, helper in list(self._helpers.items()):
            idle = helper.in_flight == 0 and now - helper.last_used >= self.keeps(helper)
            if idle and helper.alive:
                self._left_idle[key] = helper.last_used
                while len(self._left_idle) > self.max_helpers:
                    self._left_idle.popitem(last=False)
            if idle or not helper.alive:
                self._retire(key, helper)
        self._arm_reaper()

    async def aclose(self) -> None:
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for key, helper in list(self._helpers.items()):
            self._retire(key, helper)
        # Each retiring helper gets its grace period to exit (FsHelper.aclose).
        await self._closing.wait()
        await self._closing.aclose()
