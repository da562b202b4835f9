"""The process/* methods: validation, lookup, and the handlers.

Checks happen where the reference makes them: URI, metadata and sandbox shape
while decoding (before lifecycle errors, via ``validate``), argv / snapshot /
writeId checks in the handler (after them).
"""

from __future__ import annotations

import os
from typing import Annotated

import msgspec

from execserver.containment import ProcessCgroups
from execserver.kernel.context import RequestContext
from execserver.kernel.methods import MUST_WAIT, MethodTable, MustWait
from execserver.netproxy.launch import NetworkHost, prepare_network
from execserver.processes.envpolicy import build_environment
from execserver.processes.launch import plan_unsandboxed
from execserver.processes.managed import DenialClassifier, ManagedProcess
from execserver.processes.supervisor import Supervisor, server_supervisor
from execserver.processes.table import ProcessTable
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.denial import is_sandbox_denied
from execserver.sandbox.plan import LaunchPlan, LaunchRequest, off_loop
from execserver.sandbox.planner import plan_sandboxed
from execserver.tenancy.directory import TenantDirectory
from execserver.tenancy.launch import admit_launch, check_process_quota, tenant_environment
from execserver.tenancy.seat import tenant_of
from execserver.wire import methods as m
from execserver.wire.base import Empty, WireStruct
from execserver.wire.base64_json import chunk_json
from execserver.wire.contract import EncodesAs
from execserver.wire.errors import RpcError
from execserver.wire.process import (
    ExecParams,
    ExecResponse,
    ReadParams,
    ReadResponse,
    SignalParams,
    TerminateParams,
    TerminateResponse,
    WriteParams,
    WriteResponse,
)
from execserver.wire.rust.base64 import Base64Error, decode_base64
from execserver.wire.rust.uuid import check_uuid
from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_param
from execserver.wire.uri import uri_to_path

__all__ = ["StartRequest", "register"]

MAX_SNAPSHOT_SCOPE_BYTES = 256


def _table(ctx: RequestContext) -> ProcessTable:
    session = ctx.session
    config = ctx.server.config
    supervisor = ctx.server.state.get(
        Supervisor, lambda: server_supervisor(ctx.server.resources, ctx.server.config.child_nice)
    )
    return session.state.get(
        ProcessTable,
        lambda: ProcessTable(
            session,
            supervisor,
            retention_s=config.exited_process_retention_s,
            retained_bytes=config.process_retained_bytes,
            drain_timeout_s=config.process_drain_timeout_s,
            limits=config.limits,
            telemetry=ctx.server.telemetry,
            # Opened by the runner at start-up; absent without --process-*-max limits.
            containment=ctx.server.resources.get(ProcessCgroups),
        ),
    )


def _backend(ctx: RequestContext) -> SandboxBackend:
    """The backend probed at start-up; a server that never probed refuses (fail closed)."""
    backend = ctx.server.resources.get(SandboxBackend)
    if backend is None:
        raise RpcError.internal("the sandbox backend was not probed at start-up")
    return backend


def _existing_table(ctx: RequestContext) -> ProcessTable | None:
    return ctx.session.state.peek(ProcessTable)


def _lookup(ctx: RequestContext, process_id: str) -> ManagedProcess | None:
    # _existing_table inlined: this runs on every process/read poll.
    table = ctx.session.state.peek(ProcessTable)
    return table.get(process_id) if table is not None else None


async def _settled(ctx: RequestContext, process_id: str) -> ManagedProcess | None:
    """The process, once what is known of it has arrived (a re-adopted process's
    replay: whether it still runs decides what a write or terminate does). The
    request keeps its slot meanwhile: what comes after it on the connection waits,
    so writes stay in order."""
    proc = _lookup(ctx, process_id)
    if proc is not None and proc.replaying:
        await proc.wait_replayed()
    return proc


# ---- process/start ---------------------------------------------------------------------


class StartRequest(msgspec.Struct, frozen=True, gc=False):
    """process/start params with the parts the reference checks while decoding
    (cwd URI, thread id, sandbox shape) already decoded, so nothing is decoded twice."""

    params: ExecParams
    cwd: str
    sandbox: FileSystemSandboxContext | None


def validate_start(params: ExecParams) -> StartRequest:
    cwd = str(uri_to_path(params.cwd))  # raises the reference's -32602 URI errors
    if params.metadata is not None and params.metadata.thread_id is not None:
        check_uuid(params.metadata.thread_id)
    return StartRequest(params, cwd, decode_sandbox_param(params.sandbox))


