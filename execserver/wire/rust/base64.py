"""Strict standard base64 (RFC 4648 section 4, padded) with the Rust ``base64`` crate's error texts.

The reference rejects non-canonical input; clients see its messages
(``Invalid input length: 1``, ``Invalid symbol 33, offset 0.``), so we spell them alike.
"""

from __future__ import annotations

import binascii

__all__ = ["Base64Error", "decode_base64"]

_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_PAD = ord("=")


class Base64Error(ValueError):
    """Invalid base64; ``str(err)`` is the reference's text."""


def decode_base64(text: str) -> bytes:
    """Decode strict padded base64; raises :class:`Base64Error` with the crate's text.

    Canonical input is proven without re-encoding all of it (payloads reach
    1 MiB): ``strict_mode`` refuses bad symbols, bad padding and bad lengths,
    and only the last quantum can carry non-canonical bits, so re-encoding
    that one is enough.
    """
    if not text:
        return b""
    if len(text) % 4 == 0:
        try:
            raw = text.encode("ascii")
            data = binascii.a2b_base64(raw, strict_mode=True)
        except (UnicodeEncodeError, binascii.Error):
            pass
        else:
            tail = len(data) % 3 or 3
            if binascii.b2a_base64(data[-tail:], newline=False) == raw[-4:]:
                return data
    _raise_rust_error(text.encode("utf-8", errors="surrogateescape"))
    raise AssertionError("unreachable")  # pragma: no cover


def _raise_rust_error(raw: bytes) -> None:
    """Reproduce the order of the crate's checks (verified against the reference)."""
    body_end = len(raw)
    while body_end > 0 and raw[body_end - 1] == _PAD:
        body_end -= 1
    for offset, byte in enumerate(raw[:body_end]):
        if byte not in _ALPHABET:
            raise Base64Error(f"Invalid symbol {byte}, offset {offset}.")
    partial = body_end % 4
    padding = len(raw) - body_end
    if padding:
        # Padding may only close a quantum holding 2 or 3 symbols, and only as much as it needs.
        if partial < 2 or padding > 4 - partial:
            raise Base64Error(f"Invalid symbol {_PAD}, offset {body_end}.")
        if padding < 4 - partial:
            raise Base64Error("Invalid padding")
    elif partial == 1:
        raise Base64Error(f"Invalid input length: {body_end}")
    elif partial:
        raise Base64Error("Invalid padding")
    last = body_end - 1
    raise Base64Error(f"Invalid last symbol {raw[last]}, offset {last}.")
