"""How a tool call fails.

Only :class:`SandboxDenied` can lead to a second attempt; everything else is
final. The orchestrator raises these; callers present them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ExecFailed",
    "NetworkPolicyDecisionPayload",
    "Rejected",
    "SandboxDenied",
    "SandboxError",
    "SandboxSignal",
    "SandboxTimeout",
    "ToolError",
    "TurnAborted",
]


class ToolError(Exception):
    """Base of every failure of a tool call."""


class Rejected(ToolError):
    """Approval said no, or policy forbids the call. Never retried."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TurnAborted(ToolError):
    """The user aborted the turn while being asked; there is no tool output."""


class ExecFailed(ToolError):
    """Any other failure (executor unreachable, start refused, ...). Final."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SandboxError(ToolError):
    """A failure attributed to the sandboxed execution."""


@dataclass(frozen=True)
class NetworkPolicyDecisionPayload:
    """What the network policy said about the request that was blocked (the
    proxy's decision record, shaped like ``network/policyDecision``)."""

    decision: str  # "allow" | "deny" | "ask"
    source: str  # "decider" | "baseline_policy" | ...
    host: str | None = None
    protocol: str | None = None
    port: int | None = None
    reason: str | None = None


class SandboxDenied(SandboxError):
    """The executor said the sandbox stopped the command (``sandboxDenied``), or a
    runtime classified its failure so. ``output`` is the text the caller shows
    when no retry happens."""

    def __init__(
        self,
        output: str,
        *,
        exit_code: int | None = None,
        network_policy_decision: NetworkPolicyDecisionPayload | None = None,
    ) -> None:
        super().__init__(output)
        self.output = output
        self.exit_code = exit_code
        self.network_policy_decision = network_policy_decision


class SandboxTimeout(SandboxError):
    def __init__(self, output: str = "") -> None:
        super().__init__(output or "command timed out")
        self.output = output


class SandboxSignal(SandboxError):
    def __init__(self, signal: int) -> None:
        super().__init__(f"command was killed by signal {signal}")
        self.signal = signal
