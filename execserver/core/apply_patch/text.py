"""String helpers that behave like the reference's (Rust) ones.

Python's ``str.strip`` and ``splitlines`` disagree with Rust's ``trim`` and
``lines`` on a few characters (``\\x1c``-``\\x1f`` are whitespace to Python,
``\\x0b``/``\\u2028`` are line breaks to ``splitlines``); a patch containing them
must parse exactly as the reference parses it.
"""

from __future__ import annotations

__all__ = ["patch_lines", "rust_lines", "rust_trim", "rust_trim_end"]

# Unicode White_Space, which is what Rust's char::is_whitespace tests.
_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def rust_trim(text: str) -> str:
    return text.strip(_WHITESPACE)


def rust_trim_end(text: str) -> str:
    return text.rstrip(_WHITESPACE)


def rust_lines(text: str) -> list[str]:
    """Split on ``\\n``, dropping one ``\\r`` before it; a final newline does not
    start another line."""
    if not text:
        return []
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return [p[:-1] if p.endswith("\r") else p for p in parts]


def patch_lines(text: str) -> list[str]:
    """The lines of a patch as the reference reads them: CRLF pairs become LF
    first, then the text is split like ``rust_lines`` - so up to two CRs before
    an LF disappear (``+x\r\r`` adds ``x``, ``+x\r\r\r`` adds ``x\r``), while
    a lone CR inside a line stays part of it."""
    return rust_lines(text.replace("\r\n", "\n"))
