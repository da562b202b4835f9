"""Base classes for wire structs: camelCase on the wire, unknown fields accepted."""

from typing import Annotated

import msgspec

__all__ = ["U64", "Empty", "OptionalFieldsStruct", "WireStruct", "absent_raw"]


class WireStruct(msgspec.Struct, rename="camel", forbid_unknown_fields=False):
    """A protocol object. Every key is written, ``null`` included (as the reference does)."""


class OptionalFieldsStruct(
    msgspec.Struct, rename="camel", forbid_unknown_fields=False, omit_defaults=True
):
    """A protocol object whose defaulted members are left out when encoding."""


class Empty(WireStruct):
    """``{}``: the result of methods that return nothing, and params that carry nothing."""


_NULL = msgspec.Raw(b"null")


def absent_raw() -> msgspec.Raw:
    """Default for raw JSON members (``sandbox``): ``null``, which the protocol
    treats like an absent member. (An empty Raw would encode as invalid JSON.)

    Used through ``msgspec.field(default_factory=...)`` so schema generation
    does not try to serialise a Raw default.
    """
    return _NULL


# Rust u64 fields: serde names them "u64" in its errors and rejects negatives.
# msgspec bounds must fit in int64; the params decoder (wire/decode.py) still takes
# 2**63..2**64-1 as serde does, on its slow path.
U64 = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
