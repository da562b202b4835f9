"""WebSocket authentication, as the reference does it.

The token travels only in the upgrade request's ``Authorization: Bearer``
header and is checked before the socket is upgraded: a rejected client gets
``401`` with a plain-text reason and never sees a session. Start-up
validation happens in the reference's order (flag combinations, then the
listen URL, then stdio, then the secret files) so the same bad command line
prints the same ``Error:`` line.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import msgspec

from execserver.config import DEFAULT_WS_MAX_CLOCK_SKEW_S, ServerConfig, WsAuthConfig
from execserver.sandbox.plan import Credentials
from execserver.server.http_surface import HttpRequest, HttpResponse, UpgradeCheck
from execserver.server.listen import ListenAddress, parse_listen
from execserver.tenancy.directory import TenantDirectory
from execserver.tenancy.secrets import SecretModeError, check_private
from execserver.wire.errors import os_error_text

__all__ = [
    "AUTH_MODES",
    "CAPABILITY_TOKEN",
    "EXPIRED_JWT",
    "INVALID_HEADER",
    "INVALID_JWT",
    "INVALID_TOKEN",
    "JWT_NOT_YET_VALID",
    "METRICS_NOT_FOR_TENANTS",
    "MISSING_TOKEN",
    "SIGNED_BEARER_TOKEN",
    "AuthConfigError",
    "CapabilityTokenVerifier",
    "SignedBearerVerifier",
    "TenantVerifier",
    "TokenVerifier",
    "bearer_token",
    "check_exposure",
    "load_verifier",
    "make_upgrade_check",
    "metrics_checks",
    "startup_checks",
    "validate_flags",
]

log = logging.getLogger(__name__)

CAPABILITY_TOKEN: Final = "capability-token"
SIGNED_BEARER_TOKEN: Final = "signed-bearer-token"
AUTH_MODES: Final = (CAPABILITY_TOKEN, SIGNED_BEARER_TOKEN)
MIN_SHARED_SECRET_BYTES: Final = 32

# 401 bodies, word for word.
MISSING_TOKEN: Final = "missing websocket bearer token"
INVALID_HEADER: Final = "invalid authorization header"
INVALID_TOKEN: Final = "invalid websocket bearer token"
INVALID_JWT: Final = "invalid websocket jwt"
EXPIRED_JWT: Final = "expired websocket jwt"
JWT_NOT_YET_VALID: Final = "websocket jwt is not valid yet"
ISSUER_MISMATCH: Final = "websocket jwt issuer mismatch"
AUDIENCE_MISMATCH: Final = "websocket jwt audience mismatch"

# The 403 body of /metrics for a tenant's credential (our addition): it says whose
# route it is, nothing of what the daemon is doing.
METRICS_NOT_FOR_TENANTS: Final = (
    "/metrics is the operator's: scrape it with the token of --metrics-token-file"
)

_I64_MAX: Final = 2**63 - 1
_BEARER_PREFIX: Final = "bearer "


class AuthConfigError(ValueError):
    """A start-up error; its text is what the reference prints after ``Error: ``."""


class TokenVerifier(Protocol):
    @property
    def mode(self) -> str: ...

    def verify(self, token: str) -> str | None:
        """None when the token is accepted, else the 401 body."""


# ---- start-up ---------------------------------------------------------------------


def validate_flags(auth: WsAuthConfig) -> None:
    """Flag combinations and the digest format; no file is read yet."""
    token_flags = auth.token_file is not None or auth.token_sha256 is not None
    signed_flags = any(
        value is not None
        for value in (auth.shared_secret_file, auth.issuer, auth.audience, auth.max_clock_skew_s)
    )
    if auth.mode is None:
        if token_flags or signed_flags:
            raise AuthConfigError(
                "websocket auth flags require `--ws-auth capability-token` or "
                "`--ws-auth signed-bearer-token`"
            )
        return
    if auth.mode == CAPABILITY_TOKEN:
        if signed_flags:
            raise AuthConfigError(
                "`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and "
                "`--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`"
            )
        if auth.token_file is not None and auth.token_sha256 is not None:
            raise AuthConfigError(
                "`--ws-token-file` and `--ws-token-sha256` are mutually exclusive"
            )
        if auth.token_file is None and auth.token_sha256 is None:
            raise AuthConfigError(
                "`--ws-token-file` or `--ws-token-sha256` is required when "
                "`--ws-auth capability-token` is set"
            )
        if auth.token_sha256 is not None and not _is_sha256_hex(auth.token_sha256):
            raise AuthConfigError("--ws-token-sha256 must be a 64-character hex SHA-256 digest")
    elif auth.mode == SIGNED_BEARER_TOKEN:
        if token_flags:
            raise AuthConfigError(
                "`--ws-token-file` and `--ws-token-sha256` require `--ws-auth capability-token`, "
                "not `signed-bearer-token`"
            )
        if auth.shared_secret_file is None:
            raise AuthConfigError(
                "`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set"
            )
    else:
        raise AuthConfigError(f"unknown --ws-auth mode `{auth.mode}`")


def _is_sha256_hex(text: str) -> bool:
    return len(text) == 64 and all(c in string.hexdigits for c in text)


def check_exposure(config: ServerConfig, address: ListenAddress) -> None:
    """Refuse an unauthenticated listener that other hosts can reach (our rule, not the
    reference's: it serves anyone who can connect, and that means running commands)."""
    if address.kind != "ws" or config.ws_auth.mode is not None or config.allow_unauthenticated:
        return
    if config.tenants_file is not None:  # --tenants is token authentication
        return
    if not ipaddress.ip_address(address.host).is_loopback:
        raise AuthConfigError(
            f"refusing to listen on non-loopback address {address.url()} without "
            "authentication; set --ws-auth, or pass --allow-unauthenticated to accept "
            "unauthenticated connections"
        )


def _read_secret(path: str, what: str = "websocket auth secret") -> str:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        detail = os_error_text(exc.errno) if exc.errno is not None else str(exc)
        raise AuthConfigError(f"failed to read {what} {path}: {detail}") from None
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise AuthConfigError(
            f"failed to read {what} {path}: stream did not contain valid UTF-8"
        ) from None
    if not text:
        raise AuthConfigError(f"{what} {path} must not be empty")
    return text


def load_verifier(auth: WsAuthConfig) -> TokenVerifier | None:
    """Read the token or secret file (once, at start-up) and build the verifier."""
    if auth.mode == CAPABILITY_TOKEN:
        if auth.token_sha256 is not None:
            return CapabilityTokenVerifier(bytes.fromhex(auth.token_sha256))
        assert auth.token_file is not None  # validate_flags guarantees one of the two
        token = _read_secret(auth.token_file)
        return CapabilityTokenVerifier(hashlib.sha256(token.encode()).digest())
    if auth.mode == SIGNED_BEARER_TOKEN:
        assert auth.shared_secret_file is not None
        secret = _read_secret(auth.shared_secret_file).encode()
        if len(secret) < MIN_SHARED_SECRET_BYTES:
            raise AuthConfigError(
                f"signed websocket bearer secret {auth.shared_secret_file} must be at least "
                f"{MIN_SHARED_SECRET_BYTES} bytes"
            )
        skew = auth.max_clock_skew_s
        return SignedBearerVerifier(
            secret,
            issuer=auth.issuer,
            audience=auth.audience,
            max_clock_skew_s=DEFAULT_WS_MAX_CLOCK_SKEW_S if skew is None else skew,
        )
    return None


def startup_checks(config: ServerConfig) -> TokenVerifier | None:
    """Everything that can stop the daemon from starting, in the reference's order.
    Raises AuthConfigError or ListenError (both ValueError: print ``Error: <text>``)."""
    validate_flags(config.ws_auth)
    if config.tenants_file is not None and config.ws_auth.mode == CAPABILITY_TOKEN:
        raise AuthConfigError(
            "`--tenants` takes each tenant's token from the tenants file (token_sha256); "
            "drop `--ws-auth capability-token` and its token flags"
        )
    validate_metrics_flags(config)
    address = parse_listen(config.listen)
    if address.kind == "stdio" and config.ws_auth.mode is not None:
        raise AuthConfigError("WebSocket auth requires a WebSocket listener, not stdio")
    if address.kind == "stdio" and config.tenants_file is not None:
        raise AuthConfigError("`--tenants` requires a WebSocket listener, not stdio")
    check_exposure(config, address)
    verifier = load_verifier(config.ws_auth)
    if config.tenants_file is None:
        return verifier
    return load_tenant_verifier(config, verifier)


def validate_metrics_flags(config: ServerConfig) -> None:
    """With --tenants, /metrics is the operator's alone (every tenant's counts are in
    it), so --metrics needs the operator's token there; without --tenants /metrics
    takes the websocket's token, as before, and the flag has no meaning."""
    if config.metrics_token_file is not None:
        if config.tenants_file is None:
            raise AuthConfigError(
                "`--metrics-token-file` requires `--tenants` (without it /metrics takes "
                "the websocket's token)"
            )
        if not config.metrics:
            raise AuthConfigError("`--metrics-token-file` requires `--metrics`")
    elif config.metrics and config.tenants_file is not None:
        raise AuthConfigError(
            "`--metrics` with `--tenants` requires `--metrics-token-file`: no tenant's "
            "token may read /metrics"
        )


def load_metrics_token(
    path: str, directory: TenantDirectory, accounts: Sequence[Credentials]
) -> CapabilityTokenVerifier:
    """The operator's /metrics token, refused (as the JWT secret is) when a tenant's
    account could read its file, and when it is a tenant's own token."""
    try:
        check_private(path, "metrics token file", accounts)
    except SecretModeError as exc:
        raise AuthConfigError(str(exc)) from None
    token = _read_secret(path, "metrics token file")
    tenant = directory.identify_token(token)
    if tenant is not None:
        raise AuthConfigError(
            f"metrics token file {path} holds tenant {tenant}'s token; give the scrape "
            "job a token of its own"
        )
    return CapabilityTokenVerifier(hashlib.sha256(token.encode()).digest())


def load_tenant_verifier(
    config: ServerConfig, jwt_verifier: TokenVerifier | None
) -> TenantVerifier:
    """The tenants file, checked (TenantsFileError is a ValueError: one ``Error:`` line),
    and the daemon's JWT secret refused when a tenant's account could read it."""
    assert config.tenants_file is not None
    jwt = isinstance(jwt_verifier, SignedBearerVerifier)
    directory = TenantDirectory.load(config.tenants_file, jwt=jwt, limits=config.limits)
    accounts = [t.credentials for t in directory.table.tenants.values()]
    secret = config.ws_auth.shared_secret_file
    if secret is not None:
        try:
            check_private(secret, "websocket auth secret", accounts)
        except SecretModeError as exc:
            raise AuthConfigError(str(exc)) from None
    operator = None
    if config.metrics_token_file is not None:
        operator = load_metrics_token(config.metrics_token_file, directory, accounts)
    return TenantVerifier(directory, jwt_verifier if jwt else None, operator)


# ---- verifiers --------------------------------------------------------------------


@dataclass(frozen=True)
class CapabilityTokenVerifier:
    """Only the SHA-256 of the token is kept; comparison is constant-time."""

    digest: bytes
    mode: str = CAPABILITY_TOKEN

    def verify(self, token: str) -> str | None:
        presented = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        return None if hmac.compare_digest(presented, self.digest) else INVALID_TOKEN


class _Claims(msgspec.Struct, forbid_unknown_fields=False):
    """The claims the reference reads, typed as it types them: a present claim of the
    wrong type makes the whole token invalid; other claims are ignored."""

    exp: int
    nbf: int | None = None
    iss: str | None = None
    aud: str | list[str] | None = None


_claims_decoder = msgspec.json.Decoder(_Claims)


@dataclass(frozen=True)
class SignedBearerVerifier:
    """HS256 JWT: signature (pyjwt, constant-time HMAC check), then exp, nbf, iss, aud
    in that order - the order in which the reference reports the first failure."""

    secret: bytes
    issuer: str | None
    audience: str | None
    max_clock_skew_s: int
    clock: Callable[[], float] = time.time
    mode: str = SIGNED_BEARER_TOKEN

    def __post_init__(self) -> None:
        # pyjwt is imported here, with the verifier, not with this module: a daemon
        # without JWT auth never needs it (2.5 ms of every start, measured with the
        # daemon's other imports already loaded). Importing it now keeps that cost off
        # the first connection's upgrade.
        import jwt  # noqa: F401

    def verify(self, token: str) -> str | None:
        import jwt  # imported by __post_init__: a dictionary lookup

        # The reference accepts only unpadded base64url segments; pyjwt tolerates "=".
        if "=" in token:
            return INVALID_JWT
        try:
            decoded = jwt.PyJWS().decode_complete(token, self.secret, algorithms=["HS256"])
            claims = _claims_decoder.decode(decoded["payload"])
        except (jwt.PyJWTError, msgspec.DecodeError, msgspec.ValidationError):
            return INVALID_JWT
        if not -_I64_MAX - 1 <= claims.exp <= _I64_MAX:
            return INVALID_JWT
        now = int(self.clock())
        skew = self.max_clock_skew_s
        if now > claims.exp + skew:
            return EXPIRED_JWT
        if claims.nbf is not None and now < claims.nbf - skew:
            return JWT_NOT_YET_VALID
        if self.issuer is not None and claims.iss != self.issuer:
            return ISSUER_MISMATCH
        if self.audience is not None and not _audience_matches(claims.aud, self.audience):
            return AUDIENCE_MISMATCH
        return None


@dataclass(frozen=True)
class TenantVerifier:
    """--tenants: a credential is valid when it names a tenant of the current table
    (a capability token by its SHA-256, or a verified JWT by its ``sub``); the
    upgrade check records that principal for the connection."""

    directory: TenantDirectory
    jwt: TokenVerifier | None  # the signed-bearer verifier, with --ws-auth signed-bearer-token
    # --metrics-token-file: the operator's token, the only one /metrics accepts.
    operator: CapabilityTokenVerifier | None = None

    @property
    def mode(self) -> str:
        return SIGNED_BEARER_TOKEN if self.jwt is not None else CAPABILITY_TOKEN

    def identify(self, token: str) -> tuple[str | None, str | None]:
        """(principal, None) or (None, the 401 body)."""
        if self.jwt is None:
            name = self.directory.identify_token(token)
            return (name, None) if name is not None else (None, INVALID_TOKEN)
        refusal = self.jwt.verify(token)
        if refusal is not None:
            return None, refusal
        sub = _subject(token)
        name = self.directory.identify_subject(sub) if sub is not None else None
        return (name, None) if name is not None else (None, INVALID_JWT)

    def verify(self, token: str) -> str | None:
        return self.identify(token)[1]


class _Subject(msgspec.Struct, forbid_unknown_fields=False):
    sub: str | None = None


def _subject(token: str) -> str | None:
    """The ``sub`` of a JWT whose signature was just verified (payload only)."""
    import jwt  # imported when the signed-bearer verifier was built

    try:
        payload = jwt.PyJWS().decode_complete(token, options={"verify_signature": False})
        return msgspec.json.decode(payload["payload"], type=_Subject).sub
    except (jwt.PyJWTError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _audience_matches(aud: str | list[str] | None, expected: str) -> bool:
    if isinstance(aud, str):
        return aud == expected
    return aud is not None and expected in aud


# ---- the upgrade check ------------------------------------------------------------


def bearer_token(request: HttpRequest) -> tuple[str | None, str | None]:
    """(token, None) or (None, 401 body). Only the first Authorization header counts,
    the scheme is case-insensitive and the token is trimmed."""
    values = request.headers.getall("Authorization", [])
    if not values:
        return None, MISSING_TOKEN
    value = values[0]
    if value[: len(_BEARER_PREFIX)].lower() != _BEARER_PREFIX:
        return None, INVALID_HEADER
    token = value[len(_BEARER_PREFIX) :].strip()
    if not token:
        return None, INVALID_HEADER
    return token, None


RejectHook = Callable[[HttpRequest, str], None]


def make_upgrade_check(
    verifier: TokenVerifier, on_reject: RejectHook | None = None
) -> UpgradeCheck:
    def check(request: HttpRequest) -> HttpResponse | None:
        token, refusal = bearer_token(request)
        if token is not None:
            if isinstance(verifier, TenantVerifier):
                request.admission.principal, refusal = verifier.identify(token)
            else:
                refusal = verifier.verify(token)
        if refusal is None:
            return None
        if on_reject is not None:
            on_reject(request, refusal)
        log.info("websocket upgrade refused: %s", refusal)
        return HttpResponse.text(401, refusal)

    return check


TenantHook = Callable[[HttpRequest, str], None]


def metrics_checks(
    verifier: TokenVerifier | None, on_tenant: TenantHook | None = None
) -> list[UpgradeCheck]:
    """What /metrics asks for: nothing without authentication, the websocket's token
    with --ws-auth, and with --tenants the operator's token alone: a tenant's
    credential gets 403 (``on_tenant`` hears its principal), so that no tenant reads
    another's figures or the daemon's."""
    if verifier is None:
        return []
    if not isinstance(verifier, TenantVerifier):
        return [make_upgrade_check(verifier)]
    tenants, operator = verifier, verifier.operator

    def operator_only(request: HttpRequest) -> HttpResponse | None:
        token, refusal = bearer_token(request)
        if token is not None:
            # A tenant's credential first: were the operator's token ever a tenant's
            # too (a reload can make it so), that tenant is refused, not let in.
            principal, refusal = tenants.identify(token)
            if principal is not None:
                if on_tenant is not None:
                    on_tenant(request, principal)
                log.info("/metrics refused to tenant %s", principal)
                return HttpResponse.text(403, METRICS_NOT_FOR_TENANTS)
            if operator is not None and operator.verify(token) is None:
                return None
        assert refusal is not None
        return HttpResponse.text(401, refusal)

    return [operator_only]
