"""The session's approval cache.

A key is serialised to canonical JSON and looked up exactly; it carries the
environment id, so a decision never leaks to another executor, and the
permissions asked for, so it never leaks to a wider permission set. Only
APPROVED_FOR_SESSION is ever stored.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from execserver.core.decisions import DecisionKind, ReviewDecision
from execserver.core.permissions import AdditionalPermissions
from execserver.core.policy import SandboxPermissions

__all__ = [
    "ApprovalKey",
    "ApprovalStore",
    "ExecApprovalKey",
    "PatchApprovalKey",
    "with_cached_approval",
]


class ApprovalKey(Protocol):
    def to_json(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class ExecApprovalKey:
    """One key per command call (unified exec, shell)."""

    environment_id: str
    command: tuple[str, ...]
    cwd: str
    tty: bool
    sandbox_permissions: SandboxPermissions = SandboxPermissions.USE_DEFAULT
    additional_permissions: AdditionalPermissions | None = None
    executable: str | None = None
    # Changes when the exec-policy rules change, so an approval given under one
    # rule set is not reused under another.
    exec_policy_fingerprint: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "environment_id": self.environment_id,
            "executable": self.executable,
            "command": list(self.command),
            "cwd": self.cwd,
            "tty": self.tty,
            "sandbox_permissions": self.sandbox_permissions.value,
            "additional_permissions": (
                None
                if self.additional_permissions is None
                else self.additional_permissions.to_json()
            ),
            "exec_policy_fingerprint": self.exec_policy_fingerprint,
        }


@dataclass(frozen=True)
class PatchApprovalKey:
    """One key per file a patch touches."""

    environment_id: str
    path: str

    def to_json(self) -> dict[str, object]:
        return {"environment_id": self.environment_id, "path": self.path}


def _serialise(key: ApprovalKey) -> str:
    body = {"kind": type(key).__name__, **key.to_json()}
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


class ApprovalStore:
    """One per session (thread): serialised key -> last session-wide decision."""

    def __init__(self) -> None:
        self._decisions: dict[str, ReviewDecision] = {}

    def get(self, key: ApprovalKey) -> ReviewDecision | None:
        return self._decisions.get(_serialise(key))

    def put(self, key: ApprovalKey, decision: ReviewDecision) -> None:
        if decision.kind is not DecisionKind.APPROVED_FOR_SESSION:
            raise ValueError("only APPROVED_FOR_SESSION is cached")
        self._decisions[_serialise(key)] = decision

    def __len__(self) -> int:
        return len(self._decisions)


async def with_cached_approval(
    store: ApprovalStore,
    keys: Sequence[ApprovalKey],
    ask: Callable[[], Awaitable[ReviewDecision]],
) -> ReviewDecision:
    """Answer from the cache when every key is approved for the session;
    otherwise ask, and cache a session approval under each key."""
    if keys and all(
        (cached := store.get(key)) is not None and cached.kind is DecisionKind.APPROVED_FOR_SESSION
        for key in keys
    ):
        return ReviewDecision.APPROVED_FOR_SESSION
    decision = await ask()
    if decision.kind is DecisionKind.APPROVED_FOR_SESSION:
        for key in keys:
            store.put(key, decision)
    return decision
