"""The client's multi-environment routing against real authenticated servers: each
environment id reaches its own server with its own credentials."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import jwt
import pytest

from execserver.client.environments import (
    Environment,
    EnvironmentRouter,
    UnknownEnvironment,
    signed_bearer_token,
    token_file,
)
from execserver.client.errors import ExecServerConnectError, ExecServerTransportClosed
from execserver.wire.lifecycle import EnvironmentInfo
from tests.support.client_peers import TcpProxy
from tests.support.servers import start_server

SECRET = b"0123456789abcdef0123456789abcdef-jwt"


async def test_calls_are_routed_by_environment_id_with_each_ones_credentials(
    tmp_path: Path,
) -> None:
    (tmp_path / "tok").write_text("token-a\n")
    (tmp_path / "secret").write_bytes(SECRET)
    cap = ["--ws-auth", "capability-token", "--ws-token-file", str(tmp_path / "tok")]
    signed = [
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        str(tmp_path / "secret"),
        "--ws-audience",
        "execserver",
    ]
    async with start_server("execserver", cap) as a, start_server("execserver", signed) as b:
        config = {
            "environments": {
                "devbox-a": {"url": a.url, "tokenFile": str(tmp_path / "tok")},
                "devbox-b": {
                    "url": b.url,
                    "sharedSecretFile": str(tmp_path / "secret"),
                    "audience": "execserver",
                },
            }
        }
        (tmp_path / "envs.json").write_text(json.dumps(config))
        async with EnvironmentRouter.from_file(tmp_path / "envs.json") as router:
            assert router.ids() == ["devbox-a", "devbox-b"]
            assert await router.environment_status("devbox-a") == "ready"
            assert await router.environment_status("devbox-b") == "ready"
            client_a = await router.client("devbox-a")
            client_b = await router.client("devbox-b")
            assert client_a is await router.client("devbox-a")  # one client per environment
            assert client_a.session_id != client_b.session_id
            info = await router.call("devbox-b", "environment/info", {})
            assert isinstance(info, EnvironmentInfo)  # the contract's result type
            assert info.executor_version
            with pytest.raises(UnknownEnvironment, match="nowhere"):
                await router.client("nowhere")


async def test_wrong_credentials_surface_as_a_refused_upgrade(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("right")
    (tmp_path / "wrong").write_text("wrong")
    cap = ["--ws-auth", "capability-token", "--ws-token-file", str(tmp_path / "tok")]
    async with start_server("execserver", cap) as server:
        env = Environment("x", server.url, token_file(tmp_path / "wrong"))
        async with EnvironmentRouter([env], auto_reconnect=False) as router:
            with pytest.raises(ExecServerConnectError) as refused:
                await router.client("x")
            assert refused.value.status == 401
            # The token file is read again on the next connect (rotated Secrets).
            (tmp_path / "wrong").write_text("right")
            assert await router.environment_status("x") == "ready"


async def test_token_source_is_asked_again_when_the_client_reconnects(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("right")
    cap = ["--ws-auth", "capability-token", "--ws-token-file", str(tmp_path / "tok")]
    asked: list[str] = []

    def token() -> str:
        asked.append("right")
        return "right"

    async with start_server("execserver", cap) as server, TcpProxy(server.url) as proxy:
        async with EnvironmentRouter([Environment("x", proxy.url, token)]) as router:
            client = await router.client("x")
            session = client.session_id
            assert asked == ["right"]
            proxy.drop()
            while True:
                # A request sent before the client noticed the drop fails; the
                # next one waits for the resume.
                with contextlib.suppress(ExecServerTransportClosed):
                    assert await router.environment_status("x") == "ready"
                    break
            assert await router.client("x") is client  # resumed, not replaced
            assert (client.reconnects, client.session_id) == (1, session)
            # Every connection, the resume's included, asked for credentials. Resume
            # attempts made before the server noticed the dropped connection are
            # refused (session still attached) and retried, so count connections
            # rather than expect exactly two.
            assert proxy.accepted >= 2
            assert len(asked) == proxy.accepted


def test_minted_jwt_carries_the_configured_claims() -> None:
    mint = signed_bearer_token(SECRET, ttl_s=60, issuer="i", audience="a", clock=lambda: 1000)
    token = mint()
    assert token is not None
    claims = jwt.decode(
        token, SECRET, algorithms=["HS256"], audience="a", options={"verify_exp": False}
    )
    assert claims == {"exp": 1060, "iat": 1000, "iss": "i", "aud": "a"}


def test_environment_spec_takes_one_credential_source() -> None:
    with pytest.raises(ValueError, match="only one"):
        Environment.from_mapping("x", {"url": "ws://127.0.0.1:1", "token": "a", "tokenFile": "b"})
    env = Environment.from_mapping("x", {"url": "ws://127.0.0.1:1", "token": "t"})
    assert env.token is not None and env.token() == "t"
