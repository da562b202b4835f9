"""AppliedPatchDelta: what a patch run actually changed.

Changes are recorded as they land, so a run that fails half-way still reports
the files it did change; nothing is rolled back. ``exact``
turns False when the record may not describe the disk exactly (a failed
write that may have truncated a file, a path that was not a plain file, an
unreadable previous content).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["AddChange", "AppliedPatchChange", "AppliedPatchDelta", "DeleteChange", "UpdateChange"]


class AddChange(NamedTuple):
    content: str
    # What the Add replaced, when the file already existed and was readable.
    overwritten_content: str | None = None


class DeleteChange(NamedTuple):
    content: str


class UpdateChange(NamedTuple):
    old_content: str
    new_content: str
    move_path: str | None = None
    # The destination's previous content, when a move overwrote a file.
    overwritten_move_content: str | None = None


class AppliedPatchChange(NamedTuple):
    path: str  # absolute path on the executor
    change: AddChange | DeleteChange | UpdateChange


class AppliedPatchDelta:
    """The changes that landed, in order (mutable: a run records as it goes).
    A plain class for the import-time reason given in ``hunks.py``."""

    __slots__ = ("changes", "exact")

    def __init__(self, changes: list[AppliedPatchChange] | None = None, exact: bool = True) -> None:
        self.changes: list[AppliedPatchChange] = [] if changes is None else changes
        self.exact = exact

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AppliedPatchDelta):
            return NotImplemented
        return (self.changes, self.exact) == (other.changes, other.exact)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def __repr__(self) -> str:
        return f"AppliedPatchDelta(changes={self.changes!r}, exact={self.exact!r})"

    def append(self, other: AppliedPatchDelta) -> None:
        self.changes.extend(other.changes)
        self.exact = self.exact and other.exact

    def record(self, path: str, change: AddChange | DeleteChange | UpdateChange) -> int:
        self.changes.append(AppliedPatchChange(path, change))
        return len(self.changes) - 1

    def replace(
        self, index: int, path: str, change: AddChange | DeleteChange | UpdateChange
    ) -> None:
        self.changes[index] = AppliedPatchChange(path, change)

    @property
    def is_empty(self) -> bool:
        return not self.changes
