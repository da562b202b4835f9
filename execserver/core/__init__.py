"""The core side: deciding whether and how a tool call runs on an executor.

Policy half:

* ``policy`` — AskForApproval, SandboxPermissions, ExecApprovalRequirement and
  the default requirement rules; ``exec_policy`` — the unmatched-command
  heuristics for shell commands.
* ``permissions`` — permission profiles (wire <-> model), additional
  permissions, deny-read.
* ``decisions`` / ``approvals`` / ``approval_cache`` — ReviewDecision, the
  injected approver and its router, the session's approval cache.
* ``environment`` / ``attempt`` — where a call runs and how one attempt runs
  (host sandbox NONE for remote, the context iff the sandbox is requested).
* ``runtime`` / ``orchestrator`` / ``retry_gates`` — the ToolRuntime contract
  and ToolOrchestrator.run with the reference's retry gates.
* ``network_context`` / ``network_approval`` — network approval contexts,
  registrations, dedupe, host caches, deferred approvals.
* ``command_runtime`` — the approval logic every command runtime shares;
  ``shell_runtime`` — a one-shot command runtime over ExecServerClient.

Runtimes: ``unified_exec`` (exec_command / write_stdin) and ``apply_patch``.
Nothing here imports ``execserver.server``.

``TurnContext`` (defined in ``runtime``) is imported from here:
``from execserver.core import TurnContext``. docs/core.md shows the core in use.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from execserver.core.runtime import TurnContext as TurnContext

__all__ = ["TurnContext"]


def __getattr__(name: str) -> Any:
    # Resolved on first use: importing one submodule (the one-shot
    # ``execserver patch`` loads apply_patch's) must not load the orchestrator.
    if name == "TurnContext":
        from execserver.core.runtime import TurnContext

        return TurnContext
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
