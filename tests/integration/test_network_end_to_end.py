"""Managed network end to end: unified exec on the orchestrator, an executor
that launches the process's proxy, and the client's NetworkPolicyResponder
answering network/policyRequest through the NetworkApprovalService.

The command runs sandboxed (workspace-write profile, enforceManagedNetwork):
its only way out is the proxy. "upstream.test" is allowed by the policy,
"other.test" is undecided (put to the scripted user); both are the local
aiohttp upstream via the proxy's resolver hook; "blocked.test" is denied by
the policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from execserver.client.connection import ExecServerClient
from execserver.core.approvals import ApprovalRequest
from execserver.core.decisions import ReviewDecision
from execserver.core.environment import ExecutionEnvironment, ManagedNetwork
from execserver.core.errors import Rejected
from execserver.core.network_approval import NetworkApprovalService, NetworkDenial
from execserver.core.network_service import NetworkPolicyResponder
from execserver.core.orchestrator import ToolOrchestrator
from execserver.core.permissions import workspace_write_profile
from execserver.core.policy import AskForApproval
from execserver.core.runtime import TurnContext
from execserver.core.shell_runtime import ShellCommandRuntime, ShellRequest
from execserver.core.unified_exec.manager import NETWORK_DENIED_FALLBACK, UnifiedExecManager
from execserver.core.unified_exec.output import ExecCommandToolOutput
from execserver.wire.process import RemoteNetworkProxyConfig, RemoteNetworkProxyLaunchConfig
from tests.support.netproxy import Upstream, server_with_hosts, upstream_server

ENV_ID = "executor-1"
FETCH = """
import os, socket, sys, time, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=30) as r:
        print("status", r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print("status", e.code, e.headers.get("x-proxy-error"))
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=5).close()
    print("direct connected")
except OSError as e:
    print("direct failed")
sys.stdout.flush()
time.sleep(float(sys.argv[3]))
while len(sys.argv) > 4 and not os.path.exists(sys.argv[4]):
    time.sleep(0.05)
