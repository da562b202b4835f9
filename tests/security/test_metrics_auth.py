"""With --ws-auth, /metrics asks for the same bearer token as the websocket: the
counters name methods, auth failure reasons and session counts of every client,
which an unauthenticated peer (or a sandbox with network access) must not read.
Without --ws-auth the route stays open, as before (bind it to loopback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.http import http_get
from tests.support.servers import start_server


@pytest.mark.parametrize(
    ("headers", "status", "body"),
    [
        (None, 401, "missing websocket bearer token"),
        ({"Authorization": "Bearer wrong"}, 401, "invalid websocket bearer token"),
        ({"Authorization": "Basic dG9rOnRvaw=="}, 401, "invalid authorization header"),
    ],
)
async def test_metrics_refuse_requests_without_the_websocket_token(
    tmp_path: Path, headers: dict[str, str] | None, status: int, body: str
) -> None:
    (tmp_path / "tok").write_text("s3cret-token")
    flags = ["--metrics", "--ws-auth", "capability-token", "--ws-token-file", str(tmp_path / "tok")]
    async with start_server("execserver", flags) as server:
        refused = await http_get(server.url, "/metrics", headers)
        allowed, text = await http_get(
            server.url, "/metrics", {"Authorization": "Bearer s3cret-token"}
        )
    assert refused == (status, body)
    assert allowed == 200 and "execserver_connections" in text


async def test_metrics_without_ws_auth_stay_open() -> None:
    async with start_server("execserver", ["--metrics"]) as server:
        status, text = await http_get(server.url, "/metrics")
    assert status == 200 and "execserver_requests" in text
