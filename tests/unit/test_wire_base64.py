"""Strict base64 with the reference's error texts (table recorded from 0.169.0)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from execserver.wire.rust.base64 import Base64Error, decode_base64

REFERENCE_ERRORS = {
    "A": "Invalid input length: 1",
    "AB": "Invalid padding",
    "AB=": "Invalid padding",
    "AB==": "Invalid last symbol 66, offset 1.",
    "ABC": "Invalid padding",
    "ABC=": "Invalid last symbol 67, offset 2.",
    "abc==": "Invalid symbol 61, offset 3.",
    "abcd=": "Invalid symbol 61, offset 4.",
    "abcd==": "Invalid symbol 61, offset 4.",
    "ab=c": "Invalid symbol 61, offset 2.",
    "a===": "Invalid symbol 61, offset 1.",
    "====": "Invalid symbol 61, offset 0.",
    "=": "Invalid symbol 61, offset 0.",
    "ab==cd==": "Invalid symbol 61, offset 2.",
    "AQ=": "Invalid padding",
    "AR==": "Invalid last symbol 82, offset 1.",
    "ab c": "Invalid symbol 32, offset 2.",
    "\u00e9": "Invalid symbol 195, offset 0.",
    "abcde": "Invalid input length: 5",
}


@pytest.mark.parametrize(("text", "message"), sorted(REFERENCE_ERRORS.items()))
def test_invalid_input_is_refused_with_the_reference_text(text: str, message: str) -> None:
    with pytest.raises(Base64Error) as info:
        decode_base64(text)
    assert str(info.value) == message


@given(st.binary(max_size=300))
def test_canonical_base64_round_trips(data: bytes) -> None:
    assert decode_base64(base64.b64encode(data).decode()) == data


def test_empty_string_is_zero_bytes() -> None:
    assert decode_base64("") == b""


def _canonical(text: str) -> bytes | None:
    """The oracle: what strict decoding accepts is exactly what re-encodes to itself."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, ValueError):
        return None
    return data if base64.b64encode(data).decode() == text else None


@given(st.text(alphabet="ABCDabcd0189+/=!é ", max_size=16))
def test_accepts_exactly_the_canonical_texts(text: str) -> None:
    # The decoder re-encodes only the last quantum; it must agree with a full re-encode.
    expected = _canonical(text)
    try:
        assert decode_base64(text) == expected
    except Base64Error:
        assert expected is None


def test_non_canonical_last_symbol_of_a_long_text_is_refused() -> None:
    text = base64.b64encode(b"x" * 3000).decode() + "YWJk"[:2] + "=="
    assert _canonical(text) is None
    with pytest.raises(Base64Error, match="Invalid last symbol"):
        decode_base64(text)


@given(
    st.binary(min_size=24, max_size=600),
    st.lists(
        st.tuples(
            st.integers(min_value=0),
            st.sampled_from(["=", " ", "\n", "-", "_", ".", "\x00", "\x7f", "é", "A", "/"]),
            st.sampled_from(["replace", "insert", "delete"]),
        ),
        max_size=3,
    ),
)
def test_long_texts_are_accepted_exactly_when_canonical(
    data: bytes, edits: list[tuple[int, str, str]]
) -> None:
    # Long enough for the SIMD decoder's vector loop (the short cases above stay
    # in its scalar tail): damage anywhere must be refused as the oracle refuses it.
    chars = list(base64.b64encode(data).decode())
    for position, char, edit in edits:
        i = position % len(chars)
        if edit == "replace":
            chars[i] = char
        elif edit == "insert":
            chars.insert(i, char)
        elif len(chars) > 1:
            del chars[i]
    text = "".join(chars)
    expected = _canonical(text)
    try:
        assert decode_base64(text) == expected
    except Base64Error:
        assert expected is None
