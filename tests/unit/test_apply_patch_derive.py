"""Deriving a file's new content, including the line-ending
behaviour recorded from the reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from execserver.core.apply_patch.derive import ComputeReplacementsError, derive_new_contents
from execserver.core.apply_patch.errors import PatchParseError
from execserver.core.apply_patch.hunks import UpdateFile
from execserver.core.apply_patch.parser import parse_patch

CASES = sorted((Path(__file__).parent.parent / "data" / "apply_patch" / "cases").glob("*.json"))


def _update(patch: str) -> UpdateFile:
    (hunk,) = parse_patch(patch).hunks
    assert isinstance(hunk, UpdateFile)
    return hunk


def _derive(original: str, body: str) -> str:
    hunk = _update(f"*** Begin Patch\n*** Update File: f\n{body}\n*** End Patch")
    return derive_new_contents(original, hunk.chunks, "/w/f")


def test_update_file_hunk_modifies_content() -> None:
    assert _derive("foo\nbar\n", "@@\n foo\n-bar\n+baz") == "foo\nbaz\n"


def test_multiple_update_chunks_apply_to_single_file() -> None:
    assert _derive("foo\nbar\nbaz\nqux\n", "@@\n foo\n-bar\n+BAR\n@@\n baz\n-qux\n+QUX") == (
        "foo\nBAR\nbaz\nQUX\n"
    )


def test_update_file_hunk_interleaved_changes() -> None:
    original = "a\nb\nc\nd\ne\nf\n"
    body = "@@\n a\n-b\n+B\n@@\n c\n d\n-e\n+E\n@@\n f\n+g\n*** End of File"
    assert _derive(original, body) == "a\nB\nc\nd\nE\nf\ng\n"


def test_context_lines_keep_the_file_text() -> None:
    assert _derive("    if x:\n        return 1\n", "@@\n if x:\n-return 1\n+  y") == (
        "    if x:\n  y\n"
    )


def test_added_lines_take_the_first_line_ending() -> None:
    assert _derive("a\r\nb\nc\n", "@@\n-b\n+B") == "a\r\nB\r\nc\n"
    assert _derive("a\nb\r\nc\n", "@@\n-c\n+C") == "a\nb\r\nC\n"


def test_missing_final_newline_is_added_with_the_file_ending() -> None:
    assert _derive("a\r\nb", "@@\n-a\n+A") == "A\r\nb\r\n"
    assert _derive("a\nb", "@@\n+c") == "a\nb\nc\n"


def test_failures_name_the_path_and_the_lines() -> None:
    with pytest.raises(ComputeReplacementsError) as info:
        _derive("x\n", "@@\n-a\n-b\n+c")
    assert str(info.value) == "Failed to find expected lines in /w/f:\na\nb"
    with pytest.raises(ComputeReplacementsError) as info:
        _derive("x\n", "@@ nowhere\n-x\n+y")
    assert str(info.value) == "Failed to find context 'nowhere' in /w/f"


def _single_update_cases() -> list[Path]:
    out = []
    for path in CASES:
        case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        try:
            hunks = parse_patch(case["patch"]).hunks
        except PatchParseError:  # covered by the parser tests
            continue
        if (
            len(hunks) == 1
            and isinstance(hunks[0], UpdateFile)
            and hunks[0].path in case["files"]
            and (hunks[0].move_path or hunks[0].path) in case["reference"]["files"]
            and "Failed to find" not in case["reference"]["stderr"]
            and case["reference"]["exit_code"] == 0
        ):
            out.append(path)
    return out


@pytest.mark.parametrize("case_path", _single_update_cases(), ids=lambda p: p.stem)
def test_derived_content_equals_the_reference_result(case_path: Path) -> None:
    case = json.loads(case_path.read_text(encoding="utf-8"))
    (hunk,) = parse_patch(case["patch"]).hunks
    assert isinstance(hunk, UpdateFile)
    new = derive_new_contents(case["files"][hunk.path], hunk.chunks, hunk.path)
    assert new == case["reference"]["files"][hunk.move_path or hunk.path]


def test_enough_corpus_cases_exercise_derive() -> None:
    assert len(_single_update_cases()) >= 30
