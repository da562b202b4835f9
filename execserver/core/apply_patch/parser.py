"""Patch text -> hunks, with the reference's leniency.

Markers are compared after trimming, a heredoc wrapper (``<<'EOF'`` ...
``EOF``) is taken off, the first update chunk may omit ``@@``, and an empty
line inside a chunk is an empty context line. Line numbers in errors count
from the ``*** Begin Patch`` line as 1, like the reference's.
"""

from __future__ import annotations

from collections.abc import Sequence

from execserver.core.apply_patch.errors import InvalidHunk, InvalidPatch
from execserver.core.apply_patch.hunks import (
    AddFile,
    ChunkLine,
    DeleteFile,
    Hunk,
    LineKind,
    ParsedPatch,
    UpdateChunk,
    UpdateFile,
)
from execserver.core.apply_patch.text import patch_lines, rust_trim, rust_trim_end

__all__ = ["parse_patch"]

BEGIN_PATCH = "*** Begin Patch"
END_PATCH = "*** End Patch"
ADD_FILE = "*** Add File: "
DELETE_FILE = "*** Delete File: "
UPDATE_FILE = "*** Update File: "
MOVE_TO = "*** Move to: "
END_OF_FILE = "*** End of File"
CONTEXT_MARKER = "@@ "
EMPTY_CONTEXT_MARKER = "@@"
HEREDOC_OPENERS = ("<<EOF", "<<'EOF'", '<<"EOF"')

NO_LINES = "Update hunk does not contain any lines"


def parse_patch(text: str) -> ParsedPatch:
    """Parse a whole patch; raises :class:`PatchParseError` subclasses."""
    lines = patch_lines(rust_trim(text))
    body = _strip_boundaries(lines)
    hunks: list[Hunk] = []
    line_number = 2
    remaining: Sequence[str] = body[1:-1]
    while remaining:
        hunk, used = _parse_hunk(remaining, line_number)
        hunks.append(hunk)
        line_number += used
        remaining = remaining[used:]
    return ParsedPatch(tuple(hunks), "\n".join(body))


def _strip_boundaries(lines: list[str]) -> list[str]:
    """The patch lines from Begin to End; a heredoc wrapper is allowed around
    them (models send ``["apply_patch", "<<'EOF'\\n...\\nEOF"]``)."""
    try:
        _check_boundaries(lines)
        return lines
    except InvalidPatch:
        if len(lines) >= 4 and lines[0] in HEREDOC_OPENERS and lines[-1].endswith("EOF"):
            inner = lines[1:-1]
            _check_boundaries(inner)
            return inner
        raise


def _check_boundaries(lines: Sequence[str]) -> None:
    first = rust_trim(lines[0]) if lines else None
    last = rust_trim(lines[-1]) if lines else None
    if first == BEGIN_PATCH and last == END_PATCH:
        return
    if first is not None and first != BEGIN_PATCH:
        raise InvalidPatch("The first line of the patch must be '*** Begin Patch'")
    raise InvalidPatch("The last line of the patch must be '*** End Patch'")


def _parse_hunk(lines: Sequence[str], line_number: int) -> tuple[Hunk, int]:
    header = rust_trim(lines[0])
    if header.startswith(ADD_FILE):
        contents: list[str] = []
        used = 1
        for line in lines[1:]:
            if not line.startswith("+"):
                break
            contents.append(line[1:] + "\n")
            used += 1
        return AddFile(header[len(ADD_FILE) :], "".join(contents)), used
    if header.startswith(DELETE_FILE):
        return DeleteFile(header[len(DELETE_FILE) :]), 1
    if header.startswith(UPDATE_FILE):
        return _parse_update(header[len(UPDATE_FILE) :], lines, line_number)
    raise InvalidHunk(
        f"'{header}' is not a valid hunk header. Valid hunk headers: "
        "'*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'",
        line_number,
    )


def _parse_update(path: str, lines: Sequence[str], line_number: int) -> tuple[Hunk, int]:
    remaining = lines[1:]
    used = 1
    move_path: str | None = None
    # The Move line is matched untrimmed, unlike the hunk header.
    if remaining and remaining[0].startswith(MOVE_TO):
        move_path = remaining[0][len(MOVE_TO) :]
        remaining = remaining[1:]
        used += 1
    chunks: list[UpdateChunk] = []
    while remaining and not remaining[0].startswith("*"):
        chunk, chunk_used = _parse_chunk(remaining, line_number + used, first=not chunks)
        chunks.append(chunk)
        used += chunk_used
        remaining = remaining[chunk_used:]
    if not chunks:
        raise InvalidHunk(f"Update file hunk for path '{path}' is empty", line_number)
    return UpdateFile(path, move_path, tuple(chunks)), used


def _parse_chunk(lines: Sequence[str], line_number: int, *, first: bool) -> tuple[UpdateChunk, int]:
    head = lines[0]
    context: str | None = None
    start = 1
    # Trailing whitespace after the markers is tolerated, leading whitespace
    # is not (an indented "@@" is a context line), as in the reference.
    if rust_trim_end(head) == EMPTY_CONTEXT_MARKER:
        pass
    elif head.startswith(CONTEXT_MARKER):
        context = head[len(CONTEXT_MARKER) :]
    elif first:
        start = 0
    else:
        raise InvalidHunk(
            f"Expected update hunk to start with a @@ context marker, got: '{head}'",
            line_number,
        )
    if start >= len(lines):
        raise InvalidHunk(NO_LINES, line_number + 1)
    body: list[ChunkLine] = []
    end_of_file = False
    used = 0
    for line in lines[start:]:
        if rust_trim_end(line) == END_OF_FILE:
            if used == 0:
                raise InvalidHunk(NO_LINES, line_number + 1)
            end_of_file = True
            used += 1
            break
        if line == "":
            body.append(ChunkLine(LineKind.CONTEXT, ""))
        elif line[0] in " +-":
            body.append(ChunkLine(LineKind(line[0]), line[1:]))
        elif used == 0:
            raise InvalidHunk(
                f"Unexpected line found in update hunk: '{line}'. Every line should start "
                "with ' ' (context line), '+' (added line), or '-' (removed line)",
                line_number + 1,
            )
        else:
            break  # the next chunk (``@@``) or something the caller rejects
        used += 1
    return UpdateChunk(context, tuple(body), end_of_file), used + start
