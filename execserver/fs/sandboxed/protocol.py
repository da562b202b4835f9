"""Frames between the daemon and the persistent fs helper.

A frame is a 4-byte big-endian length and a msgpack body. msgpack carries
bytes as bytes, so file contents cross the pipe raw: the daemon base64-encodes
a read once, for the JSON-RPC response, and decodes a write once, from the
request — never a second time for the helper.

Requests may be pipelined; responses carry the request id and can come back
in any order (the helper runs requests on a few threads, so one slow or stuck
operation does not hold up the others).
"""

from __future__ import annotations

import struct
from typing import Any, Final

import msgspec

__all__ = [
    "FAILED",
    "HEADER",
    "OK",
    "OS_ERROR",
    "RPC_ERROR",
    "STALE",
    "Request",
    "Response",
    "frame",
    "request_decoder",
    "response_decoder",
]

HEADER: Final = struct.Struct(">I")
MAX_FRAME: Final = (1 << 32) - 1

# Response kinds.
OK: Final = 0
OS_ERROR: Final = 1  # code = errno, message = strerror
RPC_ERROR: Final = 2  # code/message of an RpcError the operation raised
FAILED: Final = 3  # anything else; message says what
# The helper's mount view is no longer the one it was started with (a mount it
# had is gone): the operation's result, if it ran, is withheld, and every later
# request gets this answer too. The daemon retires the helper and runs the call
# in a fresh one.
STALE: Final = 4


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
