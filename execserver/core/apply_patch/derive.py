"""New contents of an updated file.

Each line is kept with its own ending. A file's lines end in ``\r\n``, ``\n``
or a lone ``\r`` (classic Mac): the reference splits on all three, so a lone
CR inside what an editor shows as one line starts a new line here too. Lines
the patch leaves alone - context lines included, even when they matched only
loosely - keep their exact text and ending; lines the patch adds take the
file's line ending, which the reference reads off the file's first line
ending. The result always ends with a line ending.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from execserver.core.apply_patch.errors import ApplyPatchError
from execserver.core.apply_patch.hunks import ChunkLine, LineKind, UpdateChunk
from execserver.core.apply_patch.seek import seek_sequence

__all__ = ["ComputeReplacementsError", "derive_new_contents"]


class ComputeReplacementsError(ApplyPatchError):
    """A context anchor or the old lines of a chunk are not in the file."""


class _Line(NamedTuple):
    text: str
    ending: str  # "\n", "\r\n", "\r" or "" (last line without one)


# CRLF first, so a CR right before an LF is not taken as a line of its own.
_LINE = re.compile(r"([^\r\n]*)(\r\n|\r|\n)")


def _split(contents: str) -> list[_Line]:
    out: list[_Line] = []
    end = 0
    for match in _LINE.finditer(contents):
        out.append(_Line(match[1], match[2]))
        end = match.end()
    if end < len(contents):
        out.append(_Line(contents[end:], ""))
    return out


def _eol(lines: Sequence[_Line]) -> str:
    for line in lines:
        if line.ending:
            return line.ending
    return "\n"


class _Replacement(NamedTuple):
    start: int
    old_len: int
    body: tuple[ChunkLine, ...]


def _without_trailing_empty(chunk: UpdateChunk) -> tuple[ChunkLine, ...]:
    """The chunk minus the empty line that stands for the file's final newline:
    the last old line, and the last new line if it is empty too."""
    body = list(chunk.lines)
    old_at = max(i for i, line in enumerate(body) if line.kind is not LineKind.ADDED)
    new_at = [i for i, line in enumerate(body) if line.kind is not LineKind.REMOVED]
    drop = {old_at}
    if new_at and body[new_at[-1]].text == "":
        drop.add(new_at[-1])
    return tuple(line for i, line in enumerate(body) if i not in drop)


def _replacements(
    lines: Sequence[str], chunks: Sequence[UpdateChunk], path: str
) -> list[_Replacement]:
    out: list[_Replacement] = []
    cursor = 0
    for chunk in chunks:
        if chunk.context is not None:
            hit = seek_sequence(lines, [chunk.context], cursor, False)
            if hit is None:
                raise ComputeReplacementsError(
                    f"Failed to find context '{chunk.context}' in {path}"
                )
            cursor = hit + 1
        old = chunk.old_lines
        if not old:
            out.append(_Replacement(len(lines), 0, chunk.lines))
            continue
        body = chunk.lines
        found = seek_sequence(lines, old, cursor, chunk.end_of_file)
        if found is None and old[-1] == "":
            body = _without_trailing_empty(chunk)
            old = old[:-1]
            found = seek_sequence(lines, old, cursor, chunk.end_of_file)
        if found is None:
            joined = "\n".join(chunk.old_lines)
            raise ComputeReplacementsError(f"Failed to find expected lines in {path}:\n{joined}")
        out.append(_Replacement(found, len(old), body))
        cursor = found + len(old)
    out.sort(key=lambda r: r.start)
    return out


def derive_new_contents(original: str, chunks: Sequence[UpdateChunk], path: str) -> str:
    """Apply ``chunks`` to ``original``; ``path`` only names the file in errors."""
    lines = _split(original)
    eol = _eol(lines)
    result = list(lines)
    for rep in reversed(_replacements([line.text for line in lines], chunks, path)):
        region = iter(lines[rep.start : rep.start + rep.old_len])
        new: list[_Line] = []
        for item in rep.body:
            if item.kind is LineKind.ADDED:
                new.append(_Line(item.text, eol))
                continue
            kept = next(region)
            if item.kind is LineKind.CONTEXT:
                new.append(kept)
        result[rep.start : rep.start + rep.old_len] = new
    return "".join(line.text + (line.ending or eol) for line in result)
