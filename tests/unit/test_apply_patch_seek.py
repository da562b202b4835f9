"""seek_sequence (cases ported from the Codex seek tests)."""

from __future__ import annotations

from execserver.core.apply_patch.seek import normalise_punctuation, seek_sequence


def test_exact_match_finds_sequence() -> None:
    assert seek_sequence(["foo", "bar", "baz"], ["bar", "baz"], 0, False) == 1


def test_rstrip_match_ignores_trailing_whitespace() -> None:
    assert seek_sequence(["foo   ", "bar\t\t"], ["foo", "bar"], 0, False) == 0


def test_trim_match_ignores_leading_and_trailing_whitespace() -> None:
    assert seek_sequence(["    foo   ", "   bar\t"], ["foo", "bar"], 0, False) == 0


def test_pattern_longer_than_input_returns_none() -> None:
    assert seek_sequence(["just one line"], ["too", "many", "lines"], 0, False) is None


def test_empty_pattern_matches_at_start() -> None:
    assert seek_sequence(["a"], [], 1, False) == 1


def test_search_starts_at_the_cursor() -> None:
    assert seek_sequence(["x", "y", "x"], ["x"], 1, False) == 2


def test_exact_pass_wins_over_an_earlier_loose_match() -> None:
    assert seek_sequence(["foo ", "foo"], ["foo"], 0, False) == 1


def test_end_of_file_tries_only_the_last_position() -> None:
    assert seek_sequence(["x", "m", "x"], ["x"], 0, True) == 2
    assert seek_sequence(["first", "second"], ["first"], 0, True) is None


def test_unicode_punctuation_is_normalised_last() -> None:
    line = "say \u201chi\u201d \u2014 it\u2019s\u00a0here"
    assert normalise_punctuation(line) == 'say "hi" - it\'s here'
    assert seek_sequence(["top", line], ['say "hi" - it\'s here'], 0, False) == 1