"""


class User:
    """Approves commands; answers network prompts from a script."""

    def __init__(self, *network: ReviewDecision, gate: asyncio.Event | None = None) -> None:
        self.network = list(network)
        self.network_requests: list[ApprovalRequest] = []
        self.gate = gate

    async def __call__(self, request: ApprovalRequest) -> ReviewDecision:
        if request.tool_name != "network":
            return ReviewDecision.APPROVED
        self.network_requests.append(request)
        if self.gate is not None:
            await self.gate.wait()
        if not self.network:
            raise AssertionError(f"unexpected network prompt: {request}")
        return self.network.pop(0)


class CountingService(NetworkApprovalService):
    """Counts how often each registration is begun and finished."""

    def __init__(self, user: User) -> None:
        super().__init__(
            approver=user, policy=AskForApproval.ON_REQUEST, profile=workspace_write_profile()
        )
        self.finished: dict[str, int] = {}
        # The triggering command of each finished registration, and its denial.
        self.outcomes: list[tuple[str, NetworkDenial | None]] = []

    def finish_call(self, registration_id: str) -> NetworkDenial | None:
        active = [
            a
            for a in self.active_calls_for_environment(ENV_ID)
            if a.registration_id == registration_id
        ]
        if active:
            self.finished[registration_id] = self.finished.get(registration_id, 0) + 1
        denial = super().finish_call(registration_id)
        self.outcomes.extend((a.command, denial) for a in active)
        return denial

    def outcome_for(self, host: str) -> NetworkDenial | None:
        (denial,) = [d for command, d in self.outcomes if f"//{host}:" in command]
        return denial


@dataclass
class Setup:
    client: ExecServerClient
    manager: UnifiedExecManager
    upstream: Upstream
    workspace: Path


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "fetch.py").write_text(FETCH)
    async with (
        server_with_hosts("execserver") as server,
        upstream_server() as upstream,
        await ExecServerClient.connect(server.url) as client,
    ):
        manager = UnifiedExecManager(client, deterministic_ids=True)
        try:
            yield Setup(client, manager, upstream, workspace)
        finally:
            await manager.clean()


def network_turn(
    s: Setup, user: User, *, timeout_ms: int = 5000
) -> tuple[TurnContext, CountingService, NetworkPolicyResponder]:
    service = CountingService(user)
    responder = NetworkPolicyResponder(
        service, environment_id=ENV_ID, decision_timeout_ms=timeout_ms
    )
    responder.attach(s.client)
    proxy = RemoteNetworkProxyConfig(
        enabled=True,
        mode="full",
        enable_socks5=False,
        enable_socks5_udp=False,
        allow_upstream_proxy=False,
        dangerously_allow_all_unix_sockets=False,
        allow_local_binding=False,
        domains={"upstream.test": "allow", "blocked.test": "deny"},
    )
    turn = TurnContext(
        environment=ExecutionEnvironment(
            environment_id=ENV_ID, cwd=str(s.workspace), supports_network_proxy_launch=True
        ),
        approval_policy=AskForApproval.ON_REQUEST,
        permission_profile=workspace_write_profile(),
        approver=user,
        managed_network=ManagedNetwork(
            launch=RemoteNetworkProxyLaunchConfig(
                proxy=proxy, policy_decision_timeout_ms=timeout_ms
            )
        ),
        network_approvals=service,
    )
    return turn, service, responder


def fetch_command(s: Setup, host: str, *, linger: float = 0, gate: Path | None = None) -> str:
    """The child fetches ``host`` through the proxy, lingers, then (with a
    ``gate``) keeps running until that file exists."""
    url = f"http://{host}:{s.upstream.port}/from-{host}"
    cmd = f"{sys.executable} fetch.py {url} {s.upstream.port} {linger}"
    return cmd if gate is None else f"{cmd} {gate}"


async def poll_until_exit(s: Setup, out: ExecCommandToolOutput) -> ExecCommandToolOutput:
    """Poll a still running command; the result carries all of its output."""
    text = out.output
    while out.session_id is not None:
        out = await s.manager.write_stdin({"session_id": out.session_id, "yield_time_ms": 10000})
        text += out.output
    return dataclasses.replace(out, output=text)


async def fetch(
    s: Setup, turn: TurnContext, host: str, *, linger: float = 0
) -> ExecCommandToolOutput:
    cmd = fetch_command(s, host, linger=linger)
    out = await s.manager.exec_command({"cmd": cmd, "login": False, "yield_time_ms": 10000}, turn)
    return await poll_until_exit(s, out)


def assert_each_finished_once(service: CountingService, attempts: int) -> None:
    assert service.active_calls_for_environment(ENV_ID) == []
    assert len(service.finished) == attempts
    assert set(service.finished.values()) == {1}


async def test_allowed_domain_goes_through_without_a_prompt(setup: Setup) -> None:
    user = User()
    turn, service, _ = network_turn(setup, user)
    out = await fetch(setup, turn, "upstream.test")
    assert out.exit_code == 0, out.output
    assert (
        f"status 200 upstream saw GET /from-upstream.test host=upstream.test:{setup.upstream.port}"
        in out.output
    )
    assert "direct failed" in out.output  # the sandbox has no way around the proxy
    assert user.network_requests == []
    assert_each_finished_once(service, 1)


async def test_undecided_domain_allowed_for_the_session_is_asked_once(setup: Setup) -> None:
    user = User(ReviewDecision.APPROVED_FOR_SESSION)
    turn, service, _ = network_turn(setup, user)
    first = await fetch(setup, turn, "other.test")
    second = await fetch(setup, turn, "other.test")
    for out in (first, second):
        assert out.exit_code == 0
        assert "status 200 upstream saw GET /from-other.test" in out.output
    (prompt,) = user.network_requests
    assert prompt.reason == 'Network access to "other.test" is blocked by policy.'
    assert prompt.network_context is not None and prompt.network_context.host == "other.test"
    assert len(setup.upstream.seen) == 2
    assert_each_finished_once(service, 2)


async def test_undecided_domain_denied_blocks_and_terminates_the_process(setup: Setup) -> None:
    user = User(ReviewDecision.denied("not today"))
    turn, service, _ = network_turn(setup, user)
    out = await fetch(setup, turn, "other.test", linger=60)
    # The denial cancelled the call: its process was terminated, not waited for
    # (possibly before the child even read the proxy's 403).
    assert out.exit_code is not None and out.exit_code != 0
    assert out.output.endswith(NETWORK_DENIED_FALLBACK)
    assert setup.upstream.seen == []
    assert_each_finished_once(service, 1)


async def test_slow_user_is_answered_deny_in_time_and_the_connection_survives(setup: Setup) -> None:
    gate = asyncio.Event()
    user = User(ReviewDecision.APPROVED_FOR_SESSION, gate=gate)
    turn, service, _ = network_turn(setup, user, timeout_ms=1000)
    out = await fetch(setup, turn, "other.test")
    # The responder denied before the executor's deadline (a late answer would
    # make the server drop the connection)...
    assert "status 403 blocked-by-policy" in out.output
    assert setup.client.state.name == "CONNECTED"
    # The attempt ended with the prompt still open: the prompt was abandoned with
    # it, so the next attempt asks again.
    gate.set()
    again = await fetch(setup, turn, "other.test")
    assert "status 200" in again.output
    assert len(user.network_requests) == 2
    assert setup.client.reconnects == 0
    assert_each_finished_once(service, 2)


@pytest.mark.parametrize(
    ("denied_host", "answers"),
    [("other.test", (ReviewDecision.denied("not today"),)), ("blocked.test", ())],
    ids=["user-denies", "policy-denies"],
)
async def test_denial_terminates_only_the_call_that_touched_the_domain(
    setup: Setup, denied_host: str, answers: tuple[ReviewDecision, ...]
) -> None:
    user = User(*answers)
    turn, service, _ = network_turn(setup, user)
    gate = setup.workspace / "gate"
    # The bystander is left running (it waits for the gate) in the same
    # environment while the other call touches the denied domain.
    bystander = await setup.manager.exec_command(
        {
            "cmd": fetch_command(setup, "upstream.test", gate=gate),
            "login": False,
            "yield_time_ms": 250,
        },
        turn,
    )
    assert bystander.session_id is not None
    try:
        # Without the denial reaching its own call this one would exit 0 after 30 s.
        denied = await fetch(setup, turn, denied_host, linger=30)
    finally:
        gate.touch()
    survivor = await poll_until_exit(setup, bystander)

    assert denied.exit_code is not None and denied.exit_code != 0
    assert denied.output.endswith(NETWORK_DENIED_FALLBACK)
    assert survivor.exit_code == 0, survivor.output
    assert "status 200 upstream saw GET /from-upstream.test" in survivor.output
    assert NETWORK_DENIED_FALLBACK not in survivor.output
    assert len(setup.upstream.seen) == 1  # only the bystander's request got out
    # Only the offending call's approval saw the denial.
    assert service.outcome_for(denied_host) is not None
    assert service.outcome_for("upstream.test") is None
    if answers:
        (prompt,) = user.network_requests
        owners = prompt.details["registration_ids"]
        assert isinstance(owners, list) and len(owners) == 1  # not the bystander
    assert_each_finished_once(service, 2)


@pytest.mark.parametrize(
    ("denied_host", "answers"),
    [("other.test", (ReviewDecision.denied("not today"),)), ("blocked.test", ())],
    ids=["user-denies", "policy-denies"],
)
async def test_one_shot_shell_is_stopped_as_soon_as_its_network_access_is_denied(
    setup: Setup, denied_host: str, answers: tuple[ReviewDecision, ...]
) -> None:
    """The one-shot shell runtime (IMMEDIATE network approval) stops its
    command when the denial arrives instead of waiting for it to end: the
    child would otherwise linger for ten minutes after the 403."""
    user = User(*answers)
    turn, service, _ = network_turn(setup, user)
    url = f"http://{denied_host}:{setup.upstream.port}/from-{denied_host}"
    argv = (sys.executable, "fetch.py", url, str(setup.upstream.port), "600")
    runtime = ShellCommandRuntime(setup.client)
    async with asyncio.timeout(120):
        with pytest.raises(Rejected) as raised:
            await ToolOrchestrator(turn).run(runtime, ShellRequest(argv=argv))
    denial = service.outcome_for(denied_host)
    assert denial is not None and str(raised.value) == denial.message
    assert setup.upstream.seen == []
    assert_each_finished_once(service, 1)
