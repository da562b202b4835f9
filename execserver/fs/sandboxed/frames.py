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

from execserver.fs.sandboxed.protocol import HEADER, MAX_FRAME

__all__ = ["Request", "Response", "frame", "request_decoder", "response_decoder"]


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


_encoder = msgspec.msgpack.Encoder()
request_decoder: Final = msgspec.msgpack.Decoder(Request)
response_decoder: Final = msgspec.msgpack.Decoder(Response)


def frame(message: Request | Response) -> bytes:
    body = _encoder.encode(message)
    if len(body) > MAX_FRAME:
        raise ValueError(f"fs helper frame too large ({len(body)} bytes)")
    return HEADER.pack(len(body)) + body
