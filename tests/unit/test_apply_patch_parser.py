"""The patch parser (cases ported from the Codex apply-patch parser tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from execserver.core.apply_patch.errors import InvalidHunk, InvalidPatch, PatchParseError
from execserver.core.apply_patch.hunks import (
    AddFile,
    ChunkLine,
    DeleteFile,
    LineKind,
    UpdateChunk,
    UpdateFile,
    resolve,
)
from execserver.core.apply_patch.parser import parse_patch
from execserver.core.apply_patch.text import rust_lines, rust_trim

CASES = sorted((Path(__file__).parent.parent / "data" / "apply_patch" / "cases").glob("*.json"))

C, R, A = LineKind.CONTEXT, LineKind.REMOVED, LineKind.ADDED


def chunk(
    *lines: tuple[LineKind, str], context: str | None = None, eof: bool = False
) -> UpdateChunk:
    return UpdateChunk(context, tuple(ChunkLine(k, t) for k, t in lines), eof)


def test_parse_patch_boundary_errors() -> None:
    with pytest.raises(InvalidPatch) as info:
        parse_patch("bad")
    assert str(info.value) == "Invalid patch: The first line of the patch must be '*** Begin Patch'"
    with pytest.raises(InvalidPatch) as info:
        parse_patch("*** Begin Patch\nbad")
    assert str(info.value) == "Invalid patch: The last line of the patch must be '*** End Patch'"
    with pytest.raises(InvalidPatch) as info:
        parse_patch("")
    assert info.value.message == "The last line of the patch must be '*** End Patch'"


def test_parse_patch_each_hunk_kind() -> None:
    parsed = parse_patch(
        "*** Begin Patch\n"
        "*** Add File: path/add.py\n+abc\n+def\n"
        "*** Delete File: path/delete.py\n"
        "*** Update File: path/update.py\n*** Move to: path/update2.py\n"
        "@@ def f():\n-    pass\n+    return 123\n"
        "*** End Patch"
    )
    assert parsed.hunks == (
        AddFile("path/add.py", "abc\ndef\n"),
        DeleteFile("path/delete.py"),
        UpdateFile(
            "path/update.py",
            "path/update2.py",
            (chunk((R, "    pass"), (A, "    return 123"), context="def f():"),),
        ),
    )


def test_parse_patch_empty_update_hunk_and_empty_patch() -> None:
    with pytest.raises(InvalidHunk) as info:
        parse_patch("*** Begin Patch\n*** Update File: test.py\n*** End Patch")
    assert (info.value.line_number, info.value.message) == (
        2,
        "Update file hunk for path 'test.py' is empty",
    )
    assert parse_patch("*** Begin Patch\n*** End Patch").hunks == ()


def test_update_hunk_followed_by_another_hunk() -> None:
    parsed = parse_patch(
        "*** Begin Patch\n*** Update File: file.py\n@@\n+line\n"
        "*** Add File: other.py\n+content\n*** End Patch"
    )
    assert parsed.hunks == (
        UpdateFile("file.py", None, (chunk((A, "line")),)),
        AddFile("other.py", "content\n"),
    )


def test_first_chunk_may_omit_the_context_marker() -> None:
    parsed = parse_patch(
        "*** Begin Patch\n*** Update File: file2.py\n import foo\n+bar\n*** End Patch"
    )
    (hunk,) = parsed.hunks
    assert isinstance(hunk, UpdateFile)
    assert hunk.chunks == (chunk((C, "import foo"), (A, "bar")),)
    assert hunk.chunks[0].old_lines == ["import foo"]
    assert hunk.chunks[0].new_lines == ["import foo", "bar"]


def test_update_file_chunk_markers() -> None:
    parsed = parse_patch(
        "*** Begin Patch\n*** Update File: f\n"
        "@@\n a\n-b\n+B\n"
        "@@ class X:\n\n-c\n*** End of File\n"
        "*** End Patch"
    )
    (hunk,) = parsed.hunks
    assert isinstance(hunk, UpdateFile)
    assert hunk.chunks == (
        chunk((C, "a"), (R, "b"), (A, "B")),
        chunk((C, ""), (R, "c"), context="class X:", eof=True),
    )


@pytest.mark.parametrize(
    ("patch", "line", "message"),
    [
        (
            "*** Begin Patch\n*** Update File: f\n@@\n*** End Patch",
            4,
            "Update hunk does not contain any lines",
        ),
        (
            "*** Begin Patch\n*** Update File: f\n@@\n*** End of File\n*** End Patch",
            4,
            "Update hunk does not contain any lines",
        ),
        (
            "*** Begin Patch\n*** Update File: f\n@@\nbad\n*** End Patch",
            4,
            "Unexpected line found in update hunk: 'bad'. Every line should start with ' ' "
            "(context line), '+' (added line), or '-' (removed line)",
        ),
        (
            "*** Begin Patch\n*** Update File: f\n@@\n-a\nbad\n*** End Patch",
            5,
            "Expected update hunk to start with a @@ context marker, got: 'bad'",
        ),
        (
            "*** Begin Patch\n*** Frob: f\n*** End Patch",
            2,
            "'*** Frob: f' is not a valid hunk header. Valid hunk headers: "
            "'*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'",
        ),
    ],
)
def test_parse_one_hunk_errors(patch: str, line: int, message: str) -> None:
    with pytest.raises(InvalidHunk) as info:
        parse_patch(patch)
    assert (info.value.line_number, info.value.message) == (line, message)
    assert str(info.value) == f"Invalid patch hunk on line {line}: {message}"


@pytest.mark.parametrize("opener", ["<<EOF", "<<'EOF'", '<<"EOF"'])
def test_parse_patch_lenient_heredoc_forms(opener: str) -> None:
    body = "*** Begin Patch\n*** Add File: x\n+y\n*** End Patch"
    parsed = parse_patch(f"{opener}\n{body}\nEOF\n")
    assert parsed.hunks == (AddFile("x", "y\n"),)
    assert parsed.patch == body


def test_heredoc_needs_the_closing_marker() -> None:
    with pytest.raises(InvalidPatch):
        parse_patch("<<'EOF'\n*** Begin Patch\n*** Add File: x\n+y\n*** End Patch\nEND")


def test_parse_patch_accepts_relative_and_absolute_hunk_paths() -> None:
    parsed = parse_patch(
        "*** Begin Patch\n*** Add File: rel.txt\n+r\n*** Delete File: /abs/del.txt\n*** End Patch"
    )
    assert [h.path for h in parsed.hunks] == ["rel.txt", "/abs/del.txt"]


def test_hunk_resolve_path_accepts_relative_and_absolute_paths() -> None:
    assert resolve("a/b.txt", "/work") == "/work/a/b.txt"
    assert resolve("/etc/x", "/work") == "/etc/x"
    # Normalised lexically, as the reference prints them (corpus 106, 107).
    assert resolve("./a/../b//c.txt", "/work") == "/work/b/c.txt"
    assert resolve("//x/./y", "/work") == "/x/y"


def test_rust_lines_and_trim_match_the_reference_helpers() -> None:
    assert rust_lines("a\r\nb\n\nc") == ["a", "b", "", "c"]
    assert rust_lines("a\n") == ["a"]
    assert rust_lines("a\x0bb\u2028c") == ["a\x0bb\u2028c"]  # not line breaks to Rust
    assert rust_trim("\u00a0 x\x1c ") == "x\x1c"  # \x1c is not Rust whitespace


@pytest.mark.parametrize("case_path", CASES, ids=[p.stem for p in CASES])
def test_parser_agrees_with_the_reference_on_every_corpus_case(case_path: Path) -> None:
    """Cases the reference rejected while parsing fail with its exact message;
    every other case parses."""
    case = json.loads(case_path.read_text(encoding="utf-8"))
    stderr: str = case["reference"]["stderr"]
    if stderr.startswith("Invalid patch"):
        with pytest.raises(PatchParseError) as info:
            parse_patch(case["patch"])
        assert f"{info.value}\n" == stderr
    else:
        parse_patch(case["patch"])
