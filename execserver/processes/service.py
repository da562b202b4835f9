"""The process/* methods: validation, lookup, and the handlers.

Checks happen where the reference makes them: URI, metadata and sandbox shape
while decoding (before lifecycle errors, via ``validate``), argv / snapshot /
writeId checks in the handler (after them).
"""

from __future__ import annotations

import os
from typing import Any

from execserver.netproxy.launch import prepare_network
from execserver.netproxy.sandbox import ProxyRoutes
from execserver.processes.envpolicy import build_environment
from execserver.processes.launch import LaunchPlan, plan_launch
from execserver.processes.log import DEFAULT_RETAINED_BYTES
from execserver.processes.managed import DenialClassifier, ManagedProcess
from execserver.processes.supervisor import Supervisor
from execserver.processes.table import ProcessTable
from execserver.processes.uuidcheck import check_uuid
from execserver.sandbox import is_sandbox_denied, plan_process_launch
from execserver.sandbox.plan import off_loop
from execserver.server import audit
from execserver.server.rpc import MethodTable, RequestContext
from execserver.wire import methods as m
from execserver.wire.base import Empty
from execserver.wire.base64 import Base64Error, decode_base64
from execserver.wire.errors import RpcError
from execserver.wire.process import (
    ExecParams,
    ExecResponse,
    ProcessOutputChunk,
    ReadParams,
    ReadResponse,
    SignalParams,
    TerminateParams,
    TerminateResponse,
    WriteParams,
    WriteResponse,
)
from execserver.wire.sandbox import FileSystemSandboxContext, decode_sandbox_param
from execserver.wire.uri import uri_to_path

__all__ = ["register"]

# A daemonised grandchild holding the pipes must not delay process/closed forever.
DEFAULT_DRAIN_TIMEOUT_S = 5.0
MAX_SNAPSHOT_SCOPE_BYTES = 256


def _config_value(ctx: RequestContext, name: str, default: Any) -> Any:
    config = ctx.runtime.config
    if hasattr(config, name):
        return getattr(config, name)
    return config.extra.get(name, default)


def _table(ctx: RequestContext) -> ProcessTable:
    session = ctx.session
    supervisor = ctx.runtime.state.get(Supervisor, Supervisor)
    return session.state.get(
        ProcessTable,
        lambda: ProcessTable(
            session,
            supervisor,
            retention_s=float(_config_value(ctx, "exited_process_retention_s", 80.0)),
            retained_bytes=int(
                _config_value(ctx, "process_retained_bytes", DEFAULT_RETAINED_BYTES)
            ),
            drain_timeout_s=float(
                _config_value(ctx, "process_drain_timeout_s", DEFAULT_DRAIN_TIMEOUT_S)
            ),
            limits=getattr(ctx.runtime.config, "limits", None),
            metrics=getattr(ctx.runtime, "metrics", None),
            containment=getattr(ctx.runtime, "containment", None),
        ),
    )


def _existing_table(ctx: RequestContext) -> ProcessTable | None:
    return ctx.session.state.peek(ProcessTable)


def _lookup(ctx: RequestContext, process_id: str) -> ManagedProcess | None:
    table = _existing_table(ctx)
    return table.get(process_id) if table is not None else None


# ---- process/start ---------------------------------------------------------------------


def validate_start(params: ExecParams) -> None:
    uri_to_path(params.cwd)  # raises the reference's -32602 URI errors
    if params.metadata is not None and params.metadata.thread_id is not None:
        check_uuid(params.metadata.thread_id)
    decode_sandbox_param(params.sandbox)


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


def _sandbox_plan(
    sandbox: FileSystemSandboxContext,
    params: ExecParams,
    cwd: str,
    proxy_routes: ProxyRoutes | None = None,
) -> LaunchPlan:
    """Wrap the command with the sandbox planner. Every failure is an RpcError raised
    before anything is spawned: a sandboxed request never runs unsandboxed."""
    planned = plan_process_launch(
        sandbox,
        argv=list(params.argv),
        cwd=cwd,
        env=build_environment(params.env, params.env_policy, os.environ),
        tty=params.tty,
        arg0=params.arg0,
        enforce_managed_network=params.enforce_managed_network,
        proxy_routes=proxy_routes,
    )
    return LaunchPlan(
        program=planned.argv[0],
        argv=list(planned.argv),
        env=dict(planned.env),
        cwd=cwd,
        tty=params.tty,
        pipe_stdin=params.pipe_stdin,
        pass_fds=tuple(planned.pass_fds),
        sandbox_type="linuxSeccomp",
        release=planned.close,
    )


