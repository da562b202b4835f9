"""Finding a chunk's old lines in a file.

Passes run from strict to loose and the first hit wins, so an exact match
later in the file beats a whitespace-tolerant one earlier.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from execserver.core.apply_patch.text import rust_trim, rust_trim_end

__all__ = ["normalise_punctuation", "seek_sequence"]

_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys(
            "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000",
            " ",
        ),
    }
)


def normalise_punctuation(text: str) -> str:
    """Trimmed, with typographic dashes, quotes and spaces made ASCII."""
    return rust_trim(text).translate(_PUNCTUATION)


def _identity(text: str) -> str:
    return text


_PASSES: tuple[Callable[[str], str], ...] = (
    _identity,
    rust_trim_end,
    rust_trim,
    normalise_punctuation,
)


def seek_sequence(
    lines: Sequence[str], pattern: Sequence[str], start: int, end_of_file: bool
) -> int | None:
    """Index where ``pattern`` occurs in ``lines`` at or after ``start``.

    With ``end_of_file`` only the position that ends at the last line is
    tried: the reference does not fall back to an earlier occurrence.
    """
    if not pattern:
        return start
    if len(pattern) > len(lines):
        return None
    last = len(lines) - len(pattern)
    first = last if end_of_file else start
    for norm in _PASSES:
        wanted = [norm(p) for p in pattern]
        for i in range(first, last + 1):
            if all(norm(lines[i + k]) == wanted[k] for k in range(len(wanted))):
                return i
    return None
