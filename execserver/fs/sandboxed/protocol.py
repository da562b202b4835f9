"""Frames between the daemon and the persistent fs helper: the one protocol.

A frame is a 4-byte big-endian length and a msgpack body. msgpack carries
bytes as bytes, so file contents cross the pipe raw: the daemon base64-encodes
a read once, for the JSON-RPC response, and decodes a write once, from the
request — never a second time for the helper.

- a request (daemon to helper) is the array ``[id, op, args]``: an int, the
  operation's name (``execserver/fs/operations.py``), and a map of its
  keyword arguments by name;
- a response (helper to daemon) is the array ``[id, kind, value, code,
  message]``: the request's id, one of the kinds below, the operation's result
  (``OK``), the error's code (errno for ``OS_ERROR``) and its text.

A str that is not UTF-8 — a file name's bytes, which Python carries as lone
surrogates (``os.fsdecode``), the reference serves such names and a ``file:``
URI can name them (``%FF``) — crosses as the msgpack extension ``FS_BYTES_EXT``
holding its bytes (UTF-8 with surrogateescape), and is read back as the same
str; a response's ``message`` is always UTF-8.

The helper's first frame, before it reads any request, is the response
``[READY_ID, OK, nil, 0, ""]``: it is up (its sandbox built, its runtime locked)
and will read requests now. The daemon sends nothing before it, so a helper that
does not come up has run nothing, and the call can go to a fresh one.

Requests may be pipelined; responses carry the request id and can come back
in any order (the helper runs requests on a few threads, so one slow or stuck
operation does not hold up the others).

Each end has its own codec for the same bytes: the daemon msgspec's
(``frames.py``: its decoder is strict about what a helper, which runs
whatever a sandboxed request made of it, sends back), the helper a small one
in pure Python (``msgpack_lite.py``: msgspec and its imports were half of a
helper's memory). This module is what both import: the constants alone.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = [
    "FAILED",
    "FS_BYTES_EXT",
    "HEADER",
    "MAX_FRAME",
    "OK",
    "OS_ERROR",
    "READY_ID",
    "RPC_ERROR",
    "STALE",
]

HEADER: Final = struct.Struct(">I")
MAX_FRAME: Final = (1 << 32) - 1
# The msgpack extension type of a str that is not UTF-8 (above).
FS_BYTES_EXT: Final = 1

# The id of the helper's first frame (above); the daemon's requests count from 1.
READY_ID: Final = 0

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
