"""The one mock the suite allows: a scripted user answering approval prompts."""

from __future__ import annotations

from execserver.core.approvals import ApprovalRequest
from execserver.core.decisions import ReviewDecision


class ScriptedUser:
    """Stands in for the user: answers prompts in order and records them; a prompt
    beyond the script fails the test (nothing may ask more than expected)."""

    def __init__(self, *answers: ReviewDecision) -> None:
        self.answers = list(answers)
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ReviewDecision:
        self.requests.append(request)
        if not self.answers:
            raise AssertionError(f"unexpected approval request: {request}")
        return self.answers.pop(0)
