"""Reading the tenants file (``--tenants PATH``, TOML) into a ``TenantTable``.

Every problem is one line naming the file, the tenant and the key, so that
start-up prints ``Error: <it>`` and a SIGHUP reload logs it and keeps the old
table. Unknown keys are errors too: a misspelt ``writeable_roots`` must not leave
a tenant with a ceiling nobody wrote.
"""

from __future__ import annotations

import os
import string
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from execserver.config import ProcessLimitsConfig
from execserver.containment.sizes import parse_size
from execserver.sandbox.plan import Credentials
from execserver.tenancy.accounts import AccountError, lookup_account
from execserver.tenancy.profile import NETWORK_LEVELS, NetworkCeiling, SandboxRule, TenantProfile
from execserver.tenancy.secrets import SecretModeError, check_private

__all__ = ["TenantTable", "TenantsFileError", "load_tenants"]

_KEYS: Final = frozenset(
    {
        "token_sha256",
        "jwt_sub",
        "user",
        "sandbox",
        "writable_roots",
        "readable_roots",
        "network",
        "network_allow",
        "http_request",
        "max_processes",
        "max_sessions",
        "max_connections",
        "max_http_requests",
        "memory_max",
        "pids_max",
        "cpu_max",
        "env",
    }
)
_NAME_CHARS: Final = frozenset(string.ascii_letters + string.digits + "-_.")


class TenantsFileError(ValueError):
    """A tenants file that cannot be used; the text is the whole one-line reason."""


@dataclass(frozen=True)
class TenantTable:
    """One loaded tenants file: by name, and the indexes a credential is looked up in."""

    path: str
    tenants: Mapping[str, TenantProfile]
    by_token: Mapping[bytes, str]
    by_sub: Mapping[str, str]


