"""serde's error wording, as serde_json reports it for the reference's params.

Two details decide how a value is named (serde's ``Unexpected``):

* params are parsed into a ``serde_json::Value`` with arbitrary-precision
  numbers, so a number met there reads ``number``;
* values first buffered into serde's ``Content`` (below an internally tagged
  enum) and the envelope's own members keep their kind: ``integer `3```,
  ``floating point `1.5```.

``arbitrary_precision`` selects the first reading.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

from execserver.wire.errors import RpcError

__all__ = [
    "expected_one_of",
    "invalid_length",
    "invalid_type",
    "invalid_value",
    "missing_field",
    "unexpected",
    "unit_variant",
    "unknown_field",
    "unknown_variant",
]

_S = TypeVar("_S", bound=str)


def _rust_float(value: float) -> str:
    # Rust prints a float with a fraction or an exponent; Python's repr already does
    # except for inf/nan, which JSON cannot carry.
    text = repr(value)
    return text if any(c in text for c in ".eEn") else text + ".0"


def unexpected(value: object, *, arbitrary_precision: bool) -> str:
    """serde's ``Unexpected`` for a JSON value: ``null``, ``boolean `true```,
    ``string "x"``, ``sequence``, ``map`` or a number (see the module docstring)."""
    if value is None:
        return "null"  # serde_json prints Unexpected::Unit as "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int | float):
        if arbitrary_precision:
            return "number"
        if isinstance(value, int):
            return f"integer `{value}`"
        return f"floating point `{_rust_float(value)}`"
    if isinstance(value, str):
        # Rust's {:?} for str: quotes, escapes for quote, backslash and control characters.
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list):
        return "sequence"
    return "map"


def invalid_type(value: object, expected: str, *, arbitrary_precision: bool) -> str:
    return (
        f"invalid type: {unexpected(value, arbitrary_precision=arbitrary_precision)}, "
        f"expected {expected}"
    )


def invalid_value(value: object, expected: str, *, arbitrary_precision: bool) -> str:
    return (
        f"invalid value: {unexpected(value, arbitrary_precision=arbitrary_precision)}, "
        f"expected {expected}"
    )


def invalid_length(length: int, expected: str) -> str:
    return f"invalid length {length}, expected {expected}"


def missing_field(name: str) -> str:
    return f"missing field `{name}`"


def expected_one_of(names: Sequence[str]) -> str:
    """serde's ``OneOf``: ``expected `a```, ``expected `a` or `b```, ``expected one of ...``."""
    quoted = [f"`{n}`" for n in names]
    if not quoted:
        return "there are no variants"
    if len(quoted) == 1:
        return f"expected {quoted[0]}"
    if len(quoted) == 2:
        return f"expected {quoted[0]} or {quoted[1]}"
    return "expected one of " + ", ".join(quoted)


def unknown_variant(name: str, variants: Sequence[str]) -> str:
    return f"unknown variant `{name}`, {expected_one_of(variants)}"


def unknown_field(name: str, fields: Sequence[str]) -> str:
    if not fields:
        return f"unknown field `{name}`, there are no fields"
    return f"unknown field `{name}`, {expected_one_of(fields)}"


def unit_variant(value: object, variants: tuple[_S, ...], *, arbitrary_precision: bool) -> _S:
    """A serde enum of unit variants (``#[derive(Deserialize)]``), decoded as
    serde_json's ``deserialize_enum`` does: the variant name as a string, or the
    externally tagged map form ``{"<variant>": null}``. Anything else raises
    ``RpcError(-32602)`` with serde's text (recorded from the reference in
    ``protocol/vectors/unit_variant_enum.json``)."""
    payload: object = None
    if isinstance(value, dict):
        if len(value) != 1:
            raise RpcError.invalid_params(
                invalid_value(value, "map with a single key", arbitrary_precision=False)
            )
        ((value, payload),) = value.items()
    elif not isinstance(value, str):
        raise RpcError.invalid_params(
            invalid_type(value, "string or map", arbitrary_precision=arbitrary_precision)
        )
    for variant in variants:
        if value == variant:
            break
    else:
        raise RpcError.invalid_params(unknown_variant(str(value), variants))
    if payload is not None:
        raise RpcError.invalid_params(
            invalid_type(payload, "unit", arbitrary_precision=arbitrary_precision)
        )
    return variant
