"""PathUri: every path on the wire is an absolute ``file:`` URI.

Parsing follows what the reference (Rust ``url`` crate) accepts: ``file:///abs``,
``file://localhost/abs``, percent-encoding, and lexical ``.``/``..``
normalisation. Errors carry the reference's -32602 texts.
"""

from __future__ import annotations

import functools
import posixpath
from urllib.parse import unquote

from execserver.wire.errors import RpcError
from execserver.wire.file_uri import path_to_uri
from execserver.wire.rust import url

__all__ = ["path_to_uri", "uri_to_path"]


def _scheme_of(uri: str) -> str | None:
    if uri.startswith("file:"):
        return "file"  # nearly every URI on the wire: skip the character checks
    colon = uri.find(":")
    if colon <= 0:
        return None
    scheme = uri[:colon]
    if not (scheme[0].isascii() and scheme[0].isalpha()):
        return None
    if all(c.isascii() and (c.isalnum() or c in "+-.") for c in scheme):
        return scheme.lower()
    return None


# A pure function of the text, called twice per fs request (params check, then the
# handler) with the same few paths an agent works on: caching halves fs/getMetadata's
# parsing cost. Errors are not cached (lru_cache only keeps returned values).
@functools.lru_cache(maxsize=4096)
def uri_to_path(uri: str) -> str:
    """Native absolute path for a ``file:`` URI; raises RpcError(-32602) like the reference."""
    scheme = _scheme_of(uri)
    if scheme is None:
        raise RpcError.invalid_params(f"invalid URI: {url.RELATIVE_URL_WITHOUT_BASE}")
    if scheme != "file":
        raise RpcError.invalid_params(f"unsupported path URI scheme `{scheme}`")
    rest = uri[len(scheme) + 1 :]
    # Drop query and fragment, as URL parsing does.
    for sep in ("#", "?"):
        cut = rest.find(sep)
        if cut >= 0:
            rest = rest[:cut]
    if rest.startswith("//"):
        authority_end = rest.find("/", 2)
        host = rest[2:] if authority_end < 0 else rest[2:authority_end]
        path = "/" if authority_end < 0 else rest[authority_end:]
        if host not in ("", "localhost"):
            raise RpcError.invalid_params(f"invalid URI: file URI with host `{host}` is not local")
    else:
        path = rest if rest.startswith("/") else "/" + rest
    native = unquote(path, errors="surrogateescape")
    if "\x00" in native:
        raise RpcError.invalid_params("invalid URI: path contains a NUL byte")
    normalised = posixpath.normpath(native)
    # normpath keeps a leading "//"; URL parsing does not.
    if normalised.startswith("//"):
        normalised = "/" + normalised.lstrip("/")
    return normalised
