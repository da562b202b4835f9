"""One fs helper process, seen from the daemon.

Both kinds of helper are started here, through
``execserver/sandbox/fs_helper/launch.py`` (the same plan builder as
``process/start``; the per-process resource limits held for the helper's whole
life): ``spawn_helper`` on the private runtime (the pool keeps it for many
calls) and ``spawn_confined_helper`` (used for one call).

A helper that dies (crash, kill, sandbox that never came up) fails every call
in flight with the reference's text for a failed fs sandbox helper, -32603
``fs sandbox helper failed with status <status>: <stderr>``; the pool then
starts a fresh one for the next call. Nothing ever falls back to running the
operation outside the sandbox.

A helper says it is ready before it reads anything (``protocol.py``), and no call
is sent to it before then. One that has not said so within its start timeout is
killed, its process tree logged first (``stall_report.py``), and its callers get
``HelperNotStarted``: nothing ran, so the pool sends the call to a fresh helper.

bwrap exits only once its child has, except when bwrap itself fails after it
created the child and before it wrote the child's uid map: the child, blocked
until then, is left behind for good, holding the helper's sockets, and the
daemon would never see them close. So the helper's end is bwrap's exit, not
only EOF: once bwrap has exited, its process group is killed (``kill_helper``),
which ends such a child and, with it, the sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import signal
import time
from typing import Any, Final

import msgspec

from execserver.aio.tasks import TaskSet
from execserver.containment import ProcessCgroups
from execserver.fs.sandboxed.frames import (
    Request,
    Response,
    carry_fs_bytes,
    frame,
    response_decoder,
)
from execserver.fs.sandboxed.protocol import HEADER, OK, OS_ERROR, READY_ID, RPC_ERROR, STALE
from execserver.fs.sandboxed.stall_report import process_tree_report, socket_holders
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.fs_helper.launch import (
    SpawnedHelper,
    confined_plan,
    kill_helper,
    policy_view,
    runtime_plan,
    spawn_helper_process,
)
from execserver.sandbox.fs_helper.runtime import HelperRuntime
from execserver.sandbox.helper_pids import unregister_helper
from execserver.sandbox.plan import LaunchPlan, off_loop
from execserver.sandbox.policy import ResolvedPolicy
from execserver.wire.errors import RpcError, rpc_error_from_os_error

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "FsHelper",
    "HelperDied",
    "HelperNotStarted",
    "HelperStale",
    "exit_status_text",
    "spawn_confined_helper",
    "spawn_helper",
]

_log = logging.getLogger(__name__)

_STDERR_KEEP: Final = 4096
_EXIT_GRACE: Final = 2.0
# From a helper's process start to its ready frame. Under load (1,000 agents on
# two CPUs, docs/scale.md) a start takes seconds at worst, and a few helpers once
# never came up at all, holding their callers for good; past this one is given up.
DEFAULT_START_TIMEOUT: Final = 30.0


def exit_status_text(returncode: int) -> str:
    """How Rust's ``ExitStatus`` prints (the reference's message embeds it)."""
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            return f"signal: {sig}"
        return f"signal: {sig} ({name})"
    return f"exit status: {returncode}"


class HelperDied(Exception):
    """Raised internally when a call is sent to a helper that is already gone."""


class HelperNotStarted(Exception):
    """Raised internally when the helper did not say it was ready within its start
    timeout: it was killed before any call reached it, so a fresh one may run the call."""


class HelperStale(Exception):
    """Raised internally when the helper found its mount view changed and did
    not answer the call: it must be retired and the call run in a fresh one."""


class FsHelper:
    def __init__(
        self, spawned: SpawnedHelper, start_timeout: float = DEFAULT_START_TIMEOUT
    ) -> None:
        self.process = spawned.process
        self._resources = spawned.resources  # its cgroup, released once it has exited
        self._responses, self._requests = spawned.channel
        self._errors, self._errors_writer = spawned.errors
        self._child_sockets = spawned.child_sockets
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._stderr = bytearray()
        self._failure: RpcError | None = None
        self.last_used = time.monotonic()
        # The longest time it went without a call in flight, between two calls:
        # how long its user's turns take (the pool keeps it that long, see
        # HelperPool.keeps).
        self.longest_gap = 0.0
        # Identity of the files the policy's rules name, taken before the sandbox
        # mounted them, and of the protected names' mount points once it was up
        # (both set by the pool): if the host replaces one, this helper is retired.
        self.identity: object = None
        self.guard: object = None
        self._accepting = True  # False once retired: the pool starts another helper
        loop = asyncio.get_running_loop()
        # Set by the helper's ready frame; failed when it dies or does not start in time.
        self._ready: asyncio.Future[None] = loop.create_future()
        self._start_timer = loop.call_later(start_timeout, self._start_overdue, start_timeout)
        # Both end by themselves when the helper exits (EOF on its sockets).
        self._tasks = TaskSet(f"fs-helper-{self.process.pid}")
        self._stderr_task = self._tasks.spawn(self._collect_stderr(), name="stderr")
        self._reader = self._tasks.spawn(self._read_responses(), name="responses")
        self._tasks.spawn(self._end_with_bwrap(), name="exit")

    # ---- state ----------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._failure is None

    @property
    def failure(self) -> RpcError | None:
        """Why the helper is gone (the reference's -32603 text), once it is."""
        return self._failure

    @property
    def accepting(self) -> bool:
        return self._accepting and self._failure is None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # ---- calls ----------------------------------------------------------------

    async def call(self, op: str, args: dict[str, Any]) -> Any:
        if not self._ready.done():
            # Raises HelperNotStarted, or the helper's failure if it died first.
            await asyncio.shield(self._ready)
        if self._failure is not None or not self._accepting:
            raise HelperDied
        request_id = next(self._ids)
        # Framed before the call is registered: a request that cannot be framed
        # raises here and leaves no pending call behind.
        data = frame(Request(request_id, op, carry_fs_bytes(args)))
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        now = time.monotonic()
        if not self._pending:
            self.longest_gap = max(self.longest_gap, now - self.last_used)
        self._pending[request_id] = future
        self.last_used = now
        try:
            self._requests.write(data)
            await self._requests.drain()
        except (ConnectionError, RuntimeError):
            pass  # the reader sees the helper die and fails the future
        try:
            response = await future
        finally:
            self._pending.pop(request_id, None)
            self.last_used = time.monotonic()
        return _unwrap(response)

    # ---- the reader ---------------------------------------------------------------

    async def _read_responses(self) -> None:
        stdout = self._responses
        try:
            while True:
                header = await stdout.readexactly(HEADER.size)
                (size,) = HEADER.unpack(header)
                response = response_decoder.decode(await stdout.readexactly(size))
                if response.id == READY_ID:
                    self._started()
                    continue
                future = self._pending.get(response.id)
                if future is not None and not future.done():
                    future.set_result(response)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception as exc:  # a garbled frame: this helper cannot be trusted further
            self._stderr += f"\nbad frame from fs helper: {exc}".encode()
            kill_helper(self.process)
        await self._died()

    async def _end_with_bwrap(self) -> None:
        await self.process.wait()
        # Harmless when the group is empty (the usual case: the helper exited first).
        kill_helper(self.process)
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), _EXIT_GRACE)
        except TimeoutError:
            # Still open: a process outside the group holds the helper's end. Name
            # it, then close the daemon's ends: the reader ends, and the helper with it.
            holders = await asyncio.to_thread(socket_holders, self._child_sockets)
            _log.warning(
                "fs sandbox helper %d: bwrap exited (%s) and its process group was "
                "killed, but its sockets are still open in: %s; closing them",
                self.process.pid,
                exit_status_text(self.process.returncode or 0),
                ", ".join(holders) or "no process found",
            )
            self._requests.close()
            self._errors_writer.close()

    def _started(self) -> None:
        self._start_timer.cancel()
        if not self._ready.done():
            self._ready.set_result(None)

    def _start_overdue(self, timeout: float) -> None:
        if self._ready.done():
            return
        self._accepting = False
        # Its callers go to a fresh helper now; this one is killed once its
        # processes have been looked at (in a thread: when bwrap is gone, that
        # means a scan of /proc).
        self._fail_start(HelperNotStarted(f"fs sandbox helper did not start within {timeout:g} s"))
        self._tasks.spawn(self._report_and_kill(timeout), name="overdue")

    async def _report_and_kill(self, timeout: float) -> None:
        try:
            report = await asyncio.to_thread(process_tree_report, self.process.pid)
            _log.warning(
                "fs sandbox helper %d did not start within %g s: killed, its calls go to "
                "a fresh helper. Its stderr: %r. Its processes:\n%s",
                self.process.pid,
                timeout,
                self._stderr.decode(errors="replace").strip(),
                report,
            )
        finally:
            self.kill()  # the reader then sees it exit and releases the rest

    def _fail_start(self, exc: BaseException) -> None:
        if not self._ready.done():
            self._ready.set_exception(exc)
            self._ready.exception()  # retrieved: a helper nobody waits for is no error

    async def _collect_stderr(self) -> None:
        while chunk := await self._errors.read(4096):
            self._stderr += chunk
            del self._stderr[:-_STDERR_KEEP]

    async def _died(self) -> None:
        try:
            await asyncio.wait_for(self.process.wait(), _EXIT_GRACE)
        except TimeoutError:
            kill_helper(self.process)
            await self.process.wait()
        # Whatever its group still holds (kill_helper says what that can be).
        kill_helper(self.process)
        unregister_helper(self.process.pid)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), _EXIT_GRACE)
        assert self.process.returncode is not None
        detail = self._stderr.decode(errors="replace").strip()
        self._failure = RpcError.internal(
            f"fs sandbox helper failed with status "
            f"{exit_status_text(self.process.returncode)}: {detail}"
        )
        self._start_timer.cancel()
        if not self._ready.done() and self._accepting:  # not retired while it started
            _log.warning(
                "fs sandbox helper %d ended before it was ready: %s",
                self.process.pid,
                self._failure.message,
            )
        self._fail_start(self._failure)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self._failure)
        self._requests.close()
        self._errors_writer.close()
        await self._resources.aclose()

    # ---- shutdown -------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop sending (the helper answers what it has, then sees EOF and exits);
        kill it if it does not go within the grace period; return once it has
        exited and its cgroup is gone."""
        self._accepting = False
        if not self._requests.is_closing():
            with contextlib.suppress(OSError):
                self._requests.write_eof()
        if not await self._tasks.wait(_EXIT_GRACE):
            self.kill()
        # The reader ends once the helper has exited: nothing left to cancel.
        await self._tasks.wait()
        await self._tasks.aclose()

    def kill(self) -> None:
        kill_helper(self.process)


def _unwrap(response: Response) -> Any:
    if response.kind == OK:
        return response.value
    if response.kind == OS_ERROR:
        raise rpc_error_from_os_error(OSError(response.code, response.message))
    if response.kind == RPC_ERROR:
        raise RpcError(response.code, response.message)
    if response.kind == STALE:
        raise HelperStale(response.message)
    raise RpcError.internal(response.message or "fs sandbox helper failed")


async def spawn_helper(
    policy: ResolvedPolicy,
    backend: SandboxBackend,
    runtime: HelperRuntime,
    containment: ProcessCgroups | None = None,
    nice: int = 0,
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> FsHelper | None:
    """Start a helper on the private ``runtime`` for ``policy``; None when the
    plan is not a bwrap plan (the caller then uses ``spawn_confined_helper``).
    Raises RpcError when the policy cannot be enforced here."""
    plan = runtime_plan(policy, backend, runtime, contained=containment is not None)
    if plan is None:
        return None
    return FsHelper(await spawn_helper_process(plan, containment, nice), start_timeout)


_VIEW = msgspec.json.Encoder()


async def spawn_confined_helper(
    policy: ResolvedPolicy,
    backend: SandboxBackend,
    module: str,
    containment: ProcessCgroups | None = None,
    nice: int = 0,
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> FsHelper:
    """Start ``python -m module confined <view>`` for ``policy``: the interpreter
    may read what it needs to start, and the program confines itself to the
    policy's view before each call. Any sandbox mechanism; meant for one call."""
    args = ("confined", _VIEW.encode(policy_view(policy)).decode())
    # Off the loop: the plan stats and resolves the policy's paths.
    contained = containment is not None
    plan = await off_loop(
        lambda: confined_plan(policy, backend, module, args, contained=contained), _close
    )
    return FsHelper(await spawn_helper_process(plan, containment, nice), start_timeout)


def _close(plan: LaunchPlan) -> None:
    plan.close()
