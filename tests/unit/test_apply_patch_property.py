"""Property: a patch built from any line-level diff turns the old text into the
new one (parser and derive together)."""

from __future__ import annotations

import difflib
from typing import Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from execserver.core.apply_patch.derive import derive_new_contents
from execserver.core.apply_patch.hunks import UpdateFile
from execserver.core.apply_patch.parser import parse_patch

SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
# Any text without line breaks; a few recurring lines make matches ambiguous.
LINE = st.one_of(
    st.sampled_from(["", "x", "  x", "x  ", "}", "*** End of File", "@@ y", "-", "+"]),
    st.text(
        st.characters(blacklist_characters="\r\n", blacklist_categories=SURROGATES), max_size=12
    ),
)
LINES = st.lists(LINE, max_size=12)


def _patch(old: list[str], new: list[str]) -> str:
    body: list[str] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            body += [" " + line for line in old[i1:i2]]
        else:
            body += ["-" + line for line in old[i1:i2]]
            body += ["+" + line for line in new[j1:j2]]
    return "\n".join(["*** Begin Patch", "*** Update File: f", "@@", *body, "*** End Patch"])


@settings(max_examples=300, deadline=None)
@given(old=LINES, new=LINES)
def test_a_full_context_patch_turns_old_into_new(old: list[str], new: list[str]) -> None:
    if not old and not new:
        return
    (hunk,) = parse_patch(_patch(old, new)).hunks
    assert isinstance(hunk, UpdateFile)
    original = "".join(line + "\n" for line in old)
    assert derive_new_contents(original, hunk.chunks, "/f") == "".join(line + "\n" for line in new)


@settings(max_examples=300, deadline=None)
@given(old=LINES, new=LINES, data=st.data())
def test_the_same_diff_split_into_chunks_gives_the_same_result(
    old: list[str], new: list[str], data: st.DataObject
) -> None:
    """Chunks are matched in order from a moving cursor; splitting a diff at
    points where every piece keeps an old line must not change the result."""
    body = _patch(old, new).split("\n")[3:-1]
    if not body:
        return
    # A piece of only "+" lines would be a pure addition (appended at the end).
    cuts = [i for i in range(1, len(body)) if body[i][0] != "+"]
    chosen = sorted(data.draw(st.sets(st.sampled_from(cuts), max_size=4)) if cuts else [])
    pieces, start = [], 0
    for cut in [*chosen, len(body)]:
        pieces.append(body[start:cut])
        start = cut
    if any(all(line.startswith("+") for line in piece) for piece in pieces):
        return
    chunked = ["*** Begin Patch", "*** Update File: f"]
    for piece in pieces:
        chunked += ["@@", *piece]
    chunked.append("*** End Patch")
    (hunk,) = parse_patch("\n".join(chunked)).hunks
    assert isinstance(hunk, UpdateFile)
    original = "".join(line + "\n" for line in old)
    assert derive_new_contents(original, hunk.chunks, "/f") == "".join(line + "\n" for line in new)


# A line ending of each style; the last line of a file may have none.
ENDING = st.sampled_from(["\n", "\r\n", "\r"])
ENDED_LINES = st.lists(st.tuples(LINE, ENDING), max_size=12)


def _file(lines: list[tuple[str, str]]) -> str:
    return "".join(text + ending for text, ending in lines)


@settings(max_examples=400, deadline=None)
@given(
    old=ENDED_LINES,
    unterminated_last=st.booleans(),
    new=LINES,
    patch_newline=st.sampled_from(["\n", "\r\n"]),
)
def test_a_diff_patch_is_byte_exact_on_files_mixing_cr_lf_and_crlf(
    old: list[tuple[str, str]], unterminated_last: bool, new: list[str], patch_newline: str
) -> None:
    """Lines the diff keeps keep their own ending byte for byte; lines it adds
    take the file's first line ending (LF for a file without one); a last line
    without an ending gets that ending too - as the reference writes them."""
    if unterminated_last and old and old[-1][0]:
        old[-1] = (old[-1][0], "")
    # A CR ending followed by an empty LF line is a CRLF ending on disk: give
    # such an empty line a CRLF so the file says what the list says.
    for i in range(1, len(old)):
        if old[i - 1][1] == "\r" and old[i] == ("", "\n"):
            old[i] = ("", "\r\n")
    texts = [text for text, _ in old]
    if not texts and not new:
        return
    eol = next((ending for _, ending in old if ending), "\n")
    expected: list[str] = []
    matcher = difflib.SequenceMatcher(a=texts, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            expected += [text + (ending or eol) for text, ending in old[i1:i2]]
        else:
            expected += [text + eol for text in new[j1:j2]]
    patch = _patch(texts, new).replace("\n", patch_newline)
    (hunk,) = parse_patch(patch).hunks
    assert isinstance(hunk, UpdateFile)
    result = derive_new_contents(_file(old), hunk.chunks, "/f")
    assert result.encode("utf-8") == "".join(expected).encode("utf-8")
