"""AgentSandboxProvider end to end, but for the cluster: a real execserver daemon on
127.0.0.1, reached through k8s-agent-sandbox's own client talking to a stand-in
Kubernetes API (aiohttp, 127.0.0.1) that plays the API server and the agent-sandbox
controller for exactly the calls the provider makes: create / get / watch / delete a
SandboxClaim, get a Sandbox. The stand-in reports the daemon's address as the
sandbox's Service (status.serviceFQDN); everything after that is the real client and
daemon. No cluster was involved; docs/scale-out.md says what that leaves unproven."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from yarl import URL

from execserver.client.agent_sandbox import (
    AgentSandboxProvider,
    SandboxClaimFailed,
    claim_name_for,
)
from execserver.client.environments import static_token
from tests.support.servers import start_server

TOKEN = "agent-sandbox-test-token"
POOL = "execserver"
NAMESPACE = "agents"
CLAIMS = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxclaims"
SANDBOXES = "/apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxes"


def status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip
    return web.json_response(body, status=code)


class StandInKubernetes:
    """The API server plus the agent-sandbox controller, as far as the provider sees
    them: a claim on a known warm pool is bound to a warm sandbox of a different
    name (as warm-pool adoption does) that turns Ready with a Service after
    ``ready_after`` seconds; a claim on an unknown pool gets the controller's
    Ready=False/WarmPoolNotFound condition."""

    def __init__(
        self, service_fqdn: str | None, *, ready_after: float = 0.2, never_ready: bool = False
    ) -> None:
        self.service_fqdn = service_fqdn
        self.ready_after = ready_after
        self.never_ready = never_ready
        self.claims: dict[str, dict[str, Any]] = {}
        self.sandboxes: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self._versions = itertools.count(100)
        self._warm = itertools.count(1)
        self._changed = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()
        self.app = web.Application()
        self.app.on_cleanup.append(self._stop_reconciling)
        self.app.router.add_post(CLAIMS.format(ns="{ns}"), self.create_claim)
        self.app.router.add_get(CLAIMS.format(ns="{ns}"), self.list_claims)
        self.app.router.add_get(CLAIMS.format(ns="{ns}") + "/{name}", self.get_claim)
        self.app.router.add_delete(CLAIMS.format(ns="{ns}") + "/{name}", self.delete_claim)
        self.app.router.add_get(SANDBOXES.format(ns="{ns}") + "/{name}", self.get_sandbox)

    async def _stop_reconciling(self, _app: web.Application) -> None:
        """The runner's cleanup ends the claims still being made ready."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _bump(self, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))

    async def _changed_now(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def create_claim(self, request: web.Request) -> web.Response:
        self.calls.append("create claim")
        body = await request.json()
        name = body["metadata"]["name"]
        if request.match_info["ns"] != NAMESPACE:
            return status(404, "NotFound", f"namespaces {request.match_info['ns']!r} not found")
        if name in self.claims:
            return status(409, "AlreadyExists", f'sandboxclaims "{name}" already exists')
        body["metadata"].update(uid=f"uid-{name}-{next(self._warm)}", namespace=NAMESPACE)
        body["status"] = {}
        self._bump(body)
        self.claims[name] = body
        task = asyncio.get_running_loop().create_task(self._reconcile(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.json_response(body, status=201)

    async def _reconcile(self, name: str) -> None:
        await asyncio.sleep(self.ready_after)
        claim = self.claims.get(name)
        if claim is None or self.never_ready:
            return
        pool = claim["spec"]["warmPoolRef"]["name"]
        if pool != POOL:
            message = f"SandboxWarmPool {pool!r} not found"
            condition = {"type": "Ready", "status": "False", "reason": "WarmPoolNotFound"}
            claim["status"] = {"conditions": [{**condition, "message": message}]}
        else:
            sandbox_name = f"{POOL}-warm-{next(self._warm)}"
            sandbox_status: dict[str, Any] = {
                "conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}],
                "podIPs": ["127.0.0.1"],
            }
            if self.service_fqdn is not None:
                sandbox_status["serviceFQDN"] = self.service_fqdn
            self.sandboxes[sandbox_name] = {
                "apiVersion": "agents.x-k8s.io/v1beta1",
                "kind": "Sandbox",
                "metadata": {"name": sandbox_name, "namespace": NAMESPACE},
                "status": sandbox_status,
            }
            claim["status"] = {
                "sandbox": {"name": sandbox_name},
                "conditions": [{"type": "Ready", "status": "True", "reason": "SandboxReady"}],
            }
        self._bump(claim)
        await self._changed_now()

    async def get_claim(self, request: web.Request) -> web.Response:
        self.calls.append("get claim")
        claim = self.claims.get(request.match_info["name"])
        if claim is None:
            return status(404, "NotFound", "not found")
        return web.json_response(claim)

    async def delete_claim(self, request: web.Request) -> web.Response:
        self.calls.append("delete claim")
        claim = self.claims.pop(request.match_info["name"], None)
        if claim is None:
            return status(404, "NotFound", "not found")
        sandbox = (claim.get("status") or {}).get("sandbox", {}).get("name")
        self.sandboxes.pop(sandbox, None)
        await self._changed_now()
        return web.json_response({"kind": "Status", "status": "Success"})

    async def get_sandbox(self, request: web.Request) -> web.Response:
        self.calls.append("get sandbox")
        sandbox = self.sandboxes.get(request.match_info["name"])
        if sandbox is None:
            return status(404, "NotFound", "not found")
        return web.json_response(sandbox)

    async def list_claims(self, request: web.Request) -> web.StreamResponse:
        """Only the watch form (``?watch=true&fieldSelector=metadata.name=X``):
        newline-delimited events, as the API server streams them."""
        # kubernetes_asyncio sends "True"; the API server parses it as Go's ParseBool.
        assert request.query.get("watch", "").lower() == "true", request.query
        self.calls.append("watch claim")
        selector = request.query["fieldSelector"]
        assert selector.startswith("metadata.name="), selector
        name = selector.removeprefix("metadata.name=")
        since = int(request.query.get("resourceVersion") or 0)
        timeout = float(request.query.get("timeoutSeconds", 30))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        seen = since
        deadline = time.monotonic() + timeout
        existed = name in self.claims
        while time.monotonic() < deadline:
            claim = self.claims.get(name)
            event: dict[str, Any] | None = None
            if claim is None and existed:
                event = {"type": "DELETED", "object": {"metadata": {"name": name}}}
            elif claim is not None and int(claim["metadata"]["resourceVersion"]) > seen:
                seen = int(claim["metadata"]["resourceVersion"])
                event = {"type": "MODIFIED", "object": claim}
            if event is not None:
                await response.write(json.dumps(event).encode() + b"\n")
                if event["type"] == "DELETED":
                    break
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
                except TimeoutError:
                    break
        await response.write_eof()
        return response


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[URL]:
    (tmp_path / "token").write_text(TOKEN + "\n")
    auth = ["--ws-auth", "capability-token", "--ws-token-file", str(tmp_path / "token")]
    async with start_server("execserver", auth) as server:
        yield URL(server.url)


async def serve(api: StandInKubernetes) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(api.app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def provider_for(api_url: str, port: int, **options: Any) -> AgentSandboxProvider:
    options.setdefault("shutdown_after_s", 3600)
    return AgentSandboxProvider(
        options.pop("warm_pool", POOL),
        namespace=NAMESPACE,
        port=port,
        token=static_token(TOKEN),
        kube_api_url=api_url,
        **options,
    )


async def test_a_claimed_sandbox_is_reached_by_its_service_name(daemon: URL) -> None:
    api = StandInKubernetes(daemon.host)
    runner, api_url = await serve(api)
    try:
        key = "conversation-42"
        async with provider_for(api_url, daemon.port or 0) as provider:
            client = await provider.client(key)
            result = await client.run(["echo", "from the sandbox"], cwd="/tmp", text=True)
            assert result.stdout == "from the sandbox\n"
            claimed = await provider.claim(key)
            session = client.session_id
        # What the provider asked the cluster for.
        name = claim_name_for(key)
        assert claimed.claim_name == name
        claim = api.claims[name]
        assert claim["spec"]["warmPoolRef"] == {"name": POOL}
        lifecycle = claim["spec"]["lifecycle"]
        assert lifecycle["shutdownPolicy"] == "Delete"
        expires = datetime.fromisoformat(lifecycle["shutdownTime"]).timestamp()
        assert abs(expires - (time.time() + 3600)) < 120
        # The warm sandbox it was bound to has another name; the URL is its Service's.
        assert claimed.sandbox_name.startswith(f"{POOL}-warm-")
        assert claimed.service_fqdn == daemon.host
        assert claimed.environment.url == f"ws://{daemon.host}:{daemon.port}"
        assert api.calls[:2] == ["create claim", "watch claim"]
        assert len(api.sandboxes) == 1

        # A restarted agent host: the same key adopts the same claim, creates none.
        api.calls.clear()
        async with provider_for(api_url, daemon.port or 0) as again:
            adopted = await again.claim(key)
            assert (adopted.claim_name, adopted.sandbox_name) == (name, claimed.sandbox_name)
            assert api.calls[:2] == ["create claim", "get claim"]  # 409, then adopt
            client = await again.client(key)
            assert client.session_id != session  # a new session in the same executor
            assert (await client.run(["true"], cwd="/tmp")).exit_code == 0
            await again.release(key)
            assert again.keys() == []
        assert api.claims == {} and api.sandboxes == {}

        # Released: the next claim for the key is a new one, from the pool again.
        async with provider_for(api_url, daemon.port or 0) as third:
            fresh = await third.claim(key)
            assert fresh.sandbox_name != claimed.sandbox_name
            await third.release(key)
            await third.release(key)  # already gone: a 404 counts as deleted
        assert api.claims == {}
    finally:
        await runner.cleanup()


async def test_a_release_after_a_restart_deletes_the_claim_by_its_name(daemon: URL) -> None:
    api = StandInKubernetes(daemon.host)
    runner, api_url = await serve(api)
    try:
        async with provider_for(api_url, daemon.port or 0) as first:
            await first.claim("task-7")
        assert claim_name_for("task-7") in api.claims
        api.calls.clear()
        async with provider_for(api_url, daemon.port or 0) as second:
            await second.release("task-7")  # never claimed by this one
        assert api.calls == ["delete claim"] and api.claims == {}
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unknown warm pool", "SandboxWarmPoolNotFoundError: SandboxWarmPool requested does not"),
        ("no service", "is Ready but reports no status.serviceFQDN"),
        ("never ready", "TimeoutError: Could not resolve claim readiness"),
        ("wrong namespace", "Kubernetes API 404: namespaces 'elsewhere' not found"),
        ("no API server", "Cannot connect to host 127.0.0.1"),
    ],
)
async def test_a_claim_that_cannot_be_had_is_one_line_naming_why(
    daemon: URL, case: str, expected: str
) -> None:
    api = StandInKubernetes(None if case == "no service" else daemon.host)
    api.never_ready = case == "never ready"
    runner, api_url = await serve(api)
    options: dict[str, Any] = {"ready_timeout_s": 1}
    if case == "unknown warm pool":
        options["warm_pool"] = "no-such-pool"
    if case == "no API server":
        await runner.cleanup()  # nothing listens there any more
    try:
        provider = provider_for(api_url, daemon.port or 0, **options)
        if case == "wrong namespace":
            provider.namespace = "elsewhere"
        async with provider:
            with pytest.raises(SandboxClaimFailed) as caught:
                await asyncio.wait_for(provider.client("agent-1"), 30)
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith(
            f"cannot claim an execserver sandbox for key 'agent-1' (SandboxClaim "
            f"{claim_name_for('agent-1')} from warm pool "
        ), message
        assert expected in message, message
        assert caught.value.key == "agent-1"
        assert provider.keys() == []
    finally:
        await runner.cleanup()
