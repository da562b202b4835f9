"""environmentConfig/read, capabilities/discoverV2 and capabilityRoots/discoverV1."""

from __future__ import annotations

from typing import Any

import msgspec

from execserver.discovery.config import check_paths, read_config
from execserver.discovery.skills import scan_root
from execserver.fs.dispatch import in_thread, run_fs_op, sandbox_host
from execserver.fs.paths import native_path, validate_path_uri
from execserver.kernel.context import RequestContext
from execserver.kernel.methods import MethodTable
from execserver.wire import methods as m
from execserver.wire.discovery import (
    CapabilitiesDiscoverV2Params,
    CapabilitiesDiscoverV2Response,
    CapabilityRootsDiscoverV1Params,
    EnvironmentConfigReadParams,
)
from execserver.wire.errors import RpcError
from execserver.wire.sandbox import decode_sandbox_param

__all__ = ["register"]


def _validate_config(params: EnvironmentConfigReadParams) -> None:
    validate_path_uri(params.cwd)


def _decode_v2_sandbox(raw: msgspec.Raw) -> None:
    """discoverV2 takes its own sandbox type (no policyContext) whose ``cwd`` is a
    required string, reported after ``permissions`` and before ``windowsSandboxLevel``."""
    value = msgspec.json.decode(bytes(raw)) if len(raw) else None
    if isinstance(value, dict) and "permissions" in value:
        if "cwd" not in value:
            raise RpcError.invalid_params("missing field `cwd`")
        if value["cwd"] is None:
            raise RpcError.invalid_params("invalid type: null, expected a string")
    decode_sandbox_param(raw)


def _validate_v2(params: CapabilitiesDiscoverV2Params) -> None:
    validate_path_uri(params.cwd)
    _decode_v2_sandbox(params.sandbox)


def _validate_v1(params: CapabilityRootsDiscoverV1Params) -> None:
    for root in params.roots:
        validate_path_uri(root.path)
        decode_sandbox_param(root.sandbox)


async def environment_config_read(
    ctx: RequestContext, params: EnvironmentConfigReadParams
) -> dict[str, Any]:
    check_paths(params.config_paths, params.requirements_paths)
    native_path(params.cwd)
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
) -> dict[str, Any]:
    roots = []
    for root in params.roots:
        path = native_path(root.path)
        sandbox = decode_sandbox_param(root.sandbox)
        found = await run_fs_op(
            sandbox, scan_root, {"path": path}, write=False, host=sandbox_host(ctx)
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
        EnvironmentConfigReadParams,
        environment_config_read,
        family="environment config",
        validate=_validate_config,
    )
    table.add(
        m.CAPABILITIES_DISCOVER_V2,
        CapabilitiesDiscoverV2Params,
        discover_v2,
        family="capability discovery",
        validate=_validate_v2,
    )
    table.add(
        m.CAPABILITY_ROOTS_DISCOVER_V1,
        CapabilityRootsDiscoverV1Params,
        discover_roots_v1,
        family="capability discovery",
        validate=_validate_v1,
    )
    table.capabilities.update(
        {"environment_config_read", "capability_discovery_v2", "capability_discovery_sandbox"}
    )
