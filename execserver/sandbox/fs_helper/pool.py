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
(device, inode and birth time: an inode number alone comes back with the next
file created, a birth time does not), and of the protected names (``.git``,
``.codex``, ...) in every writable root once the sandbox is up. Before each call
it compares them with the host's: on any difference the helper is retired —
removed from the pool at once, so nothing can pick it again — and a new one
set up. As a second, independent line the helper itself refuses to serve once
any of its mounts is gone (``execserver.fs.sandbox_helper``), and the pool then
retries the call in a fresh helper.

Lifetime: at most ``max_helpers`` live helpers (the least recently used one is
retired beyond that) and each exits after ``idle_seconds`` without calls.
Retiring closes the request pipe; calls already sent still complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import weakref
from collections import OrderedDict
from typing import Any, Final

from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.fs_helper.helper import FsHelper, HelperDied, HelperStale, spawn_helper
from execserver.sandbox.fs_helper.runtime import PRIVATE_DIR, helper_runtime
from execserver.sandbox.policy import PROTECTED_NAMES, ResolvedPolicy
from execserver.sandbox.statx import statx
from execserver.wire.errors import RpcError

__all__ = ["HelperPool", "close_loop_pool", "eligible", "loop_pool"]

DEFAULT_MAX_HELPERS: Final = 8
DEFAULT_IDLE_SECONDS: Final = 30.0

Identity = tuple[tuple[str, object], ...]
# A fresh helper whose mounts change under the call again is retired too; past
# this many the call fails rather than chase a host that keeps replacing files.
_ATTEMPTS: Final = 3
_UNSTABLE_MESSAGE: Final = (
    "fs sandbox helper: the sandbox's paths kept changing on the host during the call"
)


def lasting_identity(path: str) -> object:
    """Who the file at ``path`` (a final symlink not followed) is, in a form a
    later file cannot take over: device, inode and birth time. An inode number
    alone goes to the next file created once this one is gone (ext4 reuses the
    lowest free number); a birth time is new with each file. Where the file
    system keeps no birth time the helper's own mount check is what catches a
    recycled number. None when nothing is there."""
    found = statx(path, follow_symlinks=False)
    if found is not None:
        return found
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)  # a libc without statx


def _identity(paths: list[str]) -> Identity:
    return tuple((path, lasting_identity(path)) for path in paths)


def rules_identity(policy: ResolvedPolicy) -> Identity:
    return _identity([r.path for r in policy.rules])


def protected_identity(policy: ResolvedPolicy) -> Identity:
    return _identity(
        [
            os.path.join(r.path, name)
            for r in policy.rules
            if r.access == "write" and r.is_dir
            for name in PROTECTED_NAMES
        ]
    )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def eligible(policy: ResolvedPolicy, backend: SandboxBackend) -> bool:
    """Whether a persistent helper can serve ``policy`` here. When not, the
    one-shot helper does (it enforces the same policy, only slower)."""
    if backend.bwrap is None or not backend.seccomp_ok or helper_runtime() is None:
        return False
    if policy.enforces_nothing or policy.full_write or policy.legacy_landlock:
        return False
    # A rule on /dev itself would cover (or, writable, put on the host) the
    # private runtime directory.
    return not any(r.path == "/dev" or _inside(r.path, PRIVATE_DIR) for r in policy.rules)


class HelperPool:
    def __init__(
        self,
        *,
        max_helpers: int = DEFAULT_MAX_HELPERS,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
    ) -> None:
        self.max_helpers = max_helpers
        self.idle_seconds = idle_seconds
        self._helpers: OrderedDict[ResolvedPolicy, FsHelper] = OrderedDict()
        self._starting: dict[ResolvedPolicy, asyncio.Future[FsHelper | None]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.TimerHandle | None = None
        self._closed = False

    def live(self) -> list[FsHelper]:
        return list(self._helpers.values())

    async def call(
        self, policy: ResolvedPolicy, backend: SandboxBackend, op: str, args: dict[str, Any]
    ) -> tuple[bool, Any]:
        """(True, result) when a persistent helper ran the call; (False, None)
        when none can serve this policy (the caller uses the one-shot helper).
        Errors of the operation, and the death of the helper, raise RpcError."""
        for _attempt in range(_ATTEMPTS):
            helper = await self._helper_for(policy, backend)
            if helper is None:
                return False, None
            try:
                result = await helper.call(op, args)
            except HelperDied:
                self._retire(policy, helper)
                continue  # died before this call was sent: nothing ran, start a new one
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
        raise RpcError.internal(_UNSTABLE_MESSAGE)

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
            runtime = helper_runtime()
            assert runtime is not None  # eligible() checked it
            # Taken before the sandbox mounts anything: a file replaced between
            # here and the mounts makes the next call's comparison fail (a retire,
            # never a stale view served).
            identity = rules_identity(policy)
            helper = await spawn_helper(policy, backend, runtime)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            self._starting.pop(policy, None)
        if helper is not None:
            helper.identity = identity
        future.set_result(helper)
        if helper is not None:
            self._helpers[policy] = helper
            self._evict_beyond_cap()
            self._arm_reaper()
        return helper

    # ---- retiring -------------------------------------------------------------

    def _retire(self, key: ResolvedPolicy, helper: FsHelper) -> None:
        if self._helpers.get(key) is helper:
            del self._helpers[key]
        task = asyncio.get_running_loop().create_task(helper.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _evict_beyond_cap(self) -> None:
        while len(self._helpers) > self.max_helpers:
            key, helper = next(iter(self._helpers.items()))
            self._retire(key, helper)

    def _arm_reaper(self) -> None:
        if self._reaper is None and self._helpers:
            loop = asyncio.get_running_loop()
            self._reaper = loop.call_later(max(self.idle_seconds / 2, 0.05), self._reap)

    def _reap(self) -> None:
        self._reaper = None
        now = time.monotonic()
        for key, helper in list(self._helpers.items()):
            idle = helper.in_flight == 0 and now - helper.last_used >= self.idle_seconds
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
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, HelperPool] = (
    weakref.WeakKeyDictionary()
)


def loop_pool() -> HelperPool:
    """The pool of the running event loop (helpers' pipes belong to one loop)."""
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None or pool._closed:
        pool = _pools[loop] = HelperPool()
    return pool


async def close_loop_pool() -> None:
    """Stop every helper of the running loop's pool (server shutdown)."""
    with contextlib.suppress(RuntimeError):
        pool = _pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()
