"""The fs service's client of its sandboxed helpers: one call, one answer.

``SandboxedFs.call`` resolves the request's policy (in a worker thread: it
walks the file system), then sends the operation to a persistent helper of the
pool when one can serve that policy, else to a confined helper started for
this one call (any sandbox mechanism; also every call when the daemon runs
with ``EXECSERVER_FS_HELPER=oneshot``). Both are the same program speaking the
same protocol with the same error encoding (``program.py``, ``protocol.py``);
nothing ever runs the operation outside the sandbox.

The daemon keeps one ``SandboxedFs`` in its server-wide state
(``ctx.server.state``), built on the first sandboxed call and closed, with its
helpers, at shutdown (``execserver/fs/dispatch.py`` ``sandboxed_fs``).

Figures (benchmarks/sandboxed_fs.py, 4 KiB fs/readFile under workspace-write,
this 2-core VM): p50 0.33 ms through a persistent helper and 47 ms with a
helper per call (``EXECSERVER_FS_HELPER=oneshot``), so the per-call helper
stays only for what the pool cannot serve and as the operator's opt-out.
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from typing import Any

from execserver.config import DEFAULT_GLOB_SCAN_LIMIT, SandboxConfig
from execserver.containment import ProcessCgroups
from execserver.fs.sandboxed import program
from execserver.fs.sandboxed.helper import (
    DEFAULT_START_TIMEOUT,
    HelperDied,
    HelperNotStarted,
    spawn_confined_helper,
)
from execserver.fs.sandboxed.pool import HelperPool
from execserver.kernel.fair_gate import FairGate
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.plan import off_loop
from execserver.sandbox.policy import ResolvedPolicy, resolve_policy
from execserver.wire.errors import RpcError
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = ["SandboxedFs"]


def _keep(policy: ResolvedPolicy) -> None:
    """Nothing to release for a resolved policy (``off_loop``'s cancel hook)."""


def default_concurrency() -> int:
    """Calls at once by default: sixteen per CPU. At 1,000 agents on 2 CPUs
    (docs/scale.md), 8, 32 and 96 at once and no bound gave 54, 98, 59 and 49
    operations/s: too few leaves the helpers idle, too many queue on the loop."""
    return 16 * (len(os.sched_getaffinity(0)) or 1)


class SandboxedFs:
    """Runs fs operations (by their helper name, ``execserver/fs/operations.py``)
    in the sandbox of a request. ``module`` is the helper program; a test may
    give its own (a module that calls ``program.main`` with its operations)."""

    def __init__(
        self,
        backend: SandboxBackend,
        *,
        persistent: bool = True,
        glob_scan_limit: int = DEFAULT_GLOB_SCAN_LIMIT,
        module: str = program.__name__,
        containment: ProcessCgroups | None = None,
        max_helpers: int | None = None,
        concurrency: int | None = None,
        nice: int = 0,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.backend = backend
        # Nice steps below the daemon for its helpers (execserver/priority.py).
        self.nice = nice
        # How long a helper may take to come up (helper.py).
        self.start_timeout = start_timeout
        # At most this many calls at once, daemon-wide, shared fairly between callers
        # (FairGate): past that, a call waits for a slot without taking loop time.
        self.gate = FairGate(concurrency or default_concurrency())
        self.max_helpers = max_helpers
        # The daemon's per-process limits, for the helpers (None without them).
        self.containment = containment
        self.persistent = persistent
        self.glob_scan_limit = glob_scan_limit
        self.module = module
        self._pool: HelperPool | None = None

    @classmethod
    def of(
        cls,
        backend: SandboxBackend | None,
        config: SandboxConfig,
        containment: ProcessCgroups | None = None,
        nice: int = 0,
    ) -> SandboxedFs:
        """The server's; a server that never probed its backend refuses (fail closed)."""
        if backend is None:
            raise RpcError.internal("the sandbox backend was not probed at start-up")
        return cls(
            backend,
            persistent=config.persistent_fs_helper,
            glob_scan_limit=config.glob_scan_limit,
            containment=containment,
            max_helpers=config.fs_helpers_max,
            concurrency=config.fs_concurrency,
            nice=nice,
        )

    @property
    def pool(self) -> HelperPool:
        """The persistent helpers (made on first use: the daemon may never need one)."""
        if self._pool is None:
            self._pool = HelperPool(
                module=self.module,
                containment=self.containment,
                max_helpers=self.max_helpers,
                nice=self.nice,
                start_timeout=self.start_timeout,
            )
        return self._pool

    async def call(
        self,
        context: FileSystemSandboxContext,
        op: str,
        args: dict[str, Any],
        *,
        module: str | None = None,
        caller: Hashable = None,
    ) -> Any:
        """``op(**args)`` inside the sandbox of ``context``; its OSError and RpcError
        come back as the reference's RpcError, a helper that died as -32603.
        ``module``: another helper program than this client's (one call each).
        ``caller``: whose turn the call waits for when the gate is full (a session)."""
        async with self.gate.slot(caller):
            return await self._call(context, op, args, module)

    async def _call(
        self, context: FileSystemSandboxContext, op: str, args: dict[str, Any], module: str | None
    ) -> Any:
        # fs/* has no process cwd to fall back to: dynamic entries need the context's cwd.
        policy = await off_loop(
            lambda: resolve_policy(
                context, fallback_cwd=None, glob_scan_limit=self.glob_scan_limit
            ),
            _keep,
        )
        own = module is None or module == self.module
        if own and self.persistent and self.pool.serves(policy, self.backend):
            served, result = await self.pool.call(policy, self.backend, op, args)
            if served:
                return result
        return await self._call_once(policy, op, args, module or self.module)

    async def _call_once(
        self, policy: ResolvedPolicy, op: str, args: dict[str, Any], module: str
    ) -> Any:
        """A confined helper for this call alone: it exits once the call is answered
        (the channel closes), and is killed if the caller goes first."""
        helper = await spawn_confined_helper(
            policy, self.backend, module, self.containment, self.nice, self.start_timeout
        )
        try:
            return await helper.call(op, args)
        except HelperDied:
            pass  # gone before the call was sent (e.g. a refused plan): its failure below
        except HelperNotStarted as exc:
            raise RpcError.internal(str(exc)) from None
        except BaseException:
            helper.kill()  # cancelled: do not leave the helper (and what it started) behind
            raise
        finally:
            await helper.aclose()
        failure = helper.failure
        raise failure if failure is not None else RpcError.internal("fs sandbox helper failed")

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
