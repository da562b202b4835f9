"""Token verification and start-up checks without a server: exact skew boundaries with
an injected clock, header parsing, and our own exposure rule."""

from __future__ import annotations

import hashlib
from pathlib import Path

import jwt
import pytest
from multidict import CIMultiDict

from execserver.config import ServerConfig, WsAuthConfig
from execserver.server import auth
from execserver.server.http_surface import HttpRequest
from execserver.server.listen import parse_listen
from tests.support.http import make_jwt

SECRET = b"k" * 32
NOW = 1_800_000_000


def verifier(
    skew: int = 30, issuer: str | None = None, audience: str | None = None
) -> auth.SignedBearerVerifier:
    return auth.SignedBearerVerifier(SECRET, issuer, audience, skew, clock=lambda: NOW + 0.9)


def test_exp_is_accepted_up_to_the_skew_and_rejected_one_second_later() -> None:
    v = verifier(skew=5)
    assert v.verify(make_jwt(SECRET, {"exp": NOW - 5})) is None
    assert v.verify(make_jwt(SECRET, {"exp": NOW - 6})) == auth.EXPIRED_JWT


def test_nbf_is_accepted_within_the_skew_and_rejected_beyond_it() -> None:
    v = verifier(skew=5)
    assert v.verify(make_jwt(SECRET, {"exp": NOW + 60, "nbf": NOW + 5})) is None
    assert v.verify(make_jwt(SECRET, {"exp": NOW + 60, "nbf": NOW + 6})) == auth.JWT_NOT_YET_VALID


def test_tokens_minted_by_pyjwt_are_accepted() -> None:
    token = jwt.encode({"exp": NOW + 60, "iss": "i", "aud": ["a"]}, SECRET, algorithm="HS256")
    assert verifier(issuer="i", audience="a").verify(token) is None


def test_critical_header_extensions_are_refused() -> None:
    # Deliberately stricter than the reference (RFC 7515 section 4.1.11): pyjwt refuses
    # extensions it does not understand, and so do we.
    token = make_jwt(SECRET, {"exp": NOW + 60}, {"alg": "HS256", "crit": ["x"]})
    assert verifier().verify(token) == auth.INVALID_JWT


def test_capability_token_compares_the_digest_of_the_presented_token() -> None:
    v = auth.CapabilityTokenVerifier(hashlib.sha256(b"tok").digest())
    assert v.verify("tok") is None
    assert v.verify(hashlib.sha256(b"tok").hexdigest()) == auth.INVALID_TOKEN


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], (None, auth.MISSING_TOKEN)),
        ([("Authorization", "Bearer abc")], ("abc", None)),
        ([("Authorization", "BEARER   abc  ")], ("abc", None)),
        ([("Authorization", "Bearer")], (None, auth.INVALID_HEADER)),
        ([("Authorization", "Bearerabc")], (None, auth.INVALID_HEADER)),
        ([("Authorization", "Token abc")], (None, auth.INVALID_HEADER)),
        ([("Authorization", "Bearer a"), ("Authorization", "Bearer b")], ("a", None)),
    ],
)
def test_bearer_token_parsing(
    headers: list[tuple[str, str]], expected: tuple[str | None, str | None]
) -> None:
    request = HttpRequest(path="/", headers=CIMultiDict(headers), remote=None)
    assert auth.bearer_token(request) == expected


def config(listen: str, **kwargs: object) -> ServerConfig:
    return ServerConfig(listen=listen, **kwargs)  # type: ignore[arg-type]


def test_non_loopback_without_auth_is_refused_unless_explicitly_allowed(tmp_path: Path) -> None:
    with pytest.raises(auth.AuthConfigError, match="--allow-unauthenticated"):
        auth.startup_checks(config("ws://0.0.0.0:0"))
    assert auth.startup_checks(config("ws://0.0.0.0:0", allow_unauthenticated=True)) is None
    assert auth.startup_checks(config("ws://[::1]:0")) is None
    assert auth.startup_checks(config("ws://127.0.0.2:0")) is None
    (tmp_path / "tok").write_text("t")
    with_auth = WsAuthConfig(mode=auth.CAPABILITY_TOKEN, token_file=str(tmp_path / "tok"))
    loaded = auth.startup_checks(config("ws://0.0.0.0:0", ws_auth=with_auth))
    assert loaded is not None and loaded.verify("t") is None


def test_exposure_rule_ignores_stdio() -> None:
    auth.check_exposure(config("stdio"), parse_listen("stdio"))


def test_signed_mode_uses_the_default_skew_when_the_flag_is_absent(tmp_path: Path) -> None:
    (tmp_path / "s").write_bytes(SECRET + b"\n")
    cfg = WsAuthConfig(mode=auth.SIGNED_BEARER_TOKEN, shared_secret_file=str(tmp_path / "s"))
    loaded = auth.load_verifier(cfg)
    assert isinstance(loaded, auth.SignedBearerVerifier)
    assert loaded.max_clock_skew_s == 30
    assert loaded.secret == SECRET  # surrounding whitespace trimmed
