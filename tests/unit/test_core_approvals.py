"""Review decisions, the approval cache and the approval router.

``test_invariant_N_...``: guarantee N of docs/core-guarantees.md.
"""

from __future__ import annotations

import pytest

from execserver.core.approval_cache import (
    ApprovalStore,
    ExecApprovalKey,
    PatchApprovalKey,
    with_cached_approval,
)
from execserver.core.approvals import (
    ApprovalRequest,
    ApprovalRouter,
    check_decision,
    permission_request_payload,
)
from execserver.core.decisions import DecisionKind, ReviewDecision
from execserver.core.errors import Rejected, TurnAborted
from execserver.core.permissions import AdditionalPermissions
from execserver.core.policy import SandboxPermissions


# --------------------------------------------------------------------------- wire
@pytest.mark.parametrize(
    ("decision", "wire"),
    [
        (ReviewDecision.APPROVED, "approved"),
        (ReviewDecision.APPROVED_FOR_SESSION, "approved_for_session"),
        (ReviewDecision.DENIED, "denied"),
        (ReviewDecision.TIMED_OUT, "timed_out"),
        (ReviewDecision.ABORT, "abort"),
        (
            ReviewDecision.approved_execpolicy_amendment(("git", "status")),
            {"approved_execpolicy_amendment": {"proposed_execpolicy_amendment": ["git", "status"]}},
        ),
        (
            ReviewDecision.network_policy_amendment("example.com", "allow"),
            {
                "network_policy_amendment": {
                    "network_policy_amendment": {"host": "example.com", "action": "allow"}
                }
            },
        ),
        (ReviewDecision.denied("not now"), {"denied": {"rejection": "not now"}}),
    ],
)
def test_review_decision_wire_round_trip(decision: ReviewDecision, wire: object) -> None:
    assert decision.to_wire() == wire
    assert ReviewDecision.from_wire(wire) == decision


@pytest.mark.parametrize("bad", ["approve", {"denied": 1}, {"a": 1, "b": 2}, None])
def test_unknown_review_decisions_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        ReviewDecision.from_wire(bad)


def test_rejection_text_is_capped_at_4_kib() -> None:
    decision = ReviewDecision.denied("é" * 4000)
    assert decision.rejection is not None
    assert len(decision.rejection.encode()) <= 4096


def test_network_amendment_action_must_be_allow_or_deny() -> None:
    with pytest.raises(ValueError):
        ReviewDecision.network_policy_amendment("h", "maybe")


# --------------------------------------------------------------------------- decision effects
@pytest.mark.parametrize(
    "decision",
    [
        ReviewDecision.APPROVED,
        ReviewDecision.APPROVED_FOR_SESSION,
        ReviewDecision.approved_execpolicy_amendment(("ls",)),
        ReviewDecision.network_policy_amendment("h", "allow"),
    ],
)
def test_approving_decisions_let_the_call_proceed(decision: ReviewDecision) -> None:
    check_decision(decision, rejected_by_user="exec command rejected by user")


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (ReviewDecision.DENIED, "exec command rejected by user"),
        (ReviewDecision.denied("use a branch"), "use a branch"),
        (ReviewDecision.TIMED_OUT, "automatic approval review timed out"),
        (
            ReviewDecision(DecisionKind.APPROVED_MCP_POLICY_AMENDMENT, mcp_amendment={}),
            "Error while requesting approval",
        ),
        (ReviewDecision.network_policy_amendment("h", "deny"), "rejected by user"),
    ],
)
def test_refusing_decisions_become_rejected(decision: ReviewDecision, message: str) -> None:
    with pytest.raises(Rejected) as info:
        check_decision(decision, rejected_by_user="exec command rejected by user")
    assert info.value.message == message


def test_patch_runtime_text_for_a_plain_denial() -> None:
    with pytest.raises(Rejected, match="patch rejected by user"):
        check_decision(ReviewDecision.DENIED, rejected_by_user="patch rejected by user")


