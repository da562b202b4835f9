"""environmentConfig/read, capabilities/discoverV2 and capabilityRoots/discoverV1."""

from __future__ import annotations

import functools
from typing import Annotated, Any

import msgspec

from execserver.discovery.config import check_paths, read_config
from execserver.discovery.fs_program import SCAN_ROOT
from execserver.fs.dispatch import in_thread, run_fs_op, sandboxed_fs, who_asks
from execserver.fs.paths import native_path, validate_path_uri
from execserver.kernel.context import RequestContext
from execserver.kernel.methods import MethodTable
from execserver.tenancy.fsident import as_account
from execserver.tenancy.seat import tenant_of
from execserver.wire import methods as m
from execserver.wire.contract import EncodesAs
from execserver.wire.discovery import (
    CapabilitiesDiscoverV2Params,
    CapabilitiesDiscoverV2Response,
    CapabilityRootsDiscoverV1Params,
    CapabilityRootsDiscoverV1Response,
    EnvironmentConfigReadParams,
    EnvironmentConfigReadResponse,
)
from execserver.wire.errors import RpcError
from execserver.wire.json_value import decode_json_value
from execserver.wire.rust import serde
from execserver.wire.sandbox import decode_sandbox_context, decode_sandbox_param

__all__ = ["register"]


def _validate_config(params: EnvironmentConfigReadParams) -> EnvironmentConfigReadParams:
    validate_path_uri(params.cwd)
    return params


def _decode_v2_sandbox(raw: msgspec.Raw) -> None:
    """discoverV2 takes its own sandbox type (no policyContext) whose ``cwd`` is a
    required string, reported after ``permissions`` and before ``windowsSandboxLevel``."""
    value = decode_json_value(bytes(raw)) if len(raw) else None
    if isinstance(value, dict) and "permissions" in value:
        if "cwd" not in value:
            raise RpcError.invalid_params(serde.missing_field("cwd"))
        if value["cwd"] is None:
            raise RpcError.invalid_params(
                serde.invalid_type(None, "a string", arbitrary_precision=True)
            )
    if value is not None:  # absent or null: no sandbox (decode_sandbox_param's rule)
        decode_sandbox_context(value)


def _validate_v2(params: CapabilitiesDiscoverV2Params) -> CapabilitiesDiscoverV2Params:
    validate_path_uri(params.cwd)
    _decode_v2_sandbox(params.sandbox)
    return params


def _validate_v1(params: CapabilityRootsDiscoverV1Params) -> CapabilityRootsDiscoverV1Params:
    for root in params.roots:
        validate_path_uri(root.path)
        decode_sandbox_param(root.sandbox)
    return params


async def environment_config_read(
    ctx: RequestContext, params: EnvironmentConfigReadParams
) -> Annotated[dict[str, Any], EncodesAs(EnvironmentConfigReadResponse)]:
    check_paths(params.config_paths, params.requirements_paths)
    native_path(params.cwd)
    tenant = tenant_of(ctx)
    if tenant is not None:
        # The tenant's own config, read with its identity (never the daemon's layers).
        reading = functools.partial(
            as_account,
            tenant.credentials,
            read_config,
            params.config_paths,
            params.requirements_paths,
            tenant.credentials.home,
        )
        tenant_result: dict[str, Any] = await in_thread(reading)
        return tenant_result
    result: dict[str, Any] = await in_thread(
        read_config, params.config_paths, params.requirements_paths
    )
    return result


async def discover_v2(
    ctx: RequestContext, params: CapabilitiesDiscoverV2Params
) -> CapabilitiesDiscoverV2Response:
    # 0.169.0 answered empty lists in every probe (plain dirs, repos with
    # .agents/.codex skills); its discovery rules are not known.
    native_path(params.cwd)
    return CapabilitiesDiscoverV2Response(plugins=[], skills=[], warnings=[])


async def discover_roots_v1(
    ctx: RequestContext, params: CapabilityRootsDiscoverV1Params
) -> Annotated[dict[str, Any], EncodesAs(CapabilityRootsDiscoverV1Response)]:
    roots = []
    # A tenant's scan: within its roots, with its identity (fs/dispatch.py run_as_tenant).
    who = who_asks(ctx)
    for root in params.roots:
        path = native_path(root.path)
        sandbox = decode_sandbox_param(root.sandbox)
        found = await run_fs_op(
            sandbox, SCAN_ROOT, {"path": path}, write=False, fs=lambda: sandboxed_fs(ctx), **who
        )
        roots.append(
            {
                "id": root.id,
                "path": root.path,
                "plugin": None,
                "skills": found["skills"],
                "namespaceManifests": [],
                "warnings": [],
                "error": found["error"],
            }
        )
    return {"roots": roots}


def register(table: MethodTable) -> None:
    table.add(
        m.ENVIRONMENT_CONFIG_READ,
        environment_config_read,
        family="environment config",
        prepare=_validate_config,
    )
    table.add(
        m.CAPABILITIES_DISCOVER_V2,
        discover_v2,
        family="capability discovery",
        prepare=_validate_v2,
    )
    table.add(
        m.CAPABILITY_ROOTS_DISCOVER_V1,
        discover_roots_v1,
        family="capability discovery",
        prepare=_validate_v1,
    )
    table.capabilities.update(
        {"environment_config_read", "capability_discovery_v2", "capability_discovery_sandbox"}
    )
