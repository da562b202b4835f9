"""initialize, environment/info and environment/status: the server's own methods.

Unlike a service, these bind the connection to a session and read the method
table's capabilities, so they work on the server's concrete Connection.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import sys
import tempfile

from execserver import REFERENCE_VERSION, __version__
from execserver.kernel.context import RequestContext
from execserver.kernel.limits import PolicyRefusal
from execserver.kernel.methods import MethodTable
from execserver.server.connection import Connection
from execserver.server.sessions import SessionRegistry
from execserver.tenancy.directory import TenantDirectory, TenantGone
from execserver.tenancy.profile import TenantProfile
from execserver.tenancy.seat import tenant_of
from execserver.wire import methods as m
from execserver.wire.base import Empty
from execserver.wire.errors import (
    DRAINING_MESSAGE,
    EXECUTOR_DRAINING,
    PARSE_OR_INVALID_REQUEST,
    RpcError,
)
from execserver.wire.lifecycle import (
    EnvironmentCapabilities,
    EnvironmentInfo,
    EnvironmentStatusResponse,
    InitializeParams,
    InitializeResponse,
    ShellInfo,
)
from execserver.wire.uri import path_to_uri

__all__ = ["register"]

# Clients gate features on executorVersion; we speak the 0.169.0 protocol.
EXECUTOR_VERSION = REFERENCE_VERSION
__all__ = ["EXECUTOR_VERSION", "PROVIDER_ID", "build_environment_info", "detect_shell", "register"]

PROVIDER_ID = "sha256:" + hashlib.sha256(f"execserver {__version__}".encode()).hexdigest()


def detect_shell() -> ShellInfo:
    """The server user's default shell, as the reference reports it."""
    path = os.environ.get("SHELL") or ""
    if not path:
        try:
            path = pwd.getpwuid(os.getuid()).pw_shell
        except KeyError:
            path = ""
    if not path or not os.path.exists(path):
        path = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    return ShellInfo(name=os.path.basename(path), path=path)


def _home_dir() -> str | None:
    home = os.environ.get("HOME")
    if not home:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            return None
    return os.path.abspath(home)


def _platform_os() -> str:
    return {"darwin": "macos", "win32": "windows"}.get(sys.platform, "linux")


def tenant_shell(profile: TenantProfile) -> ShellInfo:
    """The login shell of the tenant's account (what its terminals get), never the
    daemon's: the account database's, else /bin/sh."""
    try:
        path = pwd.getpwuid(profile.credentials.uid).pw_shell
    except KeyError:
        path = ""
    if not path or not os.path.exists(path):
        path = "/bin/sh"
    return ShellInfo(name=os.path.basename(path), path=path)


def build_environment_info(
    capabilities: set[str], tenant: TenantProfile | None = None
) -> EnvironmentInfo:
    """The executor as the client sees it. For a tenant (--tenants): its account's
    shell and home, and its forced TMPDIR when the profile sets one, as its
    processes get them; the daemon's own are none of its business."""
    flags = EnvironmentCapabilities(**{name: True for name in sorted(capabilities)})
    if tenant is None:
        home = _home_dir()
        shell = detect_shell()
        temp = tempfile.gettempdir()
    else:
        home = os.path.abspath(tenant.credentials.home)
        shell = tenant_shell(tenant)
        temp = tenant.env.get("TMPDIR") or tempfile.gettempdir()
    return EnvironmentInfo(
        shell=shell,
        executor_version=EXECUTOR_VERSION,
        provider_id=PROVIDER_ID,
        cwd=path_to_uri(os.getcwd()),
        user_home_dir=path_to_uri(home) if home else None,
        platform_os=_platform_os(),
        prepend_path_dirs=[],
        temporary_directories=[],
        temp_dir=path_to_uri(temp),
        capabilities=flags,
    )


def _connection(ctx: RequestContext) -> Connection:
    peer = ctx.peer
    if not isinstance(peer, Connection):  # the server dispatches only on its own connections
        raise TypeError(f"lifecycle methods need a server Connection, not {type(peer).__name__}")
    return peer


async def initialize(ctx: RequestContext, params: InitializeParams) -> InitializeResponse:
    conn = _connection(ctx)
    if conn.session is not None:
        raise RpcError.invalid_request("initialize may only be sent once per connection")
    runtime = conn.runtime
    sessions = runtime.sessions
    principal = conn.principal
    tenant: TenantProfile | None = None
    if principal is not None:
        tenant = _check_tenant(runtime.resources.get(TenantDirectory), principal, params, sessions)
    if params.resume_session_id is not None:
        session = sessions.resume(params.resume_session_id, conn, principal)
    elif runtime.draining:
        raise RpcError(EXECUTOR_DRAINING, DRAINING_MESSAGE)
    else:
        session = sessions.create(conn, principal)
    conn.bind_session(session)
    for hook in list(session.on_attach):
        await hook(session)
    info = build_environment_info(runtime.methods.capabilities, tenant)
    return InitializeResponse(session_id=session.id, environment_info=info)


def _check_tenant(
    directory: TenantDirectory | None,
    principal: str,
    params: InitializeParams,
    sessions: SessionRegistry,
) -> TenantProfile:
    """A tenant removed since its upgrade gets no session; a new one counts against
    its max_sessions. Returns its profile."""
    if directory is None:  # a principal without a directory: never served (fail closed)
        raise RpcError.internal("no tenants table")
    try:
        profile = directory.profile(principal)
    except TenantGone:
        raise RpcError.invalid_request(f"tenant {principal} no longer exists") from None
    if params.resume_session_id is None and profile.max_sessions is not None:
        if sessions.count(principal) >= profile.max_sessions:
            raise PolicyRefusal(
                PARSE_OR_INVALID_REQUEST, principal, f"max_sessions {profile.max_sessions} reached"
            )
    return profile


async def environment_info(ctx: RequestContext, params: Empty) -> EnvironmentInfo:
    return build_environment_info(_connection(ctx).runtime.methods.capabilities, tenant_of(ctx))


async def environment_status(ctx: RequestContext, params: Empty) -> EnvironmentStatusResponse:
    return EnvironmentStatusResponse(status="ready")


def register(table: MethodTable) -> None:
    table.add(m.INITIALIZE, initialize, family="initialize")
    table.add(m.ENVIRONMENT_INFO, environment_info, family="environment info")
    table.add(m.ENVIRONMENT_STATUS, environment_status, family="environment status")
