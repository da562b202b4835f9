"""http/request and its streamed body notifications."""

from __future__ import annotations

from typing import Literal

from execserver.wire.base import U64, WireStruct

__all__ = [
    "HttpHeader",
    "HttpRequestBodyDeltaNotification",
    "HttpRequestParams",
    "HttpRequestResponse",
    "ResponseHeader",
]


class HttpHeader(WireStruct):
    name: str
    value: str
    value_env_var: str | None = None


class ResponseHeader(WireStruct):
    name: str
    value: str


class HttpRequestParams(WireStruct):
    method: str
    url: str
    request_id: str
    headers: list[HttpHeader] | None = None
    body_base64: str | None = None
    timeout_ms: U64 | None = None
    redirect_policy: Literal["follow", "stop"] = "follow"
    stream_response: bool = False


class HttpRequestResponse(WireStruct):
    status: int
    headers: list[ResponseHeader]
    body_base64: bytes


class HttpRequestBodyDeltaNotification(WireStruct):
    request_id: str
    seq: U64
    delta_base64: bytes
    done: bool
    error: str | None
