"""The reference's success summary: all adds, then all
updates (a move as its destination), then all deletes."""

from __future__ import annotations

from execserver.core.apply_patch.applier import AffectedPaths

__all__ = ["success_summary"]


def success_summary(affected: AffectedPaths) -> str:
    lines = ["Success. Updated the following files:"]
    lines += [f"A {p}" for p in affected.added]
    lines += [f"M {p}" for p in affected.modified]
    lines += [f"D {p}" for p in affected.deleted]
    return "\n".join(lines) + "\n"