def load_tenants(path: str, *, jwt: bool) -> TenantTable:
    """Read and check ``path``. ``jwt``: the daemon authenticates signed bearer tokens,
    so each tenant is named by ``jwt_sub``; else by ``token_sha256``."""
    try:
        check_private(path, "tenants file")
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except SecretModeError as exc:
        raise TenantsFileError(str(exc)) from None
    except OSError as exc:
        raise TenantsFileError(f"tenants file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TenantsFileError(f"tenants file {path}: not valid TOML: {exc}") from None
    extra = sorted(set(document) - {"tenants"})
    if extra:
        raise TenantsFileError(f"tenants file {path}: unknown top-level key {extra[0]!r}")
    section = document.get("tenants")
    if not isinstance(section, dict) or not section:
        raise TenantsFileError(f"tenants file {path}: no [tenants.<name>] table")
    tenants: dict[str, TenantProfile] = {}
    by_token: dict[bytes, str] = {}
    by_sub: dict[str, str] = {}
    for name, entry in section.items():
        where = f"tenants file {path}: tenant {name}"
        if not isinstance(entry, dict):
            raise TenantsFileError(f"{where}: must be a table")
        profile = _profile(where, name, entry, jwt=jwt)
        if profile.token_sha256 is not None:
            other = by_token.setdefault(profile.token_sha256, name)
            if other != name:
                raise TenantsFileError(f"{where}: token_sha256: same token as tenant {other}")
        if profile.jwt_sub is not None:
            other = by_sub.setdefault(profile.jwt_sub, name)
            if other != name:
                raise TenantsFileError(f"{where}: jwt_sub: same subject as tenant {other}")
        tenants[name] = profile
    _check_readable_by_tenants(path, tenants)
    return TenantTable(path, tenants, by_token, by_sub)


def _check_readable_by_tenants(path: str, tenants: Mapping[str, TenantProfile]) -> None:
    try:
        check_private(path, "tenants file", [t.credentials for t in tenants.values()])
    except SecretModeError as exc:
        raise TenantsFileError(str(exc)) from None


def _profile(where: str, name: str, entry: dict[str, object], *, jwt: bool) -> TenantProfile:
    if not name or not set(name) <= _NAME_CHARS:
        raise TenantsFileError(f"{where}: the name may use only letters, digits, '-', '_', '.'")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise TenantsFileError(f"{where}: unknown key {unknown[0]!r}")
    token = _token(where, entry.get("token_sha256"))
    sub = _optional_str(where, "jwt_sub", entry.get("jwt_sub"))
    if jwt and sub is None:
        raise TenantsFileError(f"{where}: jwt_sub is required with --ws-auth signed-bearer-token")
    if jwt and token is not None:
        raise TenantsFileError(
            f"{where}: token_sha256 is not used with --ws-auth signed-bearer-token (use jwt_sub)"
        )
    if not jwt and token is None:
        raise TenantsFileError(f"{where}: token_sha256 is required")
    if not jwt and sub is not None:
        raise TenantsFileError(f"{where}: jwt_sub needs --ws-auth signed-bearer-token")
    user = _optional_str(where, "user", entry.get("user"))
    if user is None:
        raise TenantsFileError(f"{where}: user is required (the Unix account it runs as)")
    credentials = _account(where, user)
    sandbox = entry.get("sandbox", "required")
    if sandbox not in ("required", "optional"):
        raise TenantsFileError(f'{where}: sandbox must be "required" or "optional"')
    sandbox_rule: SandboxRule = "required" if sandbox == "required" else "optional"
    writable = _roots(where, "writable_roots", entry.get("writable_roots", []))
    readable_raw = entry.get("readable_roots")
    readable = None if readable_raw is None else _roots(where, "readable_roots", readable_raw)
    network = entry.get("network", "none")
    if network not in NETWORK_LEVELS:
        raise TenantsFileError(f"{where}: network must be one of none, managed, full")
    network_ceiling: NetworkCeiling = NETWORK_LEVELS[NETWORK_LEVELS.index(network)]
    network_allow = _network_allow(where, entry.get("network_allow"))
    if network_allow is not None and network_ceiling != "managed":
        raise TenantsFileError(f'{where}: network_allow needs network = "managed"')
    return TenantProfile(
        name=name,
        token_sha256=token,
        jwt_sub=sub,
        credentials=credentials,
        sandbox=sandbox_rule,
        writable_roots=writable,
        readable_roots=readable,
        network=network_ceiling,
        network_allow=network_allow,
        http_request=_http(where, entry.get("http_request", False)),
        max_processes=_count(where, "max_processes", entry.get("max_processes")),
        max_sessions=_count(where, "max_sessions", entry.get("max_sessions")),
        max_connections=_count(where, "max_connections", entry.get("max_connections")),
        max_http_requests=_count(where, "max_http_requests", entry.get("max_http_requests")),
        env=_env(where, entry.get("env", {})),
        quota=_quota(where, entry),
    )


def _token(where: str, value: object) -> bytes | None:
    if value is None:
        return None
    if not (isinstance(value, str) and len(value) == 64 and set(value) <= set(string.hexdigits)):
        raise TenantsFileError(f"{where}: token_sha256 must be a 64-character hex SHA-256 digest")
    return bytes.fromhex(value)


def _optional_str(where: str, key: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise TenantsFileError(f"{where}: {key} must be a non-empty string")
    return value


def _account(where: str, user: str) -> Credentials:
    try:
        credentials = lookup_account(user)
    except AccountError as exc:
        raise TenantsFileError(f"{where}: user: {exc}") from None
    if os.geteuid() != 0 and credentials.uid != os.geteuid():
        raise TenantsFileError(
            f"{where}: user: {user} is uid {credentials.uid}; only a root daemon "
            "can run a tenant as another account"
        )
    return credentials


def _roots(where: str, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TenantsFileError(f"{where}: {key} must be a list of absolute paths")
    roots: list[str] = []
    for item in value:
        assert isinstance(item, str)
        if not os.path.isabs(item):
            raise TenantsFileError(f"{where}: {key}: {item!r} is not an absolute path")
        # Canonical, as the policy resolver's paths are: a ceiling is compared with them.
        real = os.path.realpath(item)
        if real == "/":
            raise TenantsFileError(f"{where}: {key}: / is no ceiling; name the tenant's own roots")
        roots.append(real)
    return tuple(roots)


def _network_allow(where: str, value: object) -> tuple[str, ...] | None:
    """Host patterns as the managed-network proxy reads them (``example.com``,
    ``*.example.com``, ``**.example.com``, ``*``), lower-cased, no trailing dot."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TenantsFileError(f"{where}: network_allow must be a list of host patterns")
    patterns: list[str] = []
    for item in value:
        assert isinstance(item, str)
        pattern = item.strip().lower().rstrip(".")
        rest = pattern.removeprefix("**.").removeprefix("*.")
        if pattern != "*" and (not rest or "*" in rest or any(c in rest for c in "/: ")):
            raise TenantsFileError(
                f"{where}: network_allow: {item!r} is not a host pattern "
                "(host, *.domain, **.domain or *)"
            )
        patterns.append(pattern)
    return tuple(patterns)


def _http(where: str, value: object) -> bool | tuple[str, ...]:
    if isinstance(value, bool):
        return value
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return tuple(str(v).lower() for v in value)
    raise TenantsFileError(f"{where}: http_request must be true, false or a list of host names")


def _count(where: str, key: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TenantsFileError(f"{where}: {key} must be a positive integer")
    return value


def _quota(where: str, entry: dict[str, object]) -> ProcessLimitsConfig:
    """memory_max ("4G", or bytes), pids_max, cpu_max (cores): the cgroup over all it runs."""
    memory = entry.get("memory_max")
    memory_bytes: int | None = None
    if isinstance(memory, str):
        try:
            memory_bytes = parse_size(memory)
        except ValueError as exc:
            raise TenantsFileError(f"{where}: memory_max: {exc}") from None
    elif memory is not None:
        memory_bytes = _count(where, "memory_max", memory)
    cpu = entry.get("cpu_max")
    if cpu is not None and (
        isinstance(cpu, bool) or not isinstance(cpu, int | float) or not 0.01 <= cpu <= 4096
    ):
        raise TenantsFileError(f"{where}: cpu_max must be a number of cores (e.g. 2 or 0.5)")
    return ProcessLimitsConfig(
        memory_max_bytes=memory_bytes,
        pids_max=_count(where, "pids_max", entry.get("pids_max")),
        cpu_max_cores=None if cpu is None else float(cpu),
    )


def _env(where: str, value: object) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise TenantsFileError(f"{where}: env must be a table of strings")
    env: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str) or not key or "=" in key or "\0" in key + item:
            raise TenantsFileError(f"{where}: env: {key!r} must be a string without NUL or '='")
        env[key] = item
    return env
