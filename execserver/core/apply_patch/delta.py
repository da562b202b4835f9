"""AppliedPatchDelta: what a patch run actually changed.

Changes are recorded as they land, so a run that fails half-way still reports
the files it did change; nothing is rolled back. ``exact``
turns False when the record may not describe the disk exactly (a failed
write that may have truncated a file, a path that was not a plain file, an
unreadable previous content).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AddChange", "AppliedPatchChange", "AppliedPatchDelta", "DeleteChange", "UpdateChange"]


@dataclass(frozen=True)
class AddChange:
    content: str
    # What the Add replaced, when the file already existed and was readable.
    overwritten_content: str | None = None


@dataclass(frozen=True)
class DeleteChange:
    content: str


@dataclass(frozen=True)
class UpdateChange:
    old_content: str
    new_content: str
    move_path: str | None = None
    # The destination's previous content, when a move overwrote a file.
    overwritten_move_content: str | None = None


@dataclass(frozen=True)
class AppliedPatchChange:
    path: str  # absolute path on the executor
    change: AddChange | DeleteChange | UpdateChange


@dataclass
class AppliedPatchDelta:
    changes: list[AppliedPatchChange] = field(default_factory=list)
    exact: bool = True

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
