"""Untyped decoding of a JSON text that the envelope already parsed, for the
paths that inspect a value to word serde's error (``wire/decode.py``,
``wire/sandbox.py``).

msgspec refuses a number beyond the range of a double (``1E400``) with
"Number out of range", and an integer of more digits than Python converts
(``sys.get_int_max_str_digits()``, 4 300) with "Integer value out of range",
while the reference (serde_json with ``arbitrary_precision``) keeps either as a
number and then refuses it as the field's type dictates: "invalid number" for
an integer field, "invalid type: number, expected a string" for a string. So
such a number comes back here as an integer just as far out of range, which
every caller already words as serde does.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

__all__ = ["decode_json_value"]

_BEYOND_EVERY_RANGE = 10**400
_MAX_DIGITS = 4_000  # below sys.get_int_max_str_digits()'s default of 4 300


def _number(text: str) -> float | int:
    value = float(text)  # Python's float() saturates to +-inf where msgspec refuses
    if math.isfinite(value):
        return value
    return _BEYOND_EVERY_RANGE if value > 0 else -_BEYOND_EVERY_RANGE


def _integer(text: str) -> int:
    if len(text) > _MAX_DIGITS:  # int() would refuse it (and take quadratic time)
        return -_BEYOND_EVERY_RANGE if text.startswith("-") else _BEYOND_EVERY_RANGE
    return int(text)


_decoder = msgspec.json.Decoder(float_hook=_number)


def decode_json_value(data: bytes) -> Any:
    """The JSON value of ``data``: msgspec's untyped decoding, except that a number
    beyond a double's range, or an integer too long to convert, is an integer
    beyond every range instead of an error."""
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError:
        # Only an over-long integer gets here (the text is JSON that msgspec has
        # already parsed once, in the envelope); the standard parser has a hook.
        return json.loads(data, parse_int=_integer, parse_float=_number)