def _check_start(params: ExecParams) -> None:
    if not params.argv:
        raise RpcError.invalid_params("argv must not be empty")
    snapshot = params.shell_snapshot
    if snapshot is not None and not (
        0 < len(snapshot.scope_id.encode()) <= MAX_SNAPSHOT_SCOPE_BYTES
    ):
        raise RpcError.invalid_params(
            "shell snapshot scope must be non-empty and at most 256 bytes"
        )
    proxy = params.network_proxy
    if proxy is not None:
        if not proxy.proxy.enabled:
            raise RpcError.invalid_params(
                "invalid network proxy config: executor-local network proxy launch "
                "requires an enabled proxy"
            )


async def process_start(ctx: RequestContext, start: StartRequest) -> ExecResponse:
    params, cwd, sandbox = start.params, start.cwd, start.sandbox
    _check_start(params)
    table = _table(ctx)
    table.check_available(params.process_id)
    classify: DenialClassifier | None = None
    config = ctx.server.config
    # With --tenants: the ceiling, the cwd and the quota, before anything is built.
    tenant = tenant_of(ctx)
    directory = ctx.server.resources.get(TenantDirectory) if tenant is not None else None
    if tenant is not None:
        assert directory is not None
        check_process_quota(directory, tenant)
        limit = config.sandbox.glob_scan_limit
        managed = params.enforce_managed_network
        if sandbox is None:
            # One access check as the account: on the loop it costs less than the
            # hop to a worker thread, which only a policy's resolution (a walk of
            # the file system) needs.
            admit_launch(tenant, None, cwd, managed_network=managed, glob_scan_limit=limit)
        else:
            await off_loop(
                lambda: admit_launch(
                    tenant, sandbox, cwd, managed_network=managed, glob_scan_limit=limit
                ),
                _nothing,
            )
    # The daemon's own environment is what envPolicy inherits from.
    env = build_environment(params.env, params.env_policy, os.environ)
    if tenant is not None:
        env = tenant_environment(tenant, env)
    # The process's proxy (its variables injected into env) and, for
    # enforceManagedNetwork, the routes of the sandbox's bridge to a proxy.
    network = NetworkHost.of(config)
    net = await prepare_network(
        ctx.session, params, env, sandboxed=sandbox is not None, host=network
    )
    request = LaunchRequest(
        argv=list(params.argv),
        cwd=cwd,
        env=net.env,
        tty=params.tty,
        pipe_stdin=params.pipe_stdin,
        arg0=params.arg0,
        enforce_managed_network=params.enforce_managed_network,
        # A tenant's processes run as its account (None: the daemon's own uid).
        credentials=tenant.credentials if tenant is not None else None,
    )
    telemetry = ctx.server.telemetry
    session_id = ctx.session.id
    adopted = False

    def adopt(proc: ManagedProcess) -> None:
        """What the process's start brings along, registered with the process itself
        (the table calls it then, before the loop runs again): a short command can
        exit before this request resumes."""
        nonlocal adopted
        adopted = True
        net.close_with(proc)
        # Audit log (argv0 + argv hash, never env), exit audited at close.
        telemetry.process_started(
            session_id, proc.process_id, params.argv, cwd=cwd, tty=params.tty, sandbox=sandbox
        )
        proc.close_hooks.append(lambda closed: telemetry.process_closed(session_id, closed))
        if tenant is not None and directory is not None:
            directory.count_process(tenant.name, proc.close_hooks)

    try:
        plan: LaunchPlan
        if sandbox is None:
            plan = plan_unsandboxed(request)
        else:
            # Every failure is an RpcError raised before anything is spawned: a
            # sandboxed request never runs unsandboxed.
            backend, routes = _backend(ctx), net.routes
            limit = config.sandbox.glob_scan_limit
            contained = ctx.server.resources.get(ProcessCgroups) is not None
            plan = await off_loop(
                lambda: plan_sandboxed(
                    sandbox,
                    request,
                    backend=backend,
                    proxy_routes=routes,
                    glob_scan_limit=limit,
                    contained=contained,
                ),
                lambda p: p.close(),
            )
            classify = is_sandbox_denied
        await table.start(
            params.process_id,
            plan,
            classify,
            program=params.argv[0],
            keep=net.outlives_daemon,
            network=net.hand_over() if net.outlives_daemon else None,
            on_started=adopt,
        )
    except BaseException:
        if not adopted:
            await net.aclose()
        raise
    return ExecResponse(params.process_id, plan.sandbox_type)


def _nothing(result: None) -> None:
    """Nothing to release for an admission check (``off_loop``'s cancel hook)."""


