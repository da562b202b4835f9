"""The matching under ``RemoteProcess.expect``: literal vs regex patterns,
matches across events, and exact byte offsets when the output is not UTF-8."""

from __future__ import annotations

import re

import pytest

from execserver.client.events import Exited, Output, ProcessEvent
from execserver.client.expect import find, held_output, split_at


def out(seq: int, data: bytes) -> Output:
    return Output(seq, "pty", data)


def test_str_and_bytes_patterns_are_literal() -> None:
    held: list[ProcessEvent] = [out(1, b"a.c abc $ rest")]
    found = find("abc $ ", held)
    assert found is not None
    match, consumed = found
    assert (match.before, match.after, consumed) == ("a.c ", "abc $ ", 10)
    assert find(b"a.c", held) is not None and find(b"x.c", held) is None


def test_a_regex_matches_across_events_and_the_rest_stays_held() -> None:
    held: list[ProcessEvent] = [out(1, b"hel"), Exited(2, 0, False), out(3, b"lo world")]
    found = find(re.compile(rb"l+o"), held)
    assert found is not None
    match, consumed = found
    assert (match.before, match.after) == (b"he", b"llo")
    assert split_at(held, consumed) == [Exited(2, 0, False), out(3, b" world")]


def test_offsets_stay_exact_around_bytes_that_are_not_utf8() -> None:
    held: list[ProcessEvent] = [out(1, b"\xff\xfeprompt> tail")]
    found = find("prompt> ", held)
    assert found is not None
    match, consumed = found
    assert match.before == "\ufffd\ufffd"
    assert consumed == len(b"\xff\xfeprompt> ")
    assert held_output(split_at(held, consumed), text=False) == b"tail"


def test_other_pattern_types_are_refused() -> None:
    with pytest.raises(TypeError, match=r"str, bytes or re\.Pattern"):
        find(42, [])  # type: ignore[arg-type]
