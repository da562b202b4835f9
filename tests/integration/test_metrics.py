"""/metrics after a scripted workload: the counters say what happened."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http import http_get, raw_request
from tests.support.rpc import connect
from tests.support.servers import start_server


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def scrape_when_idle(
    url: str, token: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Scrape once the server has torn down the closed connections (it notices a client's
    close asynchronously); the deadline only bounds a hang."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    async with asyncio.timeout(30):
        while True:
            status, text = await http_get(url, "/metrics", headers)
            assert status == 200
            got = samples(text)
            if got[("execserver_connections", ())] == 0:
                return got
            await asyncio.sleep(0.05)


async def test_metrics_count_connections_sessions_requests_and_rejections(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("tok")
    flags = ["--metrics", "--ws-auth", "capability-token", "--ws-token-file", str(tmp_path / "tok")]
    async with start_server("execserver", flags) as server:
        async with connect(server.url, handshake=False, token="tok") as rpc:
            session_id = (await rpc.handshake()).result["sessionId"]
            for _ in range(3):
                assert "result" in await rpc.call("environment/status")
            unknown = await rpc.call("no/such/method")
            assert unknown["error"]["code"] == -32601
        await scrape_when_idle(server.url, "tok")  # detached: resumable now
        async with connect(server.url, handshake=False, token="tok") as rpc:
            assert (await rpc.handshake(resume=session_id)).result["sessionId"] == session_id
        assert (await raw_request(server.url, "/", {"Authorization": "Bearer bad"}))[0] == 401
        got = await scrape_when_idle(server.url, "tok")
    assert (
        got[("execserver_requests_total", (("method", "environment/status"), ("result", "ok")))]
        == 3
    )
    assert got[("execserver_requests_total", (("method", "initialize"), ("result", "ok")))] == 2
    # Unknown method names share one label value.
    assert got[("execserver_requests_total", (("method", "unknown"), ("result", "-32601")))] == 1
    assert (
        got[("execserver_request_duration_seconds_count", (("method", "environment/status"),))] == 3
    )
    assert got[("execserver_connections_opened_total", ())] == 2
    assert got[("execserver_connections", ())] == 0
    assert got[("execserver_sessions_opened_total", ())] == 1
    assert got[("execserver_sessions_resumed_total", ())] == 1
    assert got[("execserver_sessions", ())] == 1
    assert got[("execserver_connections_rejected_total", (("reason", "auth"),))] == 1
    reason = (("reason", "invalid websocket bearer token"),)
    assert got[("execserver_auth_failures_total", reason)] == 1
    for direction in ("inbound", "outbound"):
        assert got[("execserver_transport_bytes_total", (("direction", direction),))] > 100
    for name in ("processes_live", "processes_started_total", "sandbox_denials_total"):
        assert ("execserver_" + name, ()) in got


async def test_metrics_route_is_absent_unless_enabled_as_in_the_reference() -> None:
    async with start_server("execserver") as server:
        assert await http_get(server.url, "/metrics") == (404, "")


@pytest.mark.parametrize("path", ["/metrics", "/readyz", "/livez"])
async def test_ops_routes_refuse_browsers(path: str) -> None:
    async with start_server("execserver", ["--metrics"]) as server:
        base = "http://" + server.url.removeprefix("ws://")
        async with (
            aiohttp.ClientSession() as session,
            session.get(base + path, headers={"Origin": "http://evil"}) as resp,
        ):
            assert resp.status == 403


async def test_metrics_name_the_running_build() -> None:
    from execserver import REFERENCE_VERSION, __version__

    async with start_server("execserver", ["--metrics"]) as server:
        status, text = await http_get(server.url, "/metrics")
    assert status == 200
    (build,) = [k for k in samples(text) if k[0] == "execserver_build_info"]
    labels = dict(build[1])
    assert labels["version"] == __version__
    assert labels["protocol"] == REFERENCE_VERSION