def test_abort_aborts_the_turn() -> None:
    with pytest.raises(TurnAborted):
        check_decision(ReviewDecision.ABORT, rejected_by_user="x")


# --------------------------------------------------------------------------- cache
def _key(**overrides: object) -> ExecApprovalKey:
    fields: dict[str, object] = {
        "environment_id": "env-a",
        "command": ("touch", "x"),
        "cwd": "/work",
        "tty": False,
    }
    fields.update(overrides)
    return ExecApprovalKey(**fields)  # type: ignore[arg-type]


class Asker:
    """A scripted user: answers in order and counts the questions."""

    def __init__(self, *answers: ReviewDecision) -> None:
        self.answers = list(answers)
        self.asked = 0

    async def __call__(self) -> ReviewDecision:
        self.asked += 1
        return self.answers.pop(0)


async def test_invariant_11_only_approved_for_session_is_cached() -> None:
    store = ApprovalStore()
    ask = Asker(ReviewDecision.APPROVED, ReviewDecision.APPROVED)
    assert await with_cached_approval(store, [_key()], ask) == ReviewDecision.APPROVED
    assert await with_cached_approval(store, [_key()], ask) == ReviewDecision.APPROVED
    assert ask.asked == 2
    assert len(store) == 0
    with pytest.raises(ValueError):
        store.put(_key(), ReviewDecision.APPROVED)


async def test_invariant_11_session_approval_answers_the_same_key_without_asking() -> None:
    store = ApprovalStore()
    ask = Asker(ReviewDecision.APPROVED_FOR_SESSION)
    await with_cached_approval(store, [_key()], ask)
    decision = await with_cached_approval(store, [_key()], ask)
    assert decision == ReviewDecision.APPROVED_FOR_SESSION
    assert ask.asked == 1


@pytest.mark.parametrize(
    "other",
    [
        _key(environment_id="env-b"),
        _key(cwd="/elsewhere"),
        _key(tty=True),
        _key(command=("touch", "y")),
        _key(sandbox_permissions=SandboxPermissions.REQUIRE_ESCALATED),
        _key(additional_permissions=AdditionalPermissions(write=("/w",))),
        _key(executable="/usr/bin/touch"),
        _key(exec_policy_fingerprint="rules-v2"),
    ],
)
async def test_invariant_11_session_approval_does_not_leak_to_another_key(
    other: ExecApprovalKey,
) -> None:
    store = ApprovalStore()
    ask = Asker(ReviewDecision.APPROVED_FOR_SESSION, ReviewDecision.DENIED)
    await with_cached_approval(store, [_key()], ask)
    assert await with_cached_approval(store, [other], ask) == ReviewDecision.DENIED
    assert ask.asked == 2


def test_approval_key_includes_environment_id() -> None:
    assert _key().to_json()["environment_id"] == "env-a"
    store = ApprovalStore()
    store.put(_key(), ReviewDecision.APPROVED_FOR_SESSION)
    assert store.get(_key(environment_id="env-b")) is None


def test_approval_keys_include_environment_id() -> None:
    """apply_patch keys: one per file, scoped by environment."""
    store = ApprovalStore()
    store.put(PatchApprovalKey("env-a", "/w/f.txt"), ReviewDecision.APPROVED_FOR_SESSION)
    assert store.get(PatchApprovalKey("env-a", "/w/f.txt")) == ReviewDecision.APPROVED_FOR_SESSION
    assert store.get(PatchApprovalKey("env-b", "/w/f.txt")) is None


async def test_multi_key_calls_are_cached_only_when_every_key_is() -> None:
    store = ApprovalStore()
    a, b = PatchApprovalKey("e", "/a"), PatchApprovalKey("e", "/b")
    ask = Asker(ReviewDecision.APPROVED_FOR_SESSION, ReviewDecision.APPROVED)
    await with_cached_approval(store, [a], ask)
    assert await with_cached_approval(store, [a, b], ask) == ReviewDecision.APPROVED
    assert ask.asked == 2


