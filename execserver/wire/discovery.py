"""Capability discovery and executor config reading."""

from __future__ import annotations

from typing import Any

import msgspec

from execserver.wire.base import WireStruct, absent_raw

__all__ = [
    "CapabilitiesDiscoverV2Params",
    "CapabilitiesDiscoverV2Response",
    "CapabilityRootsDiscoverV1Params",
    "CapabilityRootsDiscoverV1Response",
    "EnvironmentConfigReadParams",
    "EnvironmentConfigReadResponse",
]


class CapabilitiesDiscoverV2Params(WireStruct):
    cwd: str
    sandbox: msgspec.Raw = msgspec.field(default_factory=absent_raw)


class CapabilitiesDiscoverV2Response(WireStruct):
    plugins: list[dict[str, Any]]
    skills: list[dict[str, Any]]
    warnings: list[Any]


class CapabilityRoot(WireStruct):
    id: str
    path: str
    sandbox: msgspec.Raw = msgspec.field(default_factory=absent_raw)


class CapabilityRootsDiscoverV1Params(WireStruct):
    roots: list[CapabilityRoot]


class SkillInstructions(WireStruct):
    path: str
    contents: str


class DiscoveredSkill(WireStruct):
    instructions: SkillInstructions
    metadata: dict[str, Any] | None


class DiscoveredRoot(WireStruct):
    id: str
    path: str
    plugin: dict[str, Any] | None
    skills: list[DiscoveredSkill]
    namespace_manifests: list[Any]
    warnings: list[Any]
    error: str | None


class CapabilityRootsDiscoverV1Response(WireStruct):
    roots: list[DiscoveredRoot]


class EnvironmentConfigReadParams(WireStruct):
    cwd: str
    config_paths: list[list[str]]
    requirements_paths: list[list[str]]


class ConfigLayer(WireStruct):
    source: str
    base_dir: str
    toml: str


class ConfigLayers(WireStruct):
    layers: list[ConfigLayer]
    cloud_insertion_index: int


class EnvironmentConfigReadResponse(WireStruct):
    user_home_dir: str
    codex_home_dir: str
    hostname: str
    config: ConfigLayers
    requirements: ConfigLayers
