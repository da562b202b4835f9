"""WebSocket authentication over real sockets, against execserver and the reference
with the same flags: both must answer every case alike."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.http import make_jwt, raw_request
from tests.support.rpc import connect
from tests.support.servers import start_server

pytestmark = pytest.mark.interop

KINDS = ["execserver", "reference"]
TOKEN = "secret-token-123"
SECRET = b"0123456789abcdef0123456789abcdef!!"
SWITCHING = (101, "")


def unauthorized(body: str) -> tuple[int, str]:
    return (401, body)


CAPABILITY_CASES: list[tuple[str, str, dict[str, str], tuple[int, str]]] = [
    ("no header", "/", {}, unauthorized("missing websocket bearer token")),
    ("right token", "/", {"Authorization": f"Bearer {TOKEN}"}, SWITCHING),
    ("lowercase scheme", "/", {"Authorization": f"bearer {TOKEN}"}, SWITCHING),
    ("two spaces", "/", {"Authorization": f"Bearer  {TOKEN}"}, SWITCHING),
    (
        "wrong token",
        "/",
        {"Authorization": "Bearer nope"},
        unauthorized("invalid websocket bearer token"),
    ),
    (
        "basic scheme",
        "/",
        {"Authorization": f"Basic {TOKEN}"},
        unauthorized("invalid authorization header"),
    ),
    ("bare token", "/", {"Authorization": TOKEN}, unauthorized("invalid authorization header")),
    (
        "tab after scheme",
        "/",
        {"Authorization": f"Bearer\t{TOKEN}"},
        unauthorized("invalid authorization header"),
    ),
    ("scheme only", "/", {"Authorization": "Bearer"}, unauthorized("invalid authorization header")),
    ("query token", f"/?token={TOKEN}", {}, unauthorized("missing websocket bearer token")),
    (
        "subprotocol token",
        "/",
        {"Sec-WebSocket-Protocol": TOKEN},
        unauthorized("missing websocket bearer token"),
    ),
    (
        "origin beats a valid token",
        "/",
        {"Authorization": f"Bearer {TOKEN}", "Origin": "x"},
        (403, ""),
    ),
    ("origin before auth", "/", {"Origin": "http://x"}, (403, "")),
    ("other path", "/x", {}, (404, "")),
]


@pytest.mark.parametrize("kind", KINDS)
async def test_capability_token_answers_like_the_reference(kind: str, tmp_path: Path) -> None:
    (tmp_path / "tok").write_text(TOKEN + "\n")  # the trailing newline is trimmed
    flags = ["--ws-auth", "capability-token", "--ws-token-file", str(tmp_path / "tok")]
    async with start_server(kind, flags) as server:
        got = {
            label: await raw_request(server.url, path, headers)
            for label, path, headers, _ in CAPABILITY_CASES
        }
        assert await raw_request(server.url, "/readyz", upgrade=False) == (200, "")
        no_upgrade = await raw_request(server.url, "/", {"Authorization": "Bearer x"}, False)
    assert got == {label: expected for label, _, _, expected in CAPABILITY_CASES}
    assert no_upgrade == (400, "Connection header did not include 'upgrade'")


@pytest.mark.parametrize("kind", KINDS)
async def test_first_authorization_header_counts(kind: str, tmp_path: Path) -> None:
    (tmp_path / "tok").write_text(TOKEN)
    flags = ["--ws-auth", "capability-token", "--ws-token-file", str(tmp_path / "tok")]
    async with start_server(kind, flags) as server:
        # Two headers on the wire; aiohttp's raw helper writes them via a dict, so join.
        first_wrong = await raw_request(
            server.url, "/", {"Authorization": f"Bearer x\r\nAuthorization: Bearer {TOKEN}"}
        )
        first_right = await raw_request(
            server.url, "/", {"Authorization": f"Bearer {TOKEN}\r\nAuthorization: Bearer x"}
        )
    assert first_wrong == unauthorized("invalid websocket bearer token")
    assert first_right == SWITCHING


@pytest.mark.parametrize("kind", KINDS)
async def test_sha256_mode_wants_the_plain_token_not_the_digest(kind: str) -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    flags = ["--ws-auth", "capability-token", "--ws-token-sha256", digest.upper()]
    async with start_server(kind, flags) as server:
        plain = await raw_request(server.url, "/", {"Authorization": f"Bearer {TOKEN}"})
        hashed = await raw_request(server.url, "/", {"Authorization": f"Bearer {digest}"})
    assert plain == SWITCHING
    assert hashed == unauthorized("invalid websocket bearer token")


def jwt_cases(now: int) -> list[tuple[str, str, tuple[int, str]]]:
    good: dict[str, Any] = {"exp": now + 600, "iss": "iss-1", "aud": "aud-1"}

    def t(claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
        return make_jwt(SECRET, claims, header)

    invalid = unauthorized("invalid websocket jwt")
    return [
        ("valid", t(good), SWITCHING),
        ("aud array", t({**good, "aud": ["x", "aud-1"]}), SWITCHING),
        ("no typ header", t(good, {"alg": "HS256"}), SWITCHING),
        ("other claims ignored", t({**good, "sub": 5, "iat": "x"}), SWITCHING),
        ("nbf null", t({**good, "nbf": None}), SWITCHING),
        ("missing exp", t({"iss": "iss-1", "aud": "aud-1"}), invalid),
        ("float exp", t({**good, "exp": now + 600.5}), invalid),
        ("string exp", t({**good, "exp": str(now + 600)}), invalid),
        ("exp beyond i64", t({**good, "exp": 2**64 - 1}), invalid),
        ("aud number", t({**good, "aud": 5}), invalid),
        ("aud array with a number", t({**good, "aud": ["aud-1", 5]}), invalid),
        ("alg none", t(good, {"alg": "none"}), invalid),
        ("alg HS384 header", t(good, {"alg": "HS384"}), invalid),
        ("alg lowercase", t(good, {"alg": "hs256"}), invalid),
        ("wrong secret", make_jwt(b"w" * 40, good), invalid),
        ("padded segment", t(good) + "=", invalid),
        ("garbage", "abc", invalid),
        ("expired", t({**good, "exp": now - 600}), unauthorized("expired websocket jwt")),
        ("negative exp", t({**good, "exp": -5}), unauthorized("expired websocket jwt")),
        (
            "expired and wrong aud",
            t({**good, "exp": now - 600, "aud": "z"}),
            unauthorized("expired websocket jwt"),
        ),
        (
            "not yet valid",
            t({**good, "nbf": now + 600}),
            unauthorized("websocket jwt is not valid yet"),
        ),
        (
            "not yet valid and wrong aud",
            t({**good, "nbf": now + 600, "aud": "z"}),
            unauthorized("websocket jwt is not valid yet"),
        ),
        ("wrong iss", t({**good, "iss": "z"}), unauthorized("websocket jwt issuer mismatch")),
        ("iss null", t({**good, "iss": None}), unauthorized("websocket jwt issuer mismatch")),
        (
            "iss and aud wrong",
            t({**good, "iss": "z", "aud": "z"}),
            unauthorized("websocket jwt issuer mismatch"),
        ),
        ("wrong aud", t({**good, "aud": "z"}), unauthorized("websocket jwt audience mismatch")),
        ("missing aud", t({**good, "aud": None}), unauthorized("websocket jwt audience mismatch")),
        (
            "empty aud array",
            t({**good, "aud": []}),
            unauthorized("websocket jwt audience mismatch"),
        ),
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_signed_bearer_token_answers_like_the_reference(kind: str, tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(SECRET + b"\n")
    flags = [
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        str(tmp_path / "secret"),
        "--ws-issuer",
        "iss-1",
        "--ws-audience",
        "aud-1",
    ]
    cases = jwt_cases(int(time.time()))
    async with start_server(kind, flags) as server:
        got = {
            label: await raw_request(server.url, "/", {"Authorization": f"Bearer {token}"})
            for label, token, _ in cases
        }
    assert got == {label: expected for label, _, expected in cases}


@pytest.mark.parametrize("kind", KINDS)
async def test_without_iss_and_aud_flags_those_claims_are_not_checked(
    kind: str, tmp_path: Path
) -> None:
    (tmp_path / "secret").write_bytes(SECRET)
    flags = [
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        str(tmp_path / "secret"),
    ]
    token = make_jwt(SECRET, {"exp": int(time.time()) + 600, "aud": "anything"})
    async with start_server(kind, flags) as server:
        assert await raw_request(server.url, "/", {"Authorization": f"Bearer {token}"}) == SWITCHING


@pytest.mark.parametrize("kind", KINDS)
async def test_authorized_client_gets_a_session_and_rejected_one_sees_nothing(
    kind: str, tmp_path: Path
) -> None:
    (tmp_path / "tok").write_text(TOKEN)
    flags = ["--ws-auth", "capability-token", "--ws-token-file", str(tmp_path / "tok")]
    async with start_server(kind, flags) as server:
        async with connect(server.url, handshake=False, token=TOKEN) as rpc:
            session_id = (await rpc.handshake()).result["sessionId"]
            status = await rpc.call("environment/status", None)
        assert session_id
        assert status["result"] == {"status": "ready"}
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            async with connect(server.url, handshake=False, token="nope"):
                pass
        assert refused.value.status == 401
