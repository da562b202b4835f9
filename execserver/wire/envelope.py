"""The JSON-RPC envelope as the reference speaks it: no ``jsonrpc``
member, ids that are integers or strings, and one message per frame.

Incoming frames are classified in one msgspec pass (params stay raw bytes and
are decoded later with the method's own type); the classified messages are
msgspec structs because a frozen dataclass costs ~0.6 µs to build, a tenth of
a request's in-process work. Only when that fast pass fails
do we take the slow path that reproduces the reference's serde error texts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

from execserver.wire.rust import serde
from execserver.wire.rust.serde_json import serde_syntax_error

__all__ = [
    "PARSE_ERROR_ID",
    "ErrorMessage",
    "ErrorObject",
    "IncomingNotification",
    "IncomingRequest",
    "IncomingResponse",
    "MalformedMessage",
    "NotificationMessage",
    "RequestMessage",
    "ResponseMessage",
    "decode_incoming",
    "encode_error",
    "encode_message",
]

RequestId = int | str

# The id the reference uses for errors about messages it could not parse.
PARSE_ERROR_ID = -1


class _Incoming(msgspec.Struct, forbid_unknown_fields=False):
    id: int | str | msgspec.UnsetType = msgspec.UNSET
    method: str | msgspec.UnsetType = msgspec.UNSET
    params: msgspec.Raw = msgspec.Raw()
    result: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


class IncomingRequest(msgspec.Struct, frozen=True, gc=False):
    id: RequestId
    method: str
    params: msgspec.Raw  # empty Raw when omitted


class IncomingNotification(msgspec.Struct, frozen=True, gc=False):
    method: str
    params: msgspec.Raw


class IncomingResponse(msgspec.Struct, frozen=True, gc=False):
    id: RequestId
    result: msgspec.Raw
    error: msgspec.Raw  # empty when it is a success


class MalformedMessage(msgspec.Struct, frozen=True, gc=False):
    """Could not be decoded into any message shape; ``reason`` is serde's wording."""

    reason: str


Incoming = IncomingRequest | IncomingNotification | IncomingResponse | MalformedMessage

_incoming_decoder = msgspec.json.Decoder(_Incoming)


def decode_incoming(frame: bytes | str) -> Incoming:
    """Classify one frame. Never raises."""
    if isinstance(frame, bytes) and not frame.isascii():
        # msgspec skips unknown members (and raw params) without checking their
        # UTF-8; serde refuses the whole message, and so do we (found by atheris).
        try:
            frame.decode("utf-8")
        except UnicodeDecodeError:
            return _slow_classify(frame)
    try:
        msg = _incoming_decoder.decode(frame)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return _slow_classify(frame)
    except RecursionError:
        # Pathologically deep nesting; serde refuses it as well (its limit is 128).
        return MalformedMessage("recursion limit exceeded at line 1 column 1")
    if not isinstance(msg.method, msgspec.UnsetType):
        if isinstance(msg.id, msgspec.UnsetType):
            return IncomingNotification(msg.method, msg.params)
        # A request shape takes precedence over result/error for the reference as well.
        return IncomingRequest(msg.id, msg.method, msg.params)
    if isinstance(msg.id, msgspec.UnsetType):
        if _present(msg.result):
            return MalformedMessage(serde.missing_field("id"))
        return MalformedMessage(serde.missing_field("error"))
    if _present(msg.error):
        return IncomingResponse(msg.id, msgspec.Raw(), msg.error)
    if _present(msg.result):
        return IncomingResponse(msg.id, msg.result, msgspec.Raw())
    return MalformedMessage(serde.missing_field("error"))


def _present(raw: msgspec.Raw) -> bool:
    return len(raw) > 0


def _slow_classify(frame: bytes | str) -> MalformedMessage:
    text = frame.decode("utf-8", errors="replace") if isinstance(frame, bytes) else frame
    if isinstance(frame, bytes):
        try:
            frame.decode("utf-8")
        except UnicodeDecodeError as exc:
            return MalformedMessage(f"invalid unicode code point at line 1 column {exc.start + 1}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return MalformedMessage(serde_syntax_error(text, exc))
    except RecursionError:
        return MalformedMessage("recursion limit exceeded at line 1 column 1")
    if not isinstance(value, dict):
        return MalformedMessage("expected a JSON-RPC object")
    if "id" in value and not _valid_id(value["id"]):
        return MalformedMessage("data did not match any variant of untagged enum RequestId")
    if "method" in value and not isinstance(value["method"], str):
        return MalformedMessage(
            serde.invalid_type(value["method"], "a string", arbitrary_precision=False)
        )
    # Python accepted what msgspec refused (NaN, huge integers, ...): serde refuses it too.
    return MalformedMessage("expected value at line 1 column 1")


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    return isinstance(value, str)


# ---- outgoing -----------------------------------------------------------------


class ErrorObject(msgspec.Struct):
    code: int
    message: str


class ReceivedError(msgspec.Struct):
    """An error object as a peer sent it: ``data`` is kept raw (empty when absent)."""

    code: int
    message: str
    data: msgspec.Raw = msgspec.Raw()


_received_error_decoder = msgspec.json.Decoder(ReceivedError)


def decode_error_object(raw: msgspec.Raw) -> ReceivedError:
    """The ``error`` member of an :class:`IncomingResponse`; raises
    ``msgspec.DecodeError`` (a ``ValueError``) when it is not an error object."""
    return _received_error_decoder.decode(raw)


class ResponseMessage(msgspec.Struct):
    id: RequestId
    result: Any


class ErrorMessage(msgspec.Struct):
    # The reference writes "error" before "id"; keep its order for byte-equal transcripts.
    error: ErrorObject
    id: RequestId


class NotificationMessage(msgspec.Struct):
    method: str
    params: Any


class RequestMessage(msgspec.Struct):
    id: RequestId
    method: str
    params: Any


_encoder = msgspec.json.Encoder()

OutgoingMessage = ResponseMessage | ErrorMessage | NotificationMessage | RequestMessage

# The encoder's own method rather than a function around it: one Python call less
# per message written.
encode_message: Callable[[OutgoingMessage], bytes] = _encoder.encode


def encode_error(request_id: RequestId, code: int, message: str) -> bytes:
    return _encoder.encode(ErrorMessage(ErrorObject(code, message), request_id))
