"""The fast fs base64 decoder accepts and rejects exactly like wire.base64."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st

from execserver.fs.b64 import decode_strict
from execserver.wire.base64 import Base64Error, decode_base64


def _outcome(decode: object, text: str) -> object:
    assert callable(decode)
    try:
        return decode(text)
    except Base64Error as exc:
        return f"error: {exc}"


@given(st.binary(max_size=64))
def test_canonical_input(data: bytes) -> None:
    text = base64.b64encode(data).decode()
    assert decode_strict(text) == data


@given(st.text(alphabet="ABCDabcd0189+/=!é ", max_size=16))
def test_same_verdict_on_arbitrary_text(text: str) -> None:
    assert _outcome(decode_strict, text) == _outcome(decode_base64, text)


def test_non_canonical_last_symbol_is_rejected() -> None:
    assert _outcome(decode_strict, "YWJk") == _outcome(decode_base64, "YWJk")
    assert str(_outcome(decode_strict, "ab==")).startswith("error: Invalid last symbol")
