"""The daemon's end of the fs helper protocol (``protocol.py``), on msgspec.

The helper's answers are decoded strictly (``response_decoder``: the array
layout and each field's type), so a helper that a sandboxed request made
misbehave cannot hand the daemon anything but a well-typed ``Response``; the
pool kills a helper whose frame does not decode. The helper itself speaks the
same bytes through ``msgpack_lite.py`` (and does not import this module).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from execserver.fs.sandboxed.protocol import FS_BYTES_EXT, HEADER, MAX_FRAME

__all__ = [
    "Request",
    "Response",
    "carry_fs_bytes",
    "frame",
    "request_decoder",
    "response_decoder",
]


class Request(msgspec.Struct, array_like=True):
    id: int
    op: str
    args: dict[str, Any]


class Response(msgspec.Struct, array_like=True):
    id: int
    kind: int
    value: Any = None
    code: int = 0
    message: str = ""


def _fs_bytes(code: int, data: memoryview) -> str:
    """A str that is not UTF-8, from its ``FS_BYTES_EXT`` extension (``protocol.py``)."""
    if code != FS_BYTES_EXT:
        raise ValueError(f"unsupported msgpack extension type {code}")
    return bytes(data).decode("utf-8", "surrogateescape")


def _carried(value: Any) -> Any:
    if type(value) is str and not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:  # msgspec writes UTF-8 only
            return msgspec.msgpack.Ext(FS_BYTES_EXT, value.encode("utf-8", "surrogateescape"))
    return value


def carry_fs_bytes(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with each str that is not UTF-8 (a file name's bytes) as its
    ``FS_BYTES_EXT`` extension; the operations' arguments are flat."""
    return {name: _carried(value) for name, value in args.items()}


_encoder = msgspec.msgpack.Encoder()
request_decoder: Final = msgspec.msgpack.Decoder(Request, ext_hook=_fs_bytes)
response_decoder: Final = msgspec.msgpack.Decoder(Response, ext_hook=_fs_bytes)


def frame(message: Request | Response) -> bytes:
    body = _encoder.encode(message)
    if len(body) > MAX_FRAME:
        raise ValueError(f"fs helper frame too large ({len(body)} bytes)")
    return HEADER.pack(len(body)) + body