async def process_start(ctx: RequestContext, params: ExecParams) -> ExecResponse:
    _check_start(params)
    table = _table(ctx)
    table.check_available(params.process_id)
    cwd = str(uri_to_path(params.cwd))
    sandbox = decode_sandbox_param(params.sandbox)
    classify: DenialClassifier | None = None
    # Managed network: the process's proxy (its variables injected into env) and,
    # for enforceManagedNetwork, the routes of the sandbox's bridge to a proxy.
    net = await prepare_network(
        ctx.session, params, sandboxed=sandbox is not None, daemon_env=os.environ
    )
    params = net.params
    try:
        if sandbox is None:
            plan = plan_launch(params, cwd, os.environ)
        else:
            routes = net.routes
            plan = await off_loop(
                lambda: _sandbox_plan(sandbox, params, cwd, routes), lambda p: p.release()
            )
            classify = is_sandbox_denied
        proc = table.start(params.process_id, plan, classify)
    except BaseException:
        await net.aclose()
        raise
    net.close_with(proc)
    # Audit log (argv0 + argv hash, never env), exit audited at close.
    audit.process_started(
        ctx.runtime,
        ctx.session.id,
        proc.process_id,
        params.argv,
        cwd=cwd,
        tty=params.tty,
        sandbox=sandbox,
    )
    proc.close_hooks.append(audit.process_close_hook(ctx.runtime, ctx.session.id))
    return ExecResponse(params.process_id, plan.sandbox_type)


# ---- process/read ----------------------------------------------------------------------


async def process_read(ctx: RequestContext, params: ReadParams) -> ReadResponse:
    proc = _lookup(ctx, params.process_id)
    if proc is None:
        raise RpcError.invalid_request(f"unknown process id {params.process_id}")
    after = params.after_seq or 0
    wait_ms = params.wait_ms or 0
    if wait_ms > 0 and not proc.exited and not proc.log.has_after(after):
        # Give the connection's request slot back while we wait (unlike the reference).
        async with ctx.waiting():
            await proc.wait_newer(after, wait_ms / 1000)
    chunks, next_seq = proc.log.read(after, params.max_bytes)
    return ReadResponse(
        chunks=[ProcessOutputChunk(c.seq, c.stream, c.data) for c in chunks],  # type: ignore[arg-type]
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
    proc = _lookup(ctx, params.process_id)
    if proc is None:
        return WriteResponse("unknownProcess")
    return WriteResponse(proc.write(params.write_id, data))


async def process_signal(ctx: RequestContext, params: SignalParams) -> Empty:
    proc = _lookup(ctx, params.process_id)
    if proc is not None:
        proc.interrupt()
    return Empty()


async def process_terminate(ctx: RequestContext, params: TerminateParams) -> TerminateResponse:
    proc = _lookup(ctx, params.process_id)
    return TerminateResponse(proc.terminate() if proc is not None else False)


def register(table: MethodTable) -> None:
    table.add(m.PROCESS_START, ExecParams, process_start, family="exec", validate=validate_start)
    table.add(m.PROCESS_READ, ReadParams, process_read, family="exec")
    table.add(m.PROCESS_WRITE, WriteParams, process_write, family="exec")
    table.add(m.PROCESS_SIGNAL, SignalParams, process_signal, family="exec")
    table.add(m.PROCESS_TERMINATE, TerminateParams, process_terminate, family="exec")
    # shellSnapshot is accepted and validated; the protocol lets an executor treat it
    # as a pure caching hint (outputs are identical with and without it).
    table.capabilities.add("shell_snapshot_v2")
