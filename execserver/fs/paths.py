"""PathUri checks for fs/* in the two places the reference makes them.

The reference rejects malformed URIs while decoding params (-32602, before the
lifecycle check), but only notices a non-local host when it converts the URI
to a native path inside the handler (-32600 ``'<uri>' is invalid on 'linux'``).
``validate_path_uri`` is the first step, ``native_path`` the second.
"""

from __future__ import annotations

from execserver.wire.errors import RpcError
from execserver.wire.uri import uri_to_path

__all__ = ["native_path", "validate_path_uri"]

# wire.uri words a non-local host this way; we recognise it to defer the error.
_HOST_ERROR_PREFIX = "invalid URI: file URI with host"


def _after_scheme(uri: str) -> str:
    return uri.split(":", 1)[1] if ":" in uri else uri


def validate_path_uri(uri: str) -> None:
    """Raise the reference's -32602 for a URI that is not an acceptable ``file:`` URI."""
    try:
        uri_to_path(uri)
    except RpcError as exc:
        if not exc.message.startswith(_HOST_ERROR_PREFIX):
            raise
    rest = _after_scheme(uri)
    before_fragment = rest.split("#", 1)[0]
    if "?" in before_fragment:
        raise RpcError.invalid_params("query parameters are not allowed in path URIs")
    if "#" in rest:
        raise RpcError.invalid_params("fragments are not allowed in path URIs")


def native_path(uri: str) -> str:
    """The native absolute path of an already validated URI."""
    try:
        return uri_to_path(uri)
    except RpcError as exc:
        if exc.message.startswith(_HOST_ERROR_PREFIX):
            raise RpcError.invalid_request(f"'{uri}' is invalid on 'linux'") from None
        raise
