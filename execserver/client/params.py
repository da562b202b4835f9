"""Helpers every part of the client shares: call timeouts, result decoding,
base64 for wire bytes. Kept apart from ``connection.py`` so that the process,
file-system and command modules need nothing from it (no import cycle)."""

from __future__ import annotations

import enum
from typing import Any, Final, TypeVar

import msgspec
import pybase64

from execserver.client.errors import ExecServerError
from execserver.wire.contract import REQUESTS

__all__ = [
    "DEFAULT_TIMEOUT",
    "DefaultTimeout",
    "Timeout",
    "b64encode",
    "decode_result",
    "result_type_of",
    "wire_bytes",
]

T = TypeVar("T")


class DefaultTimeout(enum.Enum):
    """The type of :data:`DEFAULT_TIMEOUT` (a one-member enum, so mypy can tell
    it apart from a number of seconds)."""

    TIMEOUT = enum.auto()


# A call's timeout in seconds, None for no limit, or DEFAULT_TIMEOUT for the
# client's own default (which for a long-poll ``process/read`` covers its wait).
Timeout = float | None | DefaultTimeout
DEFAULT_TIMEOUT: Final = DefaultTimeout.TIMEOUT

_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def decode_result(raw: msgspec.Raw, result_type: type[T]) -> T:
    """``raw`` decoded as ``result_type``; a mismatch is an :class:`ExecServerError`."""
    decoder = _decoders.get(result_type)
    if decoder is None:
        decoder = _decoders[result_type] = msgspec.json.Decoder(result_type)
    try:
        result: T = decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise ExecServerError(f"unexpected result shape: {exc}") from exc
    return result


def result_type_of(method: str) -> type[Any]:
    """The result type ``wire/contract.py`` gives ``method``; ``object`` (plain
    JSON values) for a method outside the contract."""
    entry = REQUESTS.get(method)
    return object if entry is None else entry[1]


def b64encode(data: bytes | bytearray | memoryview) -> str:
    # pybase64 (SIMD): 1.9 ms for 8 MiB where the stdlib takes 18 ms; a process
    # write or a file's bytes are encoded on the caller's event loop.
    return pybase64.b64encode(data).decode("ascii")


def wire_bytes(value: str | bytes) -> bytes:
    """Wire bytes, whichever way the wire struct spells them (base64 text or decoded)."""
    return pybase64.b64decode(value, validate=True) if isinstance(value, str) else value
