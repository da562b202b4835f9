"""One persistent fs helper process, seen from the daemon.

``spawn_helper`` is the only place a helper process is started: the
per-process resource limits (``contained_helper``'s cgroup) are applied there
and held for the helper's whole life, then the cgroup is killed and removed
when it ends. The launch goes through ``plan_for_policy``, the same plan
builder as ``process/start``: same bwrap layout, same seccomp program, same
synthetic mount-point bookkeeping (released when bwrap exits).

A helper that dies (crash, kill, sandbox that never came up) fails every call
in flight with the reference's text for a failed fs sandbox helper, -32603
``fs sandbox helper failed with status <status>: <stderr>``; the pool then
starts a fresh one for the next call. Nothing ever falls back to running the
operation outside the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import socket
import time
from contextlib import AsyncExitStack
from typing import Any, Final

from execserver.containment import contained_helper
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.fs_helper.protocol import (
    HEADER,
    OK,
    OS_ERROR,
    RPC_ERROR,
    STALE,
    Request,
    Response,
    frame,
    response_decoder,
)
from execserver.sandbox.fs_helper.runtime import HelperRuntime
from execserver.sandbox.helper_pids import helper_environment, register_helper
from execserver.sandbox.plan import LaunchPlan, LaunchRequest, plan_for_policy
from execserver.sandbox.policy import ResolvedPolicy
from execserver.wire.errors import RpcError, rpc_error_from_os_error

__all__ = ["FsHelper", "HelperDied", "HelperStale", "exit_status_text", "spawn_helper"]

_STDERR_KEEP: Final = 4096
_EXIT_GRACE: Final = 2.0


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


class HelperStale(Exception):
    """Raised internally when the helper found its mount view changed and did
    not answer the call: it must be retired and the call run in a fresh one."""


class FsHelper:
    def __init__(
        self,
        process: asyncio.subprocess.Process,
        plan: LaunchPlan,
        channel: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        errors: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        resources: AsyncExitStack,
    ) -> None:
        self.process = process
        self._plan = plan
        self._resources = resources  # its cgroup, released once it has exited
        self._responses, self._requests = channel
        self._errors, self._errors_writer = errors
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._stderr = bytearray()
        self._failure: RpcError | None = None
        self.last_used = time.monotonic()
        # Identity of the files the policy's rules name, taken before the sandbox
        # mounted them, and of the protected names' mount points once it was up
        # (both set by the pool): if the host replaces one, this helper is retired.
        self.identity: object = None
        self.guard: object = None
        self._accepting = True  # False once retired: the pool starts another helper
        self._stderr_task = asyncio.create_task(self._collect_stderr())
        self._reader = asyncio.create_task(self._read_responses())

    # ---- state ----------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._failure is None

    @property
    def accepting(self) -> bool:
        return self._accepting and self._failure is None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # ---- calls ----------------------------------------------------------------

    async def call(self, op: str, args: dict[str, Any]) -> Any:
        if self._failure is not None or not self._accepting:
            raise HelperDied
        request_id = next(self._ids)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self.last_used = time.monotonic()
        try:
            self._requests.write(frame(Request(request_id, op, args)))
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
                future = self._pending.get(response.id)
                if future is not None and not future.done():
                    future.set_result(response)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception as exc:  # a garbled frame: this helper cannot be trusted further
            self._stderr += f"\nbad frame from fs helper: {exc}".encode()
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self._died()

    async def _collect_stderr(self) -> None:
        while chunk := await self._errors.read(4096):
            self._stderr += chunk
            del self._stderr[:-_STDERR_KEEP]

    async def _died(self) -> None:
        try:
            await asyncio.wait_for(self.process.wait(), _EXIT_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), _EXIT_GRACE)
        assert self.process.returncode is not None
        detail = self._stderr.decode(errors="replace").strip()
        self._failure = RpcError.internal(
            f"fs sandbox helper failed with status "
            f"{exit_status_text(self.process.returncode)}: {detail}"
        )
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self._failure)
        self._requests.close()
        self._errors_writer.close()
        await self._resources.aclose()

    # ---- shutdown -------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop sending (the helper answers what it has, then sees EOF and exits);
        kill it if it does not go within the grace period."""
        self._accepting = False
        if not self._requests.is_closing():
            with contextlib.suppress(OSError):
                self._requests.write_eof()
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), _EXIT_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self._reader

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()


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
    policy: ResolvedPolicy, backend: SandboxBackend, runtime: HelperRuntime
) -> FsHelper | None:
    """Start a helper for ``policy``; None when the plan is not a bwrap plan
    (the private runtime binds need bwrap; the caller then uses the one-shot
    helper). Raises RpcError when the policy cannot be enforced here."""
    plan = plan_for_policy(
        policy,
        LaunchRequest(argv=list(runtime.argv), cwd="/", env=dict(runtime.env)),
        backend=backend,
        runtime_binds=runtime.binds,
    )
    if plan.mechanism != "bwrap":
        plan.close()
        return None
    # Sockets, not pipes: a request naming /proc/self/fd/0 or /1 cannot reopen a
    # socket (ENXIO), so it can neither read nor inject frames; a pipe it could.
    channel, channel_child = socket.socketpair()
    errors, errors_child = socket.socketpair()
    resources = AsyncExitStack()
    try:
        try:
            # The per-process resource limits hold for the helper too (None without them).
            place = await resources.enter_async_context(contained_helper())
            process = await asyncio.create_subprocess_exec(
                *plan.argv,
                env=helper_environment(plan.env),
                pass_fds=plan.pass_fds,
                cwd="/",
                stdin=channel_child.fileno(),
                stdout=channel_child.fileno(),
                stderr=errors_child.fileno(),
                start_new_session=True,
                preexec_fn=place,
            )
            register_helper(process.pid)
        finally:
            # The daemon's copies of the child's fds go now; bwrap's status pipe is
            # watched until bwrap exits, which also releases synthetic mount points.
            plan.close()
            channel_child.close()
            errors_child.close()
        streams = await asyncio.open_unix_connection(sock=channel)
        error_streams = await asyncio.open_unix_connection(sock=errors)
    except BaseException:
        channel.close()
        errors.close()
        await resources.aclose()
        raise
    return FsHelper(process, plan, streams, error_streams, resources)
