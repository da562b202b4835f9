"""How the fs service decodes some params and encodes some results.

The wire types (execserver/wire/fs.py) are the documented contract (they
generate protocol/schema). A few members need different *decoding* to give
the reference's exact error texts, and two results are produced as ready
base64 text, so the fs service registers the mirrors below: same names and
members as the wire types, different member types.

* Unsigned numbers of fs params: serde (arbitrary-precision numbers) rejects
  a negative, fractional or too large value with the bare text
  ``invalid number`` — so these accept any number and the service range-checks.
* ``fs/open`` ``mode``: a serde enum with its own texts (see mode.py).
"""

from __future__ import annotations

import msgspec

from execserver.wire.base import WireStruct, absent_raw

__all__ = [
    "OpenParams",
    "ReadBlockParams",
    "ReadBlockResponse",
    "ReadFileResponse",
    "WalkParams",
    "WatchMissingParams",
    "WriteBlockParams",
    "decoded_chunk",
    "keep_decoded",
]

Number = int | float


def _read_mode() -> msgspec.Raw:
    return msgspec.Raw(b'"read"')


class WalkOptions(WireStruct):
    max_depth: Number
    max_directories: Number
    max_entries: Number
    follow_directory_symlinks: bool
    prune_hidden_directories: bool = False


class WalkParams(WireStruct):
    path: str
    options: WalkOptions
    sandbox: msgspec.Raw = msgspec.field(default_factory=absent_raw)


class OpenParams(WireStruct):
    handle_id: str
    path: str
    mode: msgspec.Raw = msgspec.field(default_factory=_read_mode)
    sandbox: msgspec.Raw = msgspec.field(default_factory=absent_raw)


class ReadBlockParams(WireStruct):
    handle_id: str
    offset: Number
    len: Number


class WriteBlockParams(WireStruct, dict=True):
    """``dict=True``: validation keeps the decoded chunk on the instance
    (see ``keep_decoded``) so a 1 MiB block is decoded once."""

    handle_id: str
    offset: Number
    chunk: str  # base64: -32602 with the bare decoder text on bad input


class WatchMissingParams(WireStruct):
    watch_id: Number
    missing: list[str]
    present: str | None = None


class ReadFileResponse(WireStruct):
    """``{dataBase64}``, base64-encoded in a worker thread (or the sandbox helper)
    so a large file costs no base64 work on the event loop."""

    data_base64: str


class ReadBlockResponse(WireStruct):
    chunk: str
    eof: bool


_DECODED = "_decoded_chunk"


def keep_decoded(params: WriteBlockParams, data: bytes) -> None:
    setattr(params, _DECODED, data)


def decoded_chunk(params: WriteBlockParams) -> bytes:
    data: bytes = getattr(params, _DECODED)
    return data
