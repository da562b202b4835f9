"""Property: a patch built from any line-level diff turns the old text into the
new one (parser and derive together, core-client.md §7.1, §7.3)."""

from __future__ import annotations

import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from execserver.core.apply_patch.derive import derive_new_contents
from execserver.core.apply_patch.hunks import UpdateFile
from execserver.core.apply_patch.parser import parse_patch

# Any text without line breaks; a few recurring lines make matches ambiguous.
LINE = st.one_of(
    st.sampled_from(["", "x", "  x", "x  ", "}", "*** End of File", "@@ y", "-", "+"]),
    st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12),
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
