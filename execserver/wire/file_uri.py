"""A native absolute path as a ``file:`` URI (``path_to_uri``), without
``urllib.parse``: the sandboxed fs helper reports paths this way
(fs/canonicalize, fs/walk) and must not import urllib (and re) for it.
Parsing a URI, the daemon's job, is ``execserver/wire/uri.py``'s.
"""

from __future__ import annotations

__all__ = ["SAFE", "path_to_uri", "quote_path"]

# Left as they are besides letters, digits and ``_.-~``: the sub-delimiters and
# ``/:@`` a path segment may hold (RFC 3986), as urllib.parse.quote was given.
SAFE = "/-._~!$&'()*+,;=:@"
_SAFE_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~" + SAFE.encode()
_QUOTED = tuple(chr(b) if b in _SAFE_BYTES else f"%{b:02X}" for b in range(256))


def quote_path(path: str) -> str:
    """``urllib.parse.quote(path, safe=SAFE, errors="surrogateescape")``: UTF-8
    (undecodable bytes kept as they were), each byte outside the safe set as
    ``%XX`` (tests/unit/test_file_uri.py compares the two)."""
    data = path.encode("utf-8", "surrogateescape")
    if not data.translate(None, _SAFE_BYTES):
        return path  # nearly every path: nothing to escape
    return "".join([_QUOTED[byte] for byte in data])


def path_to_uri(path: str) -> str:
    """``file:///...`` for an absolute native path, percent-encoding where needed."""
    if not path.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    return "file://" + quote_path(path)
