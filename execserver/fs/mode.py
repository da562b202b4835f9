"""``fs/open`` ``mode``: a serde unit-variant enum, decoded with serde's words.

serde accepts ``"read"``/``"replace"`` and also the externally tagged map form
``{"read": null}``; everything else is rejected with the texts below (checked
against the 0.169.0 binary).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from execserver.wire.decode import describe_value
from execserver.wire.errors import RpcError

__all__ = ["OpenMode", "decode_open_mode"]

OpenMode = Literal["read", "replace"]
_VARIANTS: tuple[OpenMode, ...] = ("read", "replace")


def _variant(name: str) -> OpenMode:
    for variant in _VARIANTS:
        if name == variant:
            return variant
    raise RpcError.invalid_params(f"unknown variant `{name}`, expected `read` or `replace`")


def decode_open_mode(raw: msgspec.Raw) -> OpenMode:
    value = msgspec.json.decode(bytes(raw)) if len(raw) else "read"
    if isinstance(value, str):
        return _variant(value)
    if isinstance(value, dict):
        if len(value) != 1:
            raise RpcError.invalid_params("invalid value: map, expected map with a single key")
        ((name, payload),) = value.items()
        mode = _variant(name)
        if payload is not None:
            raise RpcError.invalid_params(f"invalid type: {describe_value(payload)}, expected unit")
        return mode
    raise RpcError.invalid_params(f"invalid type: {describe_value(value)}, expected string or map")
