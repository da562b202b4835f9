"""exec_command and write_stdin over one executor.

The manager owns the process store. A process that is still running when its
call's yield time is up stays stored (it was stored *before* output collection,
so a concurrent write_stdin or an interrupted turn sees it) and is reachable by
its session id; a process that exits during a call is removed at the end of
that call. Cancelling a call (a turn interrupt) leaves stored processes alone;
only :meth:`clean`, pruning and shutdown terminate them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import time
from collections.abc import Mapping

from execserver.client.connection import ExecServerClient
from execserver.core.apply_patch.invocation import detect_apply_patch
from execserver.core.command_runtime import additional_permissions_preapproved
from execserver.core.errors import ExecFailed, Rejected, SandboxDenied, SandboxError
from execserver.core.orchestrator import ToolOrchestrator
from execserver.core.policy import override_request_rejection
from execserver.core.runtime import TurnContext
from execserver.core.unified_exec.collect import collect_until
from execserver.core.unified_exec.env import DEFAULT_ENV_POLICY
from execserver.core.unified_exec.errors import RespondToModel, stdin_closed, unknown_process
from execserver.core.unified_exec.intercept import (
    APPLY_PATCH_VIA_EXEC_WARNING,
    run_intercepted_patch,
)
from execserver.core.unified_exec.output import ExecCommandToolOutput, build_output
from execserver.core.unified_exec.params import (
    DEFAULT_MAX_BACKGROUND_TERMINAL_TIMEOUT_MS,
    ExecCommandParams,
    WriteStdinParams,
    clamp_exec_yield,
    clamp_write_yield,
)
from execserver.core.unified_exec.pause import YieldPause
from execserver.core.unified_exec.process import UnifiedExecProcess
from execserver.core.unified_exec.runtime import UnifiedExecRequest, UnifiedExecRuntime
from execserver.core.unified_exec.store import (
    MAX_PROCESSES,
    PROTECTED_RECENT,
    WARNING_THRESHOLD,
    ProcessIdAllocator,
    ProcessStore,
    StoredProcess,
)
from execserver.wire.process import ExecEnvPolicy

__all__ = [
    "APPLY_PATCH_VIA_EXEC_WARNING",
    "NETWORK_DENIED_FALLBACK",
    "UnifiedExecManager",
    "process_limit_warning",
]

log = logging.getLogger(__name__)

LOGIN_SHELL_DISABLED = "login shell is disabled by config; omit `login` or set it to false."
NETWORK_DENIED_FALLBACK = "Network access was denied by the Codex sandbox network proxy."
WRITE_PAUSE = 0.100
NETWORK_DENIAL_GRACE = 0.100
INTERRUPT = "\x03"


def process_limit_warning(threshold: int, count: int) -> str:
    return (
        "Warning: The maximum number of unified exec processes you can keep open is "
        f"{threshold} and you currently have {count} processes open. Reuse older "
        "processes or close them to prevent automatic pruning of old processes"
    )


class UnifiedExecManager:
    def __init__(
        self,
        client: ExecServerClient,
        *,
        env_policy: ExecEnvPolicy = DEFAULT_ENV_POLICY,
        env: Mapping[str, str] | None = None,
        allow_login_shell: bool = True,
        deterministic_ids: bool = False,
        max_processes: int = MAX_PROCESSES,
        protected_recent: int = PROTECTED_RECENT,
        warning_threshold: int = WARNING_THRESHOLD,
        max_background_terminal_timeout_ms: int = DEFAULT_MAX_BACKGROUND_TERMINAL_TIMEOUT_MS,
    ) -> None:
        self._client = client
        self._env_policy = env_policy
        self._env = dict(env or {})
        self._allow_login_shell = allow_login_shell
        self._ids = ProcessIdAllocator(deterministic=deterministic_ids)
        self.store: ProcessStore[UnifiedExecProcess] = ProcessStore(
            max_processes=max_processes, protected_recent=protected_recent
        )
        self._max_poll_ms = max_background_terminal_timeout_ms
        self._warning_threshold = warning_threshold
        # Enter ``manager.pause.paused()`` while a prompt blocks running commands.
        self.pause = YieldPause()

    # -- exec_command --------------------------------------------------------

    async def exec_command(
        self,
        args: ExecCommandParams | Mapping[str, object],
        turn: TurnContext,
        *,
        call_id: str = "",
    ) -> ExecCommandToolOutput:
        """Run a command; raises :class:`RespondToModel` for errors the model
        should read, ``TurnAborted`` when the user aborted at a prompt.

        ``args`` is an :class:`ExecCommandParams`, or the tool call's JSON
        object, decoded strictly (an unknown key is such an error)."""
        started = time.monotonic()
        if not isinstance(args, ExecCommandParams):
            try:
                args = ExecCommandParams.from_json(args)
            except ValueError as exc:
                raise RespondToModel(str(exc)) from exc
        argv = await self._argv(args)
        cwd = self._cwd(args, turn)

        patch = detect_apply_patch(argv, cwd)
        if patch is not None:
            return await run_intercepted_patch(
                self._client.fs,
                turn,
                patch,
                call_id=call_id,
                started=started,
                max_output_tokens=args.max_output_tokens,
            )

        rejection = override_request_rejection(
            turn.approval_policy,
            args.sandbox_permissions,
            additional_permissions_preapproved=additional_permissions_preapproved(
                args.sandbox_permissions, args.additional_permissions, turn.granted_permissions
            ),
        )
        if rejection is not None:
            raise RespondToModel(rejection)

        process_id = self._ids.allocate()
        req = UnifiedExecRequest(
            process_id=process_id,
            command=args.cmd,
            argv=tuple(argv),
            cwd=cwd,
            tty=args.tty,
            env=self._env,
            env_policy=self._env_policy,
            sandbox_permissions=args.sandbox_permissions,
            additional_permissions=args.additional_permissions,
            justification=args.justification,
            call_id=call_id,
        )
        try:
            result = await ToolOrchestrator(turn).run(UnifiedExecRuntime(self._client), req)
        except SandboxDenied as denial:
            # No retry (or denied again): the model learns the sandbox said no.
            self._ids.release(process_id)
            return build_output(
                denial.output.encode(),
                wall_time_seconds=time.monotonic() - started,
                max_output_tokens=args.max_output_tokens,
                exit_code=denial.exit_code,
                session_id=None,
            )
        except Rejected as exc:
            self._ids.release(process_id)
            raise RespondToModel(exc.message) from exc
        except (ExecFailed, SandboxError) as exc:
            self._ids.release(process_id)
            raise RespondToModel(f"exec_command failed for `{args.cmd}`: {exc}") from exc
        except BaseException:
            self._ids.release(process_id)
            raise

        process = result.output
        process.network_approval = result.deferred_network_approval
        warnings: tuple[str, ...] = ()
        entry: StoredProcess[UnifiedExecProcess] | None = None
        if not process.exited:
            entry, warnings = await self._store(process_id, process)
        info = self._client.environment_info
        windows = info is not None and info.platform_os == "windows"
        deadline = started + clamp_exec_yield(args.yield_time_ms, windows=windows) / 1000
        try:
            await collect_until(process, deadline, self.pause)
        finally:
            if entry is not None:
                entry.in_use -= 1
        return await self._respond(
            process_id, process, started, args.max_output_tokens, warnings=warnings
        )

    async def _argv(self, args: ExecCommandParams) -> list[str]:
        if args.login is True and not self._allow_login_shell:
            raise RespondToModel(LOGIN_SHELL_DISABLED)
        login = self._allow_login_shell if args.login is None else args.login
        shell = args.shell
        if shell is None:
            info = self._client.environment_info or await self._client.get_environment_info()
            shell = info.shell.path
        return [shell, "-lc" if login else "-c", args.cmd]

    def _cwd(self, args: ExecCommandParams, turn: TurnContext) -> str:
        base = turn.environment.cwd
        if not args.workdir:
            return base
        return posixpath.normpath(posixpath.join(base, args.workdir))

    async def _store(
        self, process_id: int, process: UnifiedExecProcess
    ) -> tuple[StoredProcess[UnifiedExecProcess], tuple[str, ...]]:
        pruned = self.store.store(process_id, process)
        entry = self.store.get(process_id)
        assert entry is not None
        if pruned is not None:
            log.info("pruning unified exec process %s", pruned.id)
            await self._discard(pruned)
        approval = process.network_approval
        if approval is not None:
            approval.watch(process.terminate)
        count = len(self.store)
        warnings = (
            (process_limit_warning(self._warning_threshold, count),)
            if count >= self._warning_threshold
            else ()
        )
        return entry, warnings

    async def _discard(self, entry: StoredProcess[UnifiedExecProcess]) -> None:
        """Terminate a process that leaves the store without exiting."""
        self._ids.release(entry.id)
        if entry.process.network_approval is not None:
            entry.process.network_approval.unregister()
        await entry.process.terminate()

    async def _respond(
        self,
        process_id: int,
        process: UnifiedExecProcess,
        started: float,
        max_output_tokens: int,
        *,
        warnings: tuple[str, ...] = (),
    ) -> ExecCommandToolOutput:
        """Drain what was collected; a process that exited is finished here:
        its network approval ends and it leaves the store. A late sandbox
        denial is reported like any exit - it is never retried."""
        if not process.exited:
            return build_output(
                process.drain(),
                wall_time_seconds=time.monotonic() - started,
                max_output_tokens=max_output_tokens,
                exit_code=None,
                session_id=process_id,
                warnings=warnings,
            )
        data = process.drain()
        if process.network_approval is not None:
            denial = await process.network_approval.finish(grace=NETWORK_DENIAL_GRACE)
            if denial is not None and NETWORK_DENIED_FALLBACK.encode() not in data:
                data += (b"\n" if data and not data.endswith(b"\n") else b"") + (
                    NETWORK_DENIED_FALLBACK.encode()
                )
        if process.is_denied():
            log.info("process %s was denied by the sandbox after the window", process_id)
        self.store.remove(process_id)
        self._ids.release(process_id)
        await process.close()
        if process.failure is not None and process.exit_code is None:
            raise RespondToModel(f"exec_command failed for `{process.command}`: {process.failure}")
        return build_output(
            data,
            wall_time_seconds=time.monotonic() - started,
            max_output_tokens=max_output_tokens,
            exit_code=process.exit_code,
            session_id=None,
            warnings=warnings,
        )

    # -- write_stdin ---------------------------------------------------------

    async def write_stdin(
        self, args: WriteStdinParams | Mapping[str, object]
    ) -> ExecCommandToolOutput:
        """Write to (or, with empty ``chars``, poll) a stored process. ``args``
        is a :class:`WriteStdinParams` or the tool call's JSON object, decoded
        strictly as for :meth:`exec_command`."""
        started = time.monotonic()
        if not isinstance(args, WriteStdinParams):
            try:
                args = WriteStdinParams.from_json(args)
            except ValueError as exc:
                raise RespondToModel(str(exc)) from exc
        entry = self.store.get(args.session_id)
        if entry is None:
            raise unknown_process(args.session_id)
        process = entry.process
        self.store.touch(entry.id)
        entry.in_use += 1
        try:
            if args.chars:
                await self._send(process, args.chars)
            yield_ms = clamp_write_yield(
                args.yield_time_ms,
                empty=not args.chars,
                max_background_terminal_timeout_ms=self._max_poll_ms,
            )
            await collect_until(process, time.monotonic() + yield_ms / 1000, self.pause)
        finally:
            entry.in_use -= 1
        return await self._respond(entry.id, process, started, args.max_output_tokens)

    async def _send(self, process: UnifiedExecProcess, chars: str) -> None:
        if not process.tty:
            # Without a terminal there is no stdin to write to; Ctrl-C still
            # means "interrupt".
            if chars != INTERRUPT:
                raise stdin_closed()
            await process.interrupt()
            return
        await process.write(chars.encode())
        await asyncio.sleep(WRITE_PAUSE)

    # -- clean ---------------------------------------------------------------

    async def clean(self) -> None:
        """Terminate every stored process (the user's "clean background
        terminals", and session shutdown)."""
        entries = self.store.clear()
        for entry in entries:
            with contextlib.suppress(Exception):
                await self._discard(entry)

    shutdown = clean
