"""Words in a failed sandboxed command's output that mark it as a sandbox denial.

The executor uses them to set ``sandboxDenied`` on ``process/exited``; the
orchestrator's apply_patch runtime uses the same list to classify a failed
patch attempt. One list, so the two sides cannot disagree about what a
denial looks like. Matching is case-insensitive (callers lower-case first).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DENIAL_KEYWORDS", "mentions_sandbox_denial"]

DENIAL_KEYWORDS: Final = (
    "operation not permitted",
    "permission denied",
    "read-only file system",
    "seccomp",
    "sandbox",
    "landlock",
    "failed to write file",
)


def mentions_sandbox_denial(text: str) -> bool:
    """Whether ``text`` contains one of :data:`DENIAL_KEYWORDS`, in any case."""
    lowered = text.lower()
    return any(keyword in lowered for keyword in DENIAL_KEYWORDS)
