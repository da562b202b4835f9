"""``sandboxDenied``: did a sandboxed command most likely fail because of the sandbox?

The reference's heuristic (checked against 16 observed
outcomes), in its order: success is never a denial; a denial keyword anywhere
in the retained output wins, even for exit 2/126/127; otherwise 2/126/127
(usage error, not executable, not found) are not denials; 159 (128+SIGSYS, a
seccomp kill) is. Only call this for processes that ran with a ``sandbox``:
unsandboxed processes always report false.
"""

from __future__ import annotations

from typing import Final

from execserver.wire.sandbox_denial import mentions_sandbox_denial

__all__ = ["is_sandbox_denied"]

_QUICK_REJECT: Final = frozenset({2, 126, 127})
_SIGSYS_EXIT: Final = 128 + 31


def is_sandbox_denied(exit_code: int, output: bytes) -> bool:
    """``output``: the retained tail of stdout+stderr (or the pty stream)."""
    if exit_code == 0:
        return False
    if mentions_sandbox_denial(output.decode("utf-8", errors="replace")):
        return True
    if exit_code in _QUICK_REJECT:
        return False
    return exit_code == _SIGSYS_EXIT