# ---- process/read ----------------------------------------------------------------------


def process_read_at_once(ctx: RequestContext, params: ReadParams) -> ReadResult | MustWait:
    """process/read when it need not wait: output already buffered, the process exited,
    or no ``waitMs``; else MUST_WAIT (process_read then waits)."""
    proc = _read_target(ctx, params)
    after = params.after_seq or 0
    if proc.replaying or _must_wait(proc, after, params):
        return MUST_WAIT
    return _read_response(proc, after, params.max_bytes)


async def process_read(ctx: RequestContext, params: ReadParams) -> ReadResult:
    proc = _read_target(ctx, params)
    after = params.after_seq or 0
    if proc.replaying:
        async with ctx.waiting():
            await proc.wait_replayed()
    if _must_wait(proc, after, params):
        # Give the connection's request slot back while we wait (unlike the reference).
        async with ctx.waiting():
            await proc.wait_newer(after, (params.wait_ms or 0) / 1000)
    return _read_response(proc, after, params.max_bytes)


def _read_target(ctx: RequestContext, params: ReadParams) -> ManagedProcess:
    proc = _lookup(ctx, params.process_id)
    if proc is None:
        raise RpcError.invalid_request(f"unknown process id {params.process_id}")
    # The client has what it reads after: a kept process's log may let it go (before
    # any wait: what the client waits for may be held back behind it).
    proc.read_through(params.after_seq or 0)
    return proc


def _must_wait(proc: ManagedProcess, after: int, params: ReadParams) -> bool:
    wait_ms = params.wait_ms or 0
    return wait_ms > 0 and not proc.exited and not proc.log.has_after(after)


class _EncodedChunk(WireStruct):
    """ProcessOutputChunk as written: ``chunk`` is the bytes or, when long, already their
    base64 JSON string (wire/base64_json.py, faster there); same bytes on the wire."""

    seq: int
    stream: str
    chunk: bytes | msgspec.Raw


class _ReadResult(WireStruct):
    """ReadResponse as written, with _EncodedChunk chunks (same members, same order)."""

    chunks: list[_EncodedChunk]
    next_seq: int
    exited: bool
    exit_code: int | None
    closed: bool
    failure: str | None
    sandbox_denied: bool


ReadResult = Annotated[_ReadResult, EncodesAs(ReadResponse)]


def _read_response(proc: ManagedProcess, after: int, max_bytes: int | None) -> ReadResult:
    chunks, next_seq = proc.log.read(after, max_bytes)
    proc.read_through(chunks[-1].seq if chunks else after)
    return _ReadResult(
        chunks=[_EncodedChunk(c.seq, c.stream, chunk_json(c.data)) for c in chunks],
        next_seq=next_seq,
        exited=proc.exited,
        exit_code=proc.exit_code,
        closed=proc.closed,
        failure=proc.failure,
        sandbox_denied=proc.sandbox_denied,
    )


# ---- process/write, signal, terminate ----------------------------------------------------


async def process_write(ctx: RequestContext, params: WriteParams) -> WriteResponse:
    if not params.write_id:
        raise RpcError.invalid_params("writeId must not be empty")
    try:
        data = decode_base64(params.chunk)
    except Base64Error as exc:
        raise RpcError.invalid_params(str(exc)) from None
    proc = await _settled(ctx, params.process_id)
    if proc is None:
        return WriteResponse("unknownProcess")
    return WriteResponse(proc.write(params.write_id, data))


async def process_signal(ctx: RequestContext, params: SignalParams) -> Empty:
    proc = await _settled(ctx, params.process_id)
    if proc is not None:
        proc.interrupt()
    return Empty()


async def process_terminate(ctx: RequestContext, params: TerminateParams) -> TerminateResponse:
    proc = await _settled(ctx, params.process_id)
    return TerminateResponse(proc.terminate() if proc is not None else False)


def register(table: MethodTable) -> None:
    table.add(m.PROCESS_START, process_start, family="exec", prepare=validate_start)
    table.add(m.PROCESS_READ, process_read, family="exec", at_once=process_read_at_once)
    table.add(m.PROCESS_WRITE, process_write, family="exec")
    table.add(m.PROCESS_SIGNAL, process_signal, family="exec")
    table.add(m.PROCESS_TERMINATE, process_terminate, family="exec")
    # shellSnapshot is accepted and validated; the protocol lets an executor treat it
    # as a pure caching hint (outputs are identical with and without it).
    table.capabilities.add("shell_snapshot_v2")
