"""The Rust ``uuid`` crate's parse errors (``metadata.threadId`` of process/start).

The reference rejects a bad threadId while decoding params (-32602, before
lifecycle errors) with the crate's own message.
"""

from __future__ import annotations

from execserver.wire.errors import RpcError

__all__ = ["check_uuid"]

_HEX = frozenset("0123456789abcdefABCDEF")
_PREFIX = "urn:uuid:"
_GROUPS = (8, 4, 4, 4, 12)


def check_uuid(text: str) -> None:
    """Raise ``RpcError(-32602)`` with the crate's text unless ``text`` parses as a UUID."""
    body, offset = text, 0
    if body.startswith(_PREFIX):
        body, offset = body[len(_PREFIX) :], len(_PREFIX)
    elif body.startswith("{") and body.endswith("}"):
        body, offset = body[1:-1], 1
    for index, ch in enumerate(body):
        if ch not in _HEX and ch != "-":
            raise RpcError.invalid_params(
                "invalid character: expected an optional prefix of `urn:uuid:` followed by "
                f"[0-9a-fA-F-], found `{ch}` at {index + offset + 1}"
            )
    if "-" not in body:
        if len(body) != 32:
            raise RpcError.invalid_params(
                f"invalid length: expected length 32 for simple format, found {len(body)}"
            )
        return
    groups = body.split("-")
    if len(groups) != len(_GROUPS):
        raise RpcError.invalid_params(f"invalid group count: expected 5, found {len(groups)}")
    for number, (group, expected) in enumerate(zip(groups, _GROUPS, strict=True)):
        if len(group) != expected:
            raise RpcError.invalid_params(
                f"invalid group length in group {number}: expected {expected}, found {len(group)}"
            )
