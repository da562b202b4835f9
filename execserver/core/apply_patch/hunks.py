"""What a parsed patch is made of.

The value types are ``NamedTuple``s, not frozen dataclasses: the one-shot
``execserver patch`` imports this at every run, and on a 2-vCPU machine
``dataclasses`` costs ~8 ms to import and ~1 ms per frozen class to build
(~12 of them across the engine), a NamedTuple ~0.1 ms."""

from __future__ import annotations

import enum
import posixpath
from typing import NamedTuple

__all__ = [
    "AddFile",
    "ChunkLine",
    "DeleteFile",
    "Hunk",
    "LineKind",
    "ParsedPatch",
    "UpdateChunk",
    "UpdateFile",
    "resolve",
]


class LineKind(enum.Enum):
    CONTEXT = " "
    REMOVED = "-"
    ADDED = "+"


class ChunkLine(NamedTuple):
    kind: LineKind
    text: str


class UpdateChunk(NamedTuple):
    """One ``@@`` section. The lines keep their kinds in order because the
    reference keeps the file's own text for context lines and only replaces
    removed lines (a loosely matched context line is left as it was)."""

    context: str | None
    lines: tuple[ChunkLine, ...]
    end_of_file: bool = False

    @property
    def old_lines(self) -> list[str]:
        return [line.text for line in self.lines if line.kind is not LineKind.ADDED]

    @property
    def new_lines(self) -> list[str]:
        return [line.text for line in self.lines if line.kind is not LineKind.REMOVED]


class AddFile(NamedTuple):
    path: str
    contents: str


class DeleteFile(NamedTuple):
    path: str


class UpdateFile(NamedTuple):
    path: str
    move_path: str | None
    chunks: tuple[UpdateChunk, ...]


Hunk = AddFile | DeleteFile | UpdateFile


class ParsedPatch(NamedTuple):
    hunks: tuple[Hunk, ...]
    # The patch text without a heredoc wrapper, as it would be passed to
    # `apply_patch` directly.
    patch: str
    # `cd DIR &&` in front of a shell invocation: relative paths resolve there.
    workdir: str | None = None


def resolve(path: str, cwd: str) -> str:
    """The absolute path a hunk touches: joined onto the cwd and normalised
    lexically (``.``, ``..``, doubled slashes), as the reference resolves and
    prints it. Symlinks are not resolved here."""
    joined = posixpath.normpath(posixpath.join(cwd, path))
    # POSIX keeps a leading "//"; the reference does not.
    return "/" + joined.lstrip("/")