async def test_no_keys_always_asks() -> None:
    store = ApprovalStore()
    ask = Asker(ReviewDecision.APPROVED_FOR_SESSION, ReviewDecision.APPROVED_FOR_SESSION)
    await with_cached_approval(store, [], ask)
    await with_cached_approval(store, [], ask)
    assert ask.asked == 2


async def test_session_approval_is_stored_under_each_key() -> None:
    store = ApprovalStore()
    a, b = PatchApprovalKey("e", "/a"), PatchApprovalKey("e", "/b")
    await with_cached_approval(store, [a, b], Asker(ReviewDecision.APPROVED_FOR_SESSION))
    assert store.get(a) == store.get(b) == ReviewDecision.APPROVED_FOR_SESSION


# --------------------------------------------------------------------------- router
class Recorder:
    def __init__(self, name: str, answer: ReviewDecision | None, log: list[str]) -> None:
        self.name, self.answer, self.log = name, answer, log

    async def __call__(self, request: ApprovalRequest) -> ReviewDecision:
        self.log.append(self.name)
        assert self.answer is not None
        return self.answer

    async def hook(self, request: ApprovalRequest) -> ReviewDecision | None:
        self.log.append(self.name)
        return self.answer


REQUEST = ApprovalRequest(tool_name="shell", environment_id="e")


async def test_router_asks_hooks_first_then_the_user() -> None:
    log: list[str] = []
    router = ApprovalRouter(
        Recorder("user", ReviewDecision.DENIED, log),
        hooks=[Recorder("hook", None, log).hook],
    )
    assert await router(REQUEST) == ReviewDecision.DENIED
    assert log == ["hook", "user"]


async def test_a_deciding_hook_answers_alone() -> None:
    log: list[str] = []
    router = ApprovalRouter(
        Recorder("user", ReviewDecision.DENIED, log),
        hooks=[Recorder("hook", ReviewDecision.APPROVED, log).hook],
    )
    assert await router(REQUEST) == ReviewDecision.APPROVED
    assert log == ["hook"]


async def test_auto_review_sends_prompts_to_the_reviewer() -> None:
    log: list[str] = []
    router = ApprovalRouter(
        Recorder("user", ReviewDecision.DENIED, log),
        reviewer=Recorder("guardian", ReviewDecision.APPROVED, log),
        auto_review=True,
    )
    assert await router(REQUEST) == ReviewDecision.APPROVED
    assert log == ["guardian"]


async def test_review_only_requests_never_reach_the_user() -> None:
    log: list[str] = []
    review_only = ApprovalRequest(tool_name="shell", environment_id="e", review_only=True)
    without_reviewer = ApprovalRouter(Recorder("user", ReviewDecision.DENIED, log))
    assert await without_reviewer(review_only) == ReviewDecision.APPROVED
    with_reviewer = ApprovalRouter(
        Recorder("user", ReviewDecision.APPROVED, log),
        reviewer=Recorder("guardian", ReviewDecision.DENIED, log),
    )
    assert await with_reviewer(review_only) == ReviewDecision.DENIED
    assert log == ["guardian"]


# --------------------------------------------------------------------------- hook payload
def test_bash_permission_request_payload_omits_missing_description() -> None:
    request = ApprovalRequest(
        tool_name="shell",
        environment_id="e",
        command=("/bin/sh", "-c", "rm -rf build"),
        hook_names=("Bash",),
    )
    assert permission_request_payload(request) == {
        "tool_name": "Bash",
        "tool_input": {"command": "/bin/sh -c 'rm -rf build'"},
    }


def test_bash_permission_request_payload_includes_description_when_present() -> None:
    request = ApprovalRequest(
        tool_name="shell",
        environment_id="e",
        command=("make", "clean"),
        hook_names=("Bash",),
        description="clean the build tree",
    )
    assert permission_request_payload(request) == {
        "tool_name": "Bash",
        "tool_input": {"command": "make clean", "description": "clean the build tree"},
    }
